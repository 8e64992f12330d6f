// WordPiece model and BERT pre-tokenizer: hand-built vocabularies in both conventions (HF "##piece",
// GGUF "▁word"), then llama.cpp's vocab test vectors for bert-bge.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <sstream>

#include "core/mmap_file.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/wordpiece_pretok.h"

namespace pelican {
namespace {

using Words = std::vector<std::string>;
using Ids = std::vector<int32_t>;
const std::string kSp = "\xE2\x96\x81";  // "▁"

TokenizerSpec make_spec(std::vector<std::string> tokens, bool lowercase = true) {
    TokenizerSpec s;
    s.kind = TokenizerKind::WordPiece;
    s.tokens = std::move(tokens);
    s.types.assign(s.tokens.size(), TokenType::Normal);
    s.lowercase = lowercase;
    for (size_t i = 0; i < s.tokens.size(); ++i)
        if (s.tokens[i].front() == '[' && s.tokens[i].back() == ']') s.types[i] = TokenType::Control;
    return s;
}

Ids enc(const TokenizerModel& m, std::string_view text) {
    Ids ids;
    m.encode_fragment(text, true, ids);
    return ids;
}

std::string dec(const TokenizerModel& m, const Ids& ids) {
    std::string r;
    for (int32_t id : ids) r += m.decode_token(id);
    return r;
}

TEST(BertPreTokenize, PunctuationWhitespaceAndControl) {
    EXPECT_EQ(bert_pre_tokenize("Hello, world!", false), (Words{"Hello", ",", "world", "!"}));
    EXPECT_EQ(bert_pre_tokenize("  a\tb\n\nc  ", false), (Words{"a", "b", "c"}));
    // ASCII symbols count as punctuation for BERT ($, +, ^, `, ~); digits and letters do not
    EXPECT_EQ(bert_pre_tokenize("a$b+c^d`e~f9", false),
              (Words{"a", "$", "b", "+", "c", "^", "d", "`", "e", "~", "f9"}));
    // Unicode punctuation (U+2014 em dash, U+00BF inverted question mark); U+00BD ½ is No, not P
    EXPECT_EQ(bert_pre_tokenize("a\xE2\x80\x94"
                                "b \xC2\xBF"
                                "c \xC2\xBD",
                                false),
              (Words{"a", "\xE2\x80\x94", "b", "\xC2\xBF", "c", "\xC2\xBD"}));
    // NUL, U+FFFD, control chars and format chars (U+200D ZWJ) vanish; U+3000 is whitespace
    EXPECT_EQ(bert_pre_tokenize(std::string("a\0b\xEF\xBF\xBD"
                                            "c\x07"
                                            "d\xE2\x80\x8D"
                                            "e\xE3\x80\x80"
                                            "f",
                                            20),
                                false),
              (Words{"abcde", "f"}));
    // Malformed UTF-8 decodes to U+FFFD and is dropped
    EXPECT_EQ(bert_pre_tokenize("a\xFF"
                                "b\xC3",
                                false),
              (Words{"ab"}));
    EXPECT_EQ(bert_pre_tokenize("", true), Words{});
}

TEST(BertPreTokenize, CjkIdeographsAreWords) {
    // 我想在apple工作 -> each ideograph alone; Hiragana (not in the CJK ranges) stays joined
    EXPECT_EQ(bert_pre_tokenize("\xE6\x88\x91\xE6\x83\xB3"
                                "apple\xE5\xB7\xA5",
                                false),
              (Words{"\xE6\x88\x91", "\xE6\x83\xB3", "apple", "\xE5\xB7\xA5"}));
    EXPECT_EQ(bert_pre_tokenize("\xE3\x81\x82\xE3\x81\x84", false), (Words{"\xE3\x81\x82\xE3\x81\x84"}));
}

TEST(BertPreTokenize, LowercaseStripsAccents) {
    // Äpfel, Cửa Việt, café (precomposed and decomposed), Ωμέγα
    EXPECT_EQ(bert_pre_tokenize("\xC3\x84pfel C\xE1\xBB\xAD"
                                "a Vi\xE1\xBB\x87t",
                                true),
              (Words{"apfel", "cua", "viet"}));
    EXPECT_EQ(bert_pre_tokenize("caf\xC3\xA9 cafe\xCC\x81", true), (Words{"cafe", "cafe"}));
    EXPECT_EQ(bert_pre_tokenize("\xCE\xA9\xCE\xBC\xCE\xAD\xCE\xB3\xCE\xB1", true),
              (Words{"\xCF\x89\xCE\xBC\xCE\xB5\xCE\xB3\xCE\xB1"}));
    // Without lowercase, accents and case are kept
    EXPECT_EQ(bert_pre_tokenize("\xC3\x84pfel", false), (Words{"\xC3\x84pfel"}));
    // İ: NFD gives I + U+0307, the mark is stripped before lowercasing (HF order)
    EXPECT_EQ(bert_pre_tokenize("\xC4\xB0", true), (Words{"i"}));
}

TEST(WordPiece, HfConventionGreedyLongestMatch) {
    auto spec = make_spec({"[UNK]", "un", "##aff", "##able", "aff", "##a", "##ff", "##abl", ",", "hello"});
    spec.unk_id = 0;
    auto m = make_wordpiece_model(spec);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(enc(**m, "unaffable"), (Ids{1, 2, 3}));  // un ##aff ##able (longest, not ##a ##ff)
    EXPECT_EQ(enc(**m, "Hello, unaffable"), (Ids{9, 8, 1, 2, 3}));
    EXPECT_EQ(enc(**m, "unx hello"), (Ids{0, 9}));  // one unmatched position -> the whole word is unk
    EXPECT_EQ(enc(**m, "aff"), (Ids{4}));
    EXPECT_EQ(dec(**m, enc(**m, "hello unaffable")), " hello unaffable");
    EXPECT_EQ(dec(**m, Ids{0}), "[UNK]");
}

TEST(WordPiece, GgufPhantomConvention) {
    auto spec = make_spec({"[UNK]", kSp + "un", "aff", "able", kSp + "aff", "a", "ff", kSp + ",",
                           kSp + "hello", kSp + "\xE6\x88\x91"});
    auto m = make_wordpiece_model(spec);  // unk found by its text "[UNK]"
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(enc(**m, "unaffable"), (Ids{1, 2, 3}));
    EXPECT_EQ(enc(**m, "HELLO,aff"), (Ids{8, 7, 4}));
    EXPECT_EQ(enc(**m, "affable"), (Ids{4, 3}));
    EXPECT_EQ(enc(**m, "able"), (Ids{0}));  // "able" only exists as a continuation
    EXPECT_EQ(enc(**m, "\xE6\x88\x91\xE6\x88\x91"), (Ids{9, 9}));
    EXPECT_EQ(dec(**m, enc(**m, "hello, unaffable")), " hello , unaffable");
}

TEST(WordPiece, LongWordIsUnk) {
    auto spec = make_spec({"[UNK]", "a", "##a"});
    spec.unk_id = 0;
    auto m = make_wordpiece_model(spec);
    EXPECT_EQ(enc(**m, std::string(100, 'a')).size(), 100u);
    EXPECT_EQ(enc(**m, std::string(101, 'a')), (Ids{0}));
}

TEST(WordPiece, RejectsInconsistentSpec) {
    EXPECT_FALSE(make_wordpiece_model(TokenizerSpec{}).ok());
    auto spec = make_spec({"[UNK]", "a"});
    spec.unk_id = 5;
    EXPECT_FALSE(make_wordpiece_model(spec).ok());
}

// ---- bert-bge -----------------------------------------------------------------------------

std::vector<std::string> split_cases(const std::string& inp) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> cases;
    size_t pos = 0;
    for (size_t next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size())
        cases.push_back(inp.substr(pos, next - pos));
    if (pos < inp.size()) cases.push_back(inp.substr(pos));
    return cases;
}

TEST(WordPieceVocab, BertBge) {
    const std::string path = std::string(PELICAN_SHARED_DIR) + "/data/vocab/ggml-vocab-bert-bge.gguf";
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    TokenizerSpec spec;
    spec.kind = TokenizerKind::WordPiece;
    spec.tokens = f->get_string_array("tokenizer.ggml.tokens").value_or(std::vector<std::string>{});
    for (int32_t t : f->get_i32_array("tokenizer.ggml.token_type").value_or(std::vector<int32_t>{}))
        spec.types.push_back(static_cast<TokenType>(t));
    spec.unk_id = static_cast<int32_t>(f->get_int("tokenizer.ggml.unknown_token_id").value_or(-1));
    spec.lowercase = true;  // llama.cpp's WPM always lowercases (bge is an uncased BERT)
    auto m = make_wordpiece_model(spec);
    ASSERT_TRUE(m.ok()) << m.error().message;

    auto inp = read_text_file(path + ".inp");
    auto out = read_text_file(path + ".out");
    ASSERT_TRUE(inp.ok() && out.ok());
    const auto cases = split_cases(*inp);
    std::vector<Ids> expected;
    std::istringstream lines(*out);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream ids(line);
        expected.emplace_back();
        for (int32_t id; ids >> id;) expected.back().push_back(id);
    }
    ASSERT_EQ(cases.size(), expected.size());
    size_t passed = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const Ids got = enc(**m, cases[i]);
        if (got == expected[i]) {
            ++passed;
        } else {
            ADD_FAILURE() << "case " << i << " [" << cases[i] << "]\n got: " << ::testing::PrintToString(got)
                          << "\n exp: " << ::testing::PrintToString(expected[i]);
        }
    }
    std::printf("bert-bge: %zu/%zu cases passed\n", passed, cases.size());

    // The same vocabulary in the HF convention ("word", "##piece") gives the same ids.
    TokenizerSpec hf = spec;
    for (std::string& t : hf.tokens) {
        if (t.rfind(kSp, 0) == 0)
            t = t.substr(kSp.size());
        else if (!(t.size() > 1 && t.front() == '[' && t.back() == ']'))
            t.insert(0, "##");
    }
    auto m_hf = make_wordpiece_model(hf);
    ASSERT_TRUE(m_hf.ok());
    size_t passed_hf = 0;
    for (size_t i = 0; i < cases.size(); ++i) passed_hf += enc(**m_hf, cases[i]) == expected[i];
    std::printf("bert-bge (HF ## convention): %zu/%zu cases passed\n", passed_hf, cases.size());
    EXPECT_EQ(passed_hf, cases.size());
    EXPECT_EQ(dec(**m_hf, enc(**m_hf, "Hello, y'all!")), " hello , y ' all !");
    // Random bytes: no crash, every id in range.
    std::mt19937 rng(7);
    for (int iter = 0; iter < 300; ++iter) {
        std::string text(rng() % 64 + 1, '\0');
        for (char& c : text) c = static_cast<char>(rng());
        for (int32_t id : enc(**m, text))
            ASSERT_TRUE(id >= 0 && id < static_cast<int32_t>(spec.tokens.size()));
    }
    // Decoding joins the words, each after one space.
    EXPECT_EQ(dec(**m, enc(**m, "Hello, y'all!")), " hello , y ' all !");
}

}  // namespace
}  // namespace pelican
