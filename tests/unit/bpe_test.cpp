// Byte-level BPE pieces: the GPT-2 byte alphabet, regex pre-tokenizers, merge order.
#include <gtest/gtest.h>

#include <set>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace pelican {
namespace {

TEST(ByteUnicode, IsABijectionOnPrintableCodePoints) {
    const ByteUnicode& bu = byte_unicode();
    std::set<std::string> seen;
    for (int b = 0; b < 256; ++b) {
        seen.insert(bu.byte_to_utf8[b]);
        EXPECT_EQ(byte_level_decode(bu.byte_to_utf8[b]), std::string(1, static_cast<char>(b))) << b;
    }
    EXPECT_EQ(seen.size(), 256u);
    EXPECT_EQ(bu.byte_to_utf8[' '], "\xC4\xA0");   // U+0120 'Ġ'
    EXPECT_EQ(bu.byte_to_utf8['\n'], "\xC4\x8A");  // U+010A 'Ċ'
    EXPECT_EQ(bu.byte_to_utf8['a'], "a");
    EXPECT_EQ(bu.byte_to_utf8[0xAD], "\xC5\x83");  // U+0143: the 68th remapped byte
    EXPECT_EQ(byte_level_decode("\xC4\xA0the"), " the");
    EXPECT_EQ(byte_level_decode("<|end|>"), "<|end|>");
    EXPECT_EQ(byte_level_decode("\xE4\xB8\x80"), "\xE4\xB8\x80");  // outside the alphabet: copied
}

TEST(Utf8, DecodeRejectsMalformedSequences) {
    size_t len = 0;
    EXPECT_EQ(utf8_decode("\xC3\xA9", 0, len), 0xE9);
    EXPECT_EQ(len, 2u);
    EXPECT_EQ(utf8_decode("\xC0\xAF", 0, len), -1);  // overlong
    EXPECT_EQ(len, 1u);
    EXPECT_EQ(utf8_decode("\xED\xA0\x80", 0, len), -1);  // surrogate
    EXPECT_EQ(utf8_decode("\xF0\x9F\x98", 0, len), -1);  // truncated
    EXPECT_TRUE(utf8_valid("h\xC3\xA9llo"));
    EXPECT_FALSE(utf8_valid("h\xFFllo"));
    EXPECT_EQ(utf8_nfc("e\xCC\x81"), "\xC3\xA9");  // e + combining acute -> é
    EXPECT_EQ(utf8_nfc("bad\xFF"), "bad\xFF");
}

std::vector<std::string> split_with(const char* preset, std::string_view text) {
    const PreTokenizerPreset* p = find_pretokenizer_preset(preset);
    EXPECT_NE(p, nullptr) << preset;
    if (!p) return {};
    auto pt = PreTokenizer::create(p->regexes);
    EXPECT_TRUE(pt.ok()) << pt.error().message;
    std::vector<std::string_view> pieces;
    pt->split(text, pieces);
    return {pieces.begin(), pieces.end()};
}

using V = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
    EXPECT_EQ(split_with("gpt-2", "Hello world's  123!!"), (V{"Hello", " world", "'s", " ", " 123", "!!"}));
    EXPECT_EQ(split_with("gpt-2", "a   \n"), (V{"a", "   \n"}));
    EXPECT_EQ(split_with("gpt-2", "I'M"), (V{"I", "'", "M"}));  // case-sensitive contractions
}

TEST(PreTokenizer, Llama3AndQwen2Digits) {
    EXPECT_EQ(split_with("llama-bpe", "12345 I'M"), (V{"123", "45", " I", "'M"}));
    EXPECT_EQ(split_with("qwen2", "12345"), (V{"1", "2", "3", "4", "5"}));
    EXPECT_EQ(split_with("llama-bpe", "x\n\n  y"), (V{"x", "\n\n", " ", " y"}));
    EXPECT_EQ(split_with("llama-bpe", "(hi)"), (V{"(hi", ")"}));
}

TEST(PreTokenizer, SequencesOfRegexes) {
    EXPECT_EQ(split_with("starcoder", "ab12"), (V{"ab", "1", "2"}));
    EXPECT_EQ(split_with("falcon", "x=12345;"), (V{"x", "=", "123", "45", ";"}));
    EXPECT_EQ(split_with("deepseek-coder", "a\nb 12"), (V{"a", "\n", "b", " ", "1", "2"}));
    EXPECT_EQ(split_with("deepseek-llm", "Hi  "), (V{"Hi", "  "}));
}

TEST(PreTokenizer, InvalidUtf8IsKeptAndNeverCrashes) {
    const std::string text = "ab\xFF\xFE cd \xC3\x28 \xE2\x82";
    std::string joined;
    for (const auto& p : split_with("llama-bpe", text)) joined += p;
    EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, BadRegexIsAnError) {
    auto pt = PreTokenizer::create({"(unclosed"});
    ASSERT_FALSE(pt.ok());
    EXPECT_NE(pt.error().message.find("(unclosed"), std::string::npos);
}

// A toy byte-level vocabulary: ids 0..255 are the byte characters, then `extra` tokens.
TokenizerSpec toy_spec(std::vector<std::string> extra,
                       std::vector<std::pair<std::string, std::string>> merges) {
    TokenizerSpec s;
    s.kind = TokenizerKind::BPE;
    for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_unicode().byte_to_utf8[b]);
    for (auto& e : extra) s.tokens.push_back(e);
    s.types.assign(s.tokens.size(), TokenType::Normal);
    s.merges = std::move(merges);
    s.pre_regexes = find_pretokenizer_preset("gpt-2")->regexes;
    return s;
}

std::vector<int32_t> encode(const TokenizerSpec& spec, std::string_view text) {
    auto m = make_bpe_model(spec);
    EXPECT_TRUE(m.ok()) << m.error().message;
    std::vector<int32_t> out;
    if (m.ok()) (*m)->encode_fragment(text, true, out);
    return out;
}

TEST(Bpe, MergesApplyLowestRankFirst) {
    // ids: 256 "ab", 257 "bc"
    EXPECT_EQ(encode(toy_spec({"ab", "bc"}, {{"a", "b"}, {"b", "c"}}), "abc"),
              (std::vector<int32_t>{256, 'c'}));
    EXPECT_EQ(encode(toy_spec({"ab", "bc"}, {{"b", "c"}, {"a", "b"}}), "abc"),
              (std::vector<int32_t>{'a', 257}));
}

TEST(Bpe, TiesGoLeftmostAndChainsBuildWords) {
    EXPECT_EQ(encode(toy_spec({"aa"}, {{"a", "a"}}), "aaa"), (std::vector<int32_t>{256, 'a'}));
    // "Ġhe" + "llo" -> "Ġhello" (ids 256..260)
    auto spec =
        toy_spec({"\xC4\xA0h", "\xC4\xA0he", "ll", "llo", "\xC4\xA0hello"},
                 {{"\xC4\xA0", "h"}, {"\xC4\xA0h", "e"}, {"l", "l"}, {"ll", "o"}, {"\xC4\xA0he", "llo"}});
    EXPECT_EQ(encode(spec, " hello"), (std::vector<int32_t>{260}));
    EXPECT_EQ(encode(spec, " hell"), (std::vector<int32_t>{257, 258}));
}

TEST(Bpe, IgnoreMergesEmitsWholeTokens) {
    auto spec = toy_spec({"abc"}, {});
    EXPECT_EQ(encode(spec, "abc"), (std::vector<int32_t>{'a', 'b', 'c'}));
    spec.ignore_merges = true;
    EXPECT_EQ(encode(spec, "abc"), (std::vector<int32_t>{256}));
}

TEST(Bpe, MissingByteTokensBecomeUnkOrAreDropped) {
    auto spec = toy_spec({"<unk>"}, {});
    spec.tokens['z'] = "<not-z>";
    EXPECT_EQ(encode(spec, "az"), (std::vector<int32_t>{'a'}));
    spec.unk_id = 256;
    EXPECT_EQ(encode(spec, "az"), (std::vector<int32_t>{'a', 256}));
}

TEST(Bpe, MergesOfUnknownTextsAreSkipped) {
    auto m = BpeModel::create(toy_spec({}, {{"a", "b"}, {"nope", "x"}}));  // "ab" is not a token
    ASSERT_TRUE(m.ok());
    EXPECT_EQ((*m)->n_skipped_merges(), 2u);
}

TEST(Bpe, DecodeMapsBytesBack) {
    auto spec = toy_spec({"\xC4\xA0hi", "<|x|>"}, {});
    spec.types[257] = TokenType::UserDefined;
    auto m = make_bpe_model(spec);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ((*m)->decode_token(256), " hi");
    EXPECT_EQ((*m)->decode_token(257), "<|x|>");
    EXPECT_EQ((*m)->decode_token(-1), "");
    EXPECT_EQ((*m)->decode_token(9999), "");
}

}  // namespace
}  // namespace pelican
