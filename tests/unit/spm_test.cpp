// SPM model: hand-built vocabularies, then llama.cpp's vocab test vectors for llama-spm and phi-3.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>

#include "core/mmap_file.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

const std::string kVocabDir = std::string(PELICAN_SHARED_DIR) + "/data/vocab/";

// Vocab: one token per entry, in id order; `scores` alongside.
TokenizerSpec make_spec(std::vector<std::string> tokens, std::vector<float> scores, bool prefix) {
    TokenizerSpec s;
    s.kind = TokenizerKind::SPM;
    s.tokens = std::move(tokens);
    s.scores = std::move(scores);
    s.types.assign(s.tokens.size(), TokenType::Normal);
    s.add_space_prefix = prefix;
    for (size_t i = 0; i < s.tokens.size(); ++i) {
        if (s.tokens[i] == "<unk>") s.types[i] = TokenType::Unknown, s.unk_id = static_cast<int32_t>(i);
        if (s.tokens[i].rfind("<0x", 0) == 0) s.types[i] = TokenType::Byte;
    }
    return s;
}

std::vector<int32_t> enc(const TokenizerModel& m, std::string_view text, bool first = true) {
    std::vector<int32_t> ids;
    m.encode_fragment(text, first, ids);
    return ids;
}

std::string dec(const TokenizerModel& m, const std::vector<int32_t>& ids) {
    std::string r;
    for (int32_t id : ids) r += m.decode_token(id);
    return r;
}

TEST(Spm, MergesHighestScoreFirst) {
    // "abc": ab (score -1) beats bc (score -2); then "ab"+"c" has no token.
    auto spec = make_spec({"<unk>", "a", "b", "c", "ab", "bc"}, {0, -5, -5, -5, -1, -2}, false);
    auto m = make_spm_model(spec);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(enc(**m, "abc"), (std::vector<int32_t>{4, 3}));
    spec.scores[5] = 0;  // now bc wins
    auto m2 = make_spm_model(spec);
    EXPECT_EQ(enc(**m2, "abc"), (std::vector<int32_t>{1, 5}));
}

TEST(Spm, TiesGoLeftmostAndMergesChain) {
    // "aaaa": aa ties everywhere -> leftmost pairs first: (aa)(aa) -> aaaa
    auto spec = make_spec({"<unk>", "a", "aa", "aaaa", "aaa"}, {0, -9, -1, -3, -2}, false);
    auto m = make_spm_model(spec);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(enc(**m, "aaaa"), (std::vector<int32_t>{3}));
    EXPECT_EQ(enc(**m, "aaa"), (std::vector<int32_t>{4}));  // (aa)a, then aa+a -> aaa
    // (aa)aaa -> (aa)(aa)a -> aaa (-2) beats aaaa (-3): aa|aaa
    EXPECT_EQ(enc(**m, "aaaaa"), (std::vector<int32_t>{2, 4}));
}

TEST(Spm, MergeOnlyThroughVocabIntermediates) {
    // "abc" is a token but neither "ab" nor "bc" is: SPM BPE cannot reach it.
    auto spec = make_spec({"<unk>", "a", "b", "c", "abc"}, {0, -1, -1, -1, 10}, false);
    auto m = make_spm_model(spec);
    EXPECT_EQ(enc(**m, "abc"), (std::vector<int32_t>{1, 2, 3}));
}

TEST(Spm, SpacePrefixOnlyOnFirstFragment) {
    const std::string sp = "\xE2\x96\x81";
    auto spec = make_spec({"<unk>", sp, "a", sp + "a", "b", sp + "b"}, {0, -3, -3, -1, -3, -1}, true);
    auto m = make_spm_model(spec);
    EXPECT_EQ(enc(**m, "a b"), (std::vector<int32_t>{3, 5}));
    EXPECT_EQ(enc(**m, "a b", false), (std::vector<int32_t>{2, 5}));
    EXPECT_EQ(enc(**m, " a"), (std::vector<int32_t>{1, 3}));
    EXPECT_EQ(enc(**m, ""), (std::vector<int32_t>{}));
    EXPECT_EQ(dec(**m, enc(**m, "a b")), " a b");
    auto spec2 = spec;
    spec2.add_space_prefix = false;
    auto m2 = make_spm_model(spec2);
    EXPECT_EQ(enc(**m2, "a b"), (std::vector<int32_t>{2, 5}));
}

TEST(Spm, ByteFallbackAndUnk) {
    std::vector<std::string> toks = {"<unk>", "a"};
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
        toks.push_back(buf);
    }
    auto spec = make_spec(toks, std::vector<float>(toks.size(), 0.0f), false);
    auto m = make_spm_model(spec);
    ASSERT_TRUE(m.ok());
    // "é" = C3 A9 -> two byte tokens; ids are byte + 2
    EXPECT_EQ(enc(**m, "a\xC3\xA9"), (std::vector<int32_t>{1, 2 + 0xC3, 2 + 0xA9}));
    EXPECT_EQ(dec(**m, enc(**m, "a\xC3\xA9")), "a\xC3\xA9");
    // Truncated / malformed UTF-8 still round-trips through bytes.
    const std::string bad =
        "\xE2\x82"
        "a\xFF\xC3";
    EXPECT_EQ(dec(**m, enc(**m, bad)), bad);

    // Without byte tokens: one unk per unknown character.
    auto spec2 = make_spec({"<unk>", "a"}, {0, 0}, false);
    auto m2 = make_spm_model(spec2);
    EXPECT_EQ(enc(**m2,
                  "a\xC3\xA9"
                  "b"),
              (std::vector<int32_t>{1, 0, 0}));
    spec.byte_fallback = false;
    auto m3 = make_spm_model(spec);
    EXPECT_EQ(enc(**m3, "\xC3\xA9"), (std::vector<int32_t>{0}));
}

TEST(Spm, RejectsInconsistentSpec) {
    auto spec = make_spec({"<unk>", "a"}, {0}, false);
    EXPECT_FALSE(make_spm_model(spec).ok());
    EXPECT_FALSE(make_spm_model(TokenizerSpec{}).ok());
    auto spec2 = make_spec({"<unk>", "a"}, {0, 0}, false);
    spec2.unk_id = 7;
    EXPECT_FALSE(make_spm_model(spec2).ok());
}

// ---- real vocabularies ------------------------------------------------------------------

// TokenizerSpec from a GGUF the way llama.cpp reads it (add_space_prefix defaults to true for SPM).
TokenizerSpec spec_from_gguf(const GgufFile& f) {
    TokenizerSpec s;
    s.kind = TokenizerKind::SPM;
    s.tokens = f.get_string_array("tokenizer.ggml.tokens").value_or(std::vector<std::string>{});
    s.scores = f.get_f32_array("tokenizer.ggml.scores").value_or(std::vector<float>{});
    for (int32_t t : f.get_i32_array("tokenizer.ggml.token_type").value_or(std::vector<int32_t>{}))
        s.types.push_back(static_cast<TokenType>(t));
    s.unk_id = static_cast<int32_t>(f.get_int("tokenizer.ggml.unknown_token_id").value_or(-1));
    s.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    return s;
}

std::vector<std::string> split_cases(const std::string& inp) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> cases;
    size_t pos = 0;
    for (size_t next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size())
        cases.push_back(inp.substr(pos, next - pos));
    if (pos < inp.size()) cases.push_back(inp.substr(pos));
    return cases;
}

std::vector<std::vector<int32_t>> read_expected(const std::string& out) {
    std::vector<std::vector<int32_t>> r;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream ids(line);
        r.emplace_back();
        for (int32_t id; ids >> id;) r.back().push_back(id);
    }
    return r;
}

void run_vocab(const std::string& name) {
    const std::string path = kVocabDir + "ggml-vocab-" + name + ".gguf";
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    const TokenizerSpec spec = spec_from_gguf(*f);
    auto m = make_spm_model(spec);
    ASSERT_TRUE(m.ok()) << m.error().message;
    auto inp = read_text_file(path + ".inp");
    auto out = read_text_file(path + ".out");
    ASSERT_TRUE(inp.ok() && out.ok());
    const auto cases = split_cases(*inp);
    const auto expected = read_expected(*out);
    ASSERT_EQ(cases.size(), expected.size());
    size_t passed = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto got = enc(**m, cases[i]);
        if (got == expected[i])
            ++passed;
        else
            ADD_FAILURE() << name << " case " << i << " [" << cases[i] << "]";
        // Lossless up to the added leading space.
        if (!cases[i].empty()) {
            EXPECT_EQ(dec(**m, got), " " + cases[i]) << name << " case " << i;
        }
    }
    std::printf("%s: %zu/%zu cases passed\n", name.c_str(), passed, cases.size());
}

TEST(SpmVocab, LlamaSpm) { run_vocab("llama-spm"); }
TEST(SpmVocab, Phi3) { run_vocab("phi-3"); }

TEST(SpmVocab, RandomBytesRoundTrip) {
    auto f = GgufFile::open(kVocabDir + "ggml-vocab-llama-spm.gguf");
    ASSERT_TRUE(f.ok());
    const TokenizerSpec spec = spec_from_gguf(*f);
    auto m = make_spm_model(spec);
    ASSERT_TRUE(m.ok());
    std::mt19937 rng(42);
    for (int iter = 0; iter < 300; ++iter) {
        std::string text(rng() % 64 + 1, '\0');
        // mix of ASCII, spaces, UTF-8 lead/continuation bytes and arbitrary bytes (but no literal "▁",
        // which SPM cannot tell from an escaped space)
        const std::string alphabet = "ab \n\xC3\xA9\xE2\x96\xF0\x9F\xA6\x99";
        for (char& c : text) c = rng() % 3 ? alphabet[rng() % alphabet.size()] : static_cast<char>(rng());
        const auto ids = enc(**m, text);
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < static_cast<int32_t>(spec.tokens.size()));
        EXPECT_EQ(dec(**m, ids), " " + text);
    }
}

// A large-input correctness check (lossless round trip); it prints the time but asserts none.
TEST(SpmVocab, WikitextRoundTrip) {
    auto f = GgufFile::open(kVocabDir + "ggml-vocab-llama-spm.gguf");
    ASSERT_TRUE(f.ok());
    const TokenizerSpec spec = spec_from_gguf(*f);
    auto m = make_spm_model(spec);
    ASSERT_TRUE(m.ok());
    auto text = read_text_file(std::string(PELICAN_SHARED_DIR) + "/data/text/wikitext-2-raw-test.txt");
    if (!text.ok()) GTEST_SKIP() << "no wikitext";
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = enc(**m, *text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wikitext-2 test: %zu bytes -> %zu tokens in %.3f s\n", text->size(), ids.size(), s);
    EXPECT_EQ(dec(**m, ids), " " + *text);
}

}  // namespace
}  // namespace pelican
