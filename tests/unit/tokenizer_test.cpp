// Tokenizer core: added-token partitioning, BOS/EOS, decode, spec validation, from_gguf, load.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "formats/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace pelican {
namespace {

using Ids = std::vector<int32_t>;

// Byte-level toy vocabulary: ids 0..255 are the bytes, 256 "<s>" (control), 257 "<|end|>" (control),
// 258 "<user>" (user-defined), 259 "<a>" and 260 "<a>b" (user-defined), 261 "hi".
TokenizerSpec toy_spec() {
    TokenizerSpec s;
    s.kind = TokenizerKind::BPE;
    for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_unicode().byte_to_utf8[b]);
    s.types.assign(256, TokenType::Normal);
    const std::pair<const char*, TokenType> extra[] = {
        {"<s>", TokenType::Control},     {"<|end|>", TokenType::Control},  {"<user>", TokenType::UserDefined},
        {"<a>", TokenType::UserDefined}, {"<a>b", TokenType::UserDefined}, {"hi", TokenType::Normal},
    };
    for (auto& [t, ty] : extra) {
        s.tokens.push_back(t);
        s.types.push_back(ty);
    }
    s.merges = {{"h", "i"}};
    s.pre_regexes = find_pretokenizer_preset("gpt-2")->regexes;
    s.bos_id = 256;
    s.eos_id = 257;
    return s;
}

Tokenizer toy() {
    auto t = Tokenizer::from_spec(toy_spec());
    EXPECT_TRUE(t.ok()) << t.error().message;
    return std::move(t).value();
}

TEST(Tokenizer, ControlTokensNeedParseSpecial) {
    Tokenizer t = toy();
    EXPECT_EQ(t.encode("hi<|end|>"), (Ids{261, '<', '|', 'e', 'n', 'd', '|', '>'}));
    EXPECT_EQ(t.encode("hi<|end|>", {.parse_special = true}), (Ids{261, 257}));
    EXPECT_EQ(t.encode("<s>hi<s>", {.parse_special = true}), (Ids{256, 261, 256}));
}

TEST(Tokenizer, UserDefinedTokensAlwaysMatchLongestFirst) {
    Tokenizer t = toy();
    EXPECT_EQ(t.encode("hi<user>hi"), (Ids{261, 258, 261}));
    EXPECT_EQ(t.encode("<a>bc"), (Ids{260, 'c'}));
    EXPECT_EQ(t.encode("<a>c"), (Ids{259, 'c'}));
    EXPECT_EQ(t.encode("<a"), (Ids{'<', 'a'}));  // a prefix at the end of the text
}

TEST(Tokenizer, AddSpecialFollowsTheSpec) {
    auto spec = toy_spec();
    spec.add_bos = true;
    spec.add_eos = true;
    auto t = Tokenizer::from_spec(spec);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->encode("hi", {.add_special = true}), (Ids{256, 261, 257}));
    EXPECT_EQ(t->encode("hi"), (Ids{261}));
    EXPECT_EQ(t->encode("", {.add_special = true}), (Ids{256, 257}));
    EXPECT_EQ(toy().encode("hi", {.add_special = true}), (Ids{261}));  // add_bos/add_eos off
}

TEST(Tokenizer, DecodeSkipsSpecialsAndBadIds) {
    Tokenizer t = toy();
    const Ids ids = {256, 261, ' ', 258, 257};
    EXPECT_EQ(t.decode(ids), "<s>hi <user><|end|>");
    EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "hi <user>");
    EXPECT_EQ(t.decode(Ids{-5, 'a', 1 << 30, 'b', 262}), "ab");
    EXPECT_EQ(t.token_text(261), "hi");
    EXPECT_EQ(t.token_text(-1), "");
    const std::string text = "x <|end|> y\xFF\n";
    EXPECT_EQ(t.decode(t.encode(text, {.parse_special = true})), text);
}

TEST(Tokenizer, FromSpecValidates) {
    TokenizerSpec empty;
    EXPECT_FALSE(Tokenizer::from_spec(empty).ok());
    auto s = toy_spec();
    s.types.pop_back();
    EXPECT_FALSE(Tokenizer::from_spec(s).ok());
    s = toy_spec();
    s.eos_id = 100000;
    auto r = Tokenizer::from_spec(s);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("eos"), std::string::npos) << r.error().message;
    s = toy_spec();
    s.pre_regexes = {"[unclosed"};
    EXPECT_FALSE(Tokenizer::from_spec(s).ok());
}

// Minimal GGUF v3 writer for metadata-only files.
class GgufBuilder {
public:
    void str(const std::string& key, const std::string& v) {
        begin(key, 8);
        put_str(v);
    }
    void u32(const std::string& key, uint32_t v) {
        begin(key, 4);
        put(v);
    }
    void boolean(const std::string& key, bool v) {
        begin(key, 7);
        put(static_cast<uint8_t>(v));
    }
    void strs(const std::string& key, const std::vector<std::string>& v) {
        begin(key, 9);
        put(uint32_t{8});
        put(static_cast<uint64_t>(v.size()));
        for (auto& s : v) put_str(s);
    }
    void i32s(const std::string& key, const std::vector<int32_t>& v) {
        begin(key, 9);
        put(uint32_t{5});
        put(static_cast<uint64_t>(v.size()));
        for (auto x : v) put(x);
    }
    std::vector<uint8_t> bytes() const {
        std::vector<uint8_t> out;
        auto app = [&](const void* p, size_t n) {
            out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
        };
        app("GGUF", 4);
        const uint32_t version = 3;
        const uint64_t n_tensors = 0;
        app(&version, 4);
        app(&n_tensors, 8);
        app(&n_kv_, 8);
        out.insert(out.end(), body_.begin(), body_.end());
        while (out.size() % 32) out.push_back(0);
        return out;
    }

private:
    template <typename T>
    void put(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        body_.insert(body_.end(), p, p + sizeof(T));
    }
    void put_str(const std::string& s) {
        put(static_cast<uint64_t>(s.size()));
        body_.insert(body_.end(), s.begin(), s.end());
    }
    void begin(const std::string& key, uint32_t type) {
        ++n_kv_;
        put_str(key);
        put(type);
    }
    std::vector<uint8_t> body_;
    uint64_t n_kv_ = 0;
};

// A tiny "gpt2" vocabulary: bytes, "hi", "<|eot|>" (control).
GgufBuilder gpt2_builder(const std::string& pre) {
    GgufBuilder b;
    b.str("tokenizer.ggml.model", "gpt2");
    if (!pre.empty()) b.str("tokenizer.ggml.pre", pre);
    std::vector<std::string> toks;
    std::vector<int32_t> types;
    for (int i = 0; i < 256; ++i) toks.push_back(byte_unicode().byte_to_utf8[i]), types.push_back(1);
    toks.push_back("hi"), types.push_back(1);
    toks.push_back("<|eot|>"), types.push_back(3);
    b.strs("tokenizer.ggml.tokens", toks);
    b.i32s("tokenizer.ggml.token_type", types);
    b.strs("tokenizer.ggml.merges", {"h i"});
    b.u32("tokenizer.ggml.bos_token_id", 257);
    b.u32("tokenizer.ggml.eos_token_id", 257);
    b.str("tokenizer.chat_template", "{{ messages }}");
    return b;
}

Expected<Tokenizer> from_builder(const GgufBuilder& b, std::vector<uint8_t>& storage) {
    storage = b.bytes();
    PELICAN_ASSIGN(GgufFile f, GgufFile::parse(storage, "test.gguf"));
    return Tokenizer::from_gguf(f);
}

TEST(FromGguf, ReadsAGpt2Vocabulary) {
    std::vector<uint8_t> mem;
    auto b = gpt2_builder("llama-bpe");
    auto t = from_builder(b, mem);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->spec().kind, TokenizerKind::BPE);
    EXPECT_TRUE(t->spec().ignore_merges);
    EXPECT_TRUE(t->spec().add_bos);  // llama-bpe default
    EXPECT_EQ(t->spec().chat_template, "{{ messages }}");
    EXPECT_EQ(t->spec().eos_text, "<|eot|>");
    EXPECT_EQ(t->encode("hi!", {.add_special = true}), (Ids{257, 256, '!'}));
    EXPECT_EQ(t->encode("<|eot|>", {.parse_special = true}), (Ids{257}));

    b.boolean("tokenizer.ggml.add_bos_token", false);
    auto t2 = from_builder(b, mem);
    ASSERT_TRUE(t2.ok());
    EXPECT_FALSE(t2->spec().add_bos);
}

TEST(FromGguf, UnknownPreFallsBackToGpt2) {
    std::vector<uint8_t> mem;
    auto t = from_builder(gpt2_builder("no-such-pre"), mem);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->spec().pre_regexes, default_pretokenizer_preset().regexes);
    EXPECT_FALSE(t->spec().add_bos);
}

TEST(FromGguf, RejectsBadMetadata) {
    std::vector<uint8_t> mem;
    GgufBuilder none;
    none.str("general.name", "x");
    auto r = from_builder(none, mem);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("tokenizer.ggml.model"), std::string::npos) << r.error().message;

    GgufBuilder other;
    other.str("tokenizer.ggml.model", "rwkv");
    other.strs("tokenizer.ggml.tokens", {"a"});
    r = from_builder(other, mem);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("rwkv"), std::string::npos) << r.error().message;

    auto b = gpt2_builder("gpt-2");
    b.i32s("tokenizer.ggml.token_type", {1, 1});  // duplicate key or wrong size: either is an error
    EXPECT_FALSE(from_builder(b, mem).ok());

    GgufBuilder no_merges;
    no_merges.str("tokenizer.ggml.model", "gpt2");
    no_merges.strs("tokenizer.ggml.tokens", {"a", "b"});
    r = from_builder(no_merges, mem);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("merges"), std::string::npos) << r.error().message;

    GgufBuilder bad_merge = gpt2_builder("gpt-2");
    bad_merge.strs("tokenizer.ggml.merges", {"nospace"});
    EXPECT_FALSE(from_builder(bad_merge, mem).ok());
}

TEST(FromGguf, OutOfRangeSpecialIdsAreIgnored) {
    std::vector<uint8_t> mem;
    GgufBuilder b;
    b.str("tokenizer.ggml.model", "gpt2");
    b.strs("tokenizer.ggml.tokens", {"a", "b", "ab"});
    b.strs("tokenizer.ggml.merges", {"a b"});
    b.u32("tokenizer.ggml.eos_token_id", 99);
    auto t = from_builder(b, mem);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->spec().eos_id, -1);
    EXPECT_EQ(t->encode("ab"), (Ids{2}));
}

TEST(TokenizerLoad, ClearErrors) {
    auto r = Tokenizer::load("/nonexistent/model.gguf");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("/nonexistent/model.gguf"), std::string::npos);
    const std::string junk = (std::filesystem::temp_directory_path() / "pelican_tok_junk.bin").string();
    FILE* f = std::fopen(junk.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("not a model", f);
    std::fclose(f);
    EXPECT_FALSE(Tokenizer::load(junk).ok());
    std::remove(junk.c_str());
}

TEST(TokenizerLoad, LoadsAGgufVocab) {
    auto t = Tokenizer::load(std::string(PELICAN_SHARED_DIR) + "/data/vocab/ggml-vocab-gpt-2.gguf");
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->encode("Hello world"), (Ids{15496, 995}));
}

}  // namespace
}  // namespace pelican
