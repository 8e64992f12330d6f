// llama.cpp's tokenizer test vectors: for every ../shared/data/vocab/*.gguf with .inp/.out,
// encode each case (no BOS/EOS, no special-token parsing) and compare with the expected ids.
// One test per vocabulary; it prints "<vocab>: N/M cases passed" and the first mismatches.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;

const std::string kVocabDir = std::string(PELICAN_SHARED_DIR) + "/data/vocab";

// "ggml-vocab-gpt-2.gguf" -> "gpt-2"
std::string vocab_name(const fs::path& p) {
    std::string s = p.stem().string();
    const std::string prefix = "ggml-vocab-";
    return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

std::vector<fs::path> all_vocabs() {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(kVocabDir, ec)) {
        if (e.path().extension() == ".gguf") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::string> vocabs_with_vectors() {
    std::vector<std::string> out;
    for (const auto& p : all_vocabs()) {
        if (fs::exists(p.string() + ".inp") && fs::exists(p.string() + ".out")) out.push_back(p.string());
    }
    return out;
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
    std::vector<std::string> parts;
    size_t pos = 0;
    for (size_t at; (at = s.find(sep, pos)) != std::string::npos; pos = at + sep.size()) {
        parts.push_back(s.substr(pos, at - pos));
    }
    parts.push_back(s.substr(pos));
    return parts;
}

std::vector<int32_t> parse_ids(const std::string& line) {
    std::vector<int32_t> ids;
    std::istringstream in(line);
    for (long v; in >> v;) ids.push_back(static_cast<int32_t>(v));
    return ids;
}

std::string join(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) {
        if (!s.empty()) s += ' ';
        s += std::to_string(id);
    }
    return s;
}

std::string escape(const std::string& s) {
    std::string o;
    for (unsigned char c : s) {
        if (c == '\n')
            o += "\\n";
        else if (c == '\t')
            o += "\\t";
        else if (c == '\r')
            o += "\\r";
        else
            o += static_cast<char>(c);
    }
    return o.size() > 120 ? o.substr(0, 120) + "..." : o;
}

Expected<Tokenizer> load_vocab(const std::string& path) {
    PELICAN_ASSIGN(GgufFile f, GgufFile::open(path));
    return Tokenizer::from_gguf(f);
}

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, MatchesReferenceIds) {
    const std::string path = GetParam();
    const std::string name = vocab_name(path);
    auto tok = load_vocab(path);
    ASSERT_TRUE(tok.ok()) << tok.error().message;

    auto inp = read_text_file(path + ".inp");
    auto out = read_text_file(path + ".out");
    ASSERT_TRUE(inp.ok() && out.ok());
    std::vector<std::string> cases = split(*inp, "\n__ggml_vocab_test__\n");
    std::vector<std::string> lines = split(*out, "\n");
    if (!cases.empty() && cases.back().empty()) cases.pop_back();  // trailing separator
    ASSERT_GE(lines.size(), cases.size()) << name << ": fewer expected lines than cases";

    const bool byte_level = tok->spec().kind == TokenizerKind::BPE;
    const bool lossless = tok->spec().kind != TokenizerKind::WordPiece;
    size_t passed = 0, round_trips = 0, shown = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::vector<int32_t> want = parse_ids(lines[i]);
        const std::vector<int32_t> got =
            tok->encode(cases[i], {.add_special = false, .parse_special = false});
        if (got == want) {
            ++passed;
        } else if (shown++ < 5) {
            ADD_FAILURE() << name << " case " << i << " \"" << escape(cases[i])
                          << "\"\n  expected: " << join(want) << "\n  got:      " << join(got);
        }
        if (lossless) {
            const std::string expect = tok->spec().normalize_nfc ? utf8_nfc(cases[i]) : cases[i];
            const std::string back = tok->decode(got);
            if (back == expect) {
                ++round_trips;
            } else {
                ADD_FAILURE() << name << " case " << i << " does not round-trip: \"" << escape(cases[i])
                              << "\" -> \"" << escape(back) << "\"";
            }
        }
    }
    std::printf("%s: %zu/%zu cases passed", name.c_str(), passed, cases.size());
    if (lossless)
        std::printf(", %zu/%zu round-trip%s", round_trips, cases.size(), byte_level ? " (byte-level)" : "");
    std::printf("\n");
    EXPECT_EQ(passed, cases.size()) << name;
}

INSTANTIATE_TEST_SUITE_P(Vocab, VocabVectors, ::testing::ValuesIn(vocabs_with_vectors()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             std::string n = vocab_name(info.param);
                             for (char& c : n) {
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             }
                             return n;
                         });

TEST(VocabFiles, VectorsArePresent) {
    // Guards against the parameterized test silently running on nothing.
    EXPECT_GE(vocabs_with_vectors().size(), 12u) << "vocab test vectors missing in " << kVocabDir;
}

TEST(VocabFiles, EveryVocabLoadsAndRoundTrips) {
    const std::string text = "Hello world! 123 ünïcödé\n\tend";
    for (const auto& p : all_vocabs()) {
        auto tok = load_vocab(p.string());
        ASSERT_TRUE(tok.ok()) << p << ": " << tok.error().message;
        const auto ids = tok->encode(text);
        EXPECT_FALSE(ids.empty()) << p;
        if (tok->spec().kind == TokenizerKind::BPE) {
            EXPECT_EQ(tok->decode(ids), text) << p;
        }
    }
}

}  // namespace
}  // namespace pelican
