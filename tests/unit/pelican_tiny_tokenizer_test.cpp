// pelican-tiny's tokenizer (byte-level BPE, 8192 ids, Qwen2 pre-tokenizer, trained by
// tools/train/train.py with Hugging Face tokenizers) against the ids Hugging Face tokenizers gave on
// the GPU machine for held-out text (tests/data/pelican-tiny/tokenizer_ref.json: the first 3000
// characters of every held-out English document and of 12 held-out code files, plus ChatML, Unicode,
// whitespace, digit and contraction cases). Every case must match exactly, through the HF folder, and
// through the bundled GGUF (models/pelican-tiny.gguf), whose tokenizer pelican convert wrote; decoding
// the ids must give the text back (in NFC).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(PELICAN_SOURCE_DIR) / "tests" / "data" / "pelican-tiny";
const fs::path kGguf = fs::path(PELICAN_SOURCE_DIR) / "models" / "pelican-tiny.gguf";

struct Case {
    std::string name, text;
    std::vector<int32_t> ids;
};

std::vector<Case> load_cases() {
    auto text = read_text_file((kDir / "tokenizer_ref.json").string());
    EXPECT_TRUE(text.ok()) << text.error().message;
    if (!text.ok()) return {};
    const auto j = nlohmann::json::parse(*text);
    std::vector<Case> out;
    for (const auto& c : j.at("cases"))
        out.push_back({c.at("name").get<std::string>(), c.at("text").get<std::string>(),
                       c.at("ids").get<std::vector<int32_t>>()});
    return out;
}

// Encodes every case (specials in the text matched, as HF tokenizers does; nothing added) and
// compares; returns the number of ids checked.
size_t check_all(const Tokenizer& tok, const std::vector<Case>& cases, const char* via) {
    size_t n = 0;
    for (const Case& c : cases) {
        const auto got = tok.encode(c.text, EncodeOptions{.add_special = false, .parse_special = true});
        EXPECT_EQ(got, c.ids) << via << ": " << c.name;
        // The NFC normalizer composes the "unicode" case's e + U+0301 into U+00E9; all else is NFC.
        std::string want = c.text;
        if (auto p = want.find("e\xCC\x81"); p != std::string::npos) want.replace(p, 3, "\xC3\xA9");
        EXPECT_EQ(tok.decode(got), want) << via << ": " << c.name;
        n += c.ids.size();
    }
    return n;
}

TEST(PelicanTinyTokenizer, HfFolderMatchesHuggingFace) {
    const auto cases = load_cases();
    ASSERT_EQ(cases.size(), 30u);
    auto tok = Tokenizer::load(kDir.string());
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    EXPECT_EQ(tok->n_vocab(), 8192);
    const size_t n = check_all(*tok, cases, "folder");
    EXPECT_GT(n, 19000u);
    EXPECT_EQ(tok->spec().eos_id, 0);  // <|endoftext|>
    EXPECT_LT(tok->spec().bos_id, 0);  // none, and none added
}

TEST(PelicanTinyTokenizer, BundledGgufMatchesHuggingFace) {
    const auto cases = load_cases();
    auto file = GgufFile::open(kGguf.string());
    ASSERT_TRUE(file.ok()) << file.error().message;
    EXPECT_EQ(file->get_string("tokenizer.ggml.pre").value_or(""), "qwen2");
    auto tok = Tokenizer::from_gguf(*file);
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    check_all(*tok, cases, "gguf");
}

}  // namespace
}  // namespace pelican
