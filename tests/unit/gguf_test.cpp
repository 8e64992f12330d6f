// GGUF reader: the shared llama.cpp vocab files, hand-built corrupt files (one per error class).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "gguf_test_util.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using test::GgufBuilder;

std::vector<std::string> vocab_files() {
    std::vector<std::string> out;
    fs::path dir = fs::path(PELICAN_SHARED_DIR) / "data" / "vocab";
    if (!fs::exists(dir)) return out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".gguf") out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

TEST(GgufRead, AllVocabFiles) {
    auto files = vocab_files();
    ASSERT_GE(files.size(), 10u);
    for (const auto& path : files) {
        SCOPED_TRACE(path);
        auto f = GgufFile::open(path);
        ASSERT_TRUE(f.ok()) << f.error().message;
        EXPECT_EQ(f->version(), 3u);
        EXPECT_TRUE(f->tensors().empty());
        EXPECT_TRUE(f->get_string("general.architecture").has_value());
        auto model = f->get_string("tokenizer.ggml.model");
        ASSERT_TRUE(model.has_value());
        auto tokens = f->get_string_array("tokenizer.ggml.tokens");
        ASSERT_TRUE(tokens.has_value());
        auto types = f->get_i32_array("tokenizer.ggml.token_type");
        ASSERT_TRUE(types.has_value());
        EXPECT_EQ(types->size(), tokens->size());
        if (*model == "llama") {
            auto scores = f->get_f32_array("tokenizer.ggml.scores");
            ASSERT_TRUE(scores.has_value());
            EXPECT_EQ(scores->size(), tokens->size());
        }
        if (*model == "gpt2") {
            EXPECT_TRUE(f->get_string_array("tokenizer.ggml.merges").has_value());
        }
    }
}

std::string vocab(const char* name) {
    return (fs::path(PELICAN_SHARED_DIR) / "data" / "vocab" / name).string();
}

TEST(GgufRead, LlamaSpmKnownValues) {
    auto f = GgufFile::open(vocab("ggml-vocab-llama-spm.gguf"));
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f->get_int("llama.block_count"), 32);
    EXPECT_EQ(f->get_int("llama.vocab_size"), 32000);
    EXPECT_EQ(f->get_int("tokenizer.ggml.bos_token_id"), 1);
    EXPECT_EQ(f->get_bool("tokenizer.ggml.add_bos_token"), true);
    EXPECT_EQ(f->get_bool("tokenizer.ggml.add_eos_token"), false);
    EXPECT_NEAR(*f->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-10);
    auto tokens = f->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens);
    ASSERT_EQ(tokens->size(), 32000u);
    EXPECT_EQ((*tokens)[0], "<unk>");
    EXPECT_EQ((*tokens)[1], "<s>");
    EXPECT_EQ((*tokens)[2], "</s>");
    // Wrong-type lookups answer nullopt rather than converting.
    EXPECT_FALSE(f->get_string("llama.block_count"));
    EXPECT_FALSE(f->get_f32_array("tokenizer.ggml.tokens"));
    EXPECT_FALSE(f->get_bool("llama.block_count"));
    EXPECT_EQ(f->find("no.such.key"), nullptr);
    EXPECT_EQ(f->find_tensor("token_embd.weight"), nullptr);
}

TEST(GgufRead, Qwen2AndBertKnownValues) {
    auto q = GgufFile::open(vocab("ggml-vocab-qwen2.gguf"));
    ASSERT_TRUE(q.ok()) << q.error().message;
    EXPECT_EQ(q->get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(q->get_string("tokenizer.ggml.pre"), "qwen2");
    EXPECT_EQ(q->get_string_array("tokenizer.ggml.tokens")->size(), 151936u);
    EXPECT_EQ(q->get_string_array("tokenizer.ggml.merges")->size(), 151387u);
    EXPECT_EQ(q->get_int("tokenizer.ggml.eos_token_id"), 151645);

    auto b = GgufFile::open(vocab("ggml-vocab-bert-bge.gguf"));
    ASSERT_TRUE(b.ok()) << b.error().message;
    EXPECT_EQ(b->get_string("general.architecture"), "bert");
    EXPECT_EQ(b->get_string("tokenizer.ggml.model"), "bert");
    EXPECT_EQ(b->get_bool("bert.attention.causal"), false);
    EXPECT_EQ(b->get_string_array("tokenizer.ggml.tokens")->size(), 30522u);

    auto p = GgufFile::open(vocab("ggml-vocab-phi-3.gguf"));
    ASSERT_TRUE(p.ok()) << p.error().message;
    auto tmpl = p->get_string("tokenizer.chat_template");
    ASSERT_TRUE(tmpl);
    EXPECT_NE(tmpl->find("<|assistant|>"), std::string::npos);
}

TEST(GgufRead, MissingFileAndNotGguf) {
    auto f = GgufFile::open("/nonexistent/x.gguf");
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.error().message.find("/nonexistent/x.gguf"), std::string::npos);
    std::vector<uint8_t> junk = {'{', '"', 'a', '"', ':', '1', '}'};
    auto g = GgufFile::parse(junk, "junk.json");
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.error().message.find("junk.json"), std::string::npos);
    EXPECT_NE(g.error().message.find("magic"), std::string::npos);
    auto e = GgufFile::parse({}, "empty");
    EXPECT_FALSE(e.ok());
}

// --- hand-built files: a valid one, then one per corruption class -----------------------------

// Tiny valid file: two KVs, two tensors (F32 [8], Q8_0 [32,2]).
GgufBuilder valid_builder() {
    GgufBuilder b;
    b.header(3, 2, 2);
    b.kv_str("general.architecture", "llama");
    b.kv_u32("llama.block_count", 1);
    b.tensor_info("a", {8}, 0, 0);       // f32: 32 bytes
    b.tensor_info("b", {32, 2}, 8, 32);  // q8_0: 2 blocks, 68 bytes
    b.pad_to(32);
    b.zeros(32 + 68);
    return b;
}

TEST(GgufRead, HandBuiltValid) {
    auto bytes = valid_builder().bytes;
    auto f = GgufFile::parse(bytes, "ok.gguf");
    ASSERT_TRUE(f.ok()) << f.error().message;
    ASSERT_EQ(f->tensors().size(), 2u);
    const auto* b = f->find_tensor("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->type, DType::Q8_0);
    EXPECT_EQ(b->n_bytes, 68u);
    EXPECT_EQ(b->n_elements(), 64u);
    EXPECT_EQ(f->data_offset() % 32, 0u);
    EXPECT_EQ(f->tensor_data(*b).size(), 68u);
    EXPECT_EQ(f->tensor_data(*b).data(), bytes.data() + f->data_offset() + 32);
    EXPECT_EQ(f->get_int("llama.block_count"), 1);
}

// Parses `bytes` expecting failure; the message must name the file and contain `needle`.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
    auto f = GgufFile::parse(bytes, "bad.gguf");
    ASSERT_FALSE(f.ok()) << "expected an error containing '" << needle << "'";
    EXPECT_NE(f.error().message.find("bad.gguf"), std::string::npos) << f.error().message;
    EXPECT_NE(f.error().message.find(needle), std::string::npos) << f.error().message;
}

TEST(GgufCorrupt, BadMagic) {
    auto b = valid_builder();
    b.bytes[0] = 'X';
    expect_error(b.bytes, "bad magic");
}

TEST(GgufCorrupt, UnsupportedVersion) {
    GgufBuilder b;
    b.header(1, 0, 0);
    expect_error(b.bytes, "unsupported GGUF version 1");
    GgufBuilder c;
    c.header(4, 0, 0);
    expect_error(c.bytes, "unsupported GGUF version 4");
}

TEST(GgufCorrupt, HugeCountsDoNotAllocate) {
    GgufBuilder b;
    b.header(3, uint64_t{1} << 60, 0);
    expect_error(b.bytes, "tensor count 1152921504606846976");
    GgufBuilder c;
    c.header(3, 0, uint64_t{1} << 60);
    expect_error(c.bytes, "kv count");
    GgufBuilder d;  // array of 2^60 u64
    d.header(3, 0, 1);
    d.str("k");
    d.u32(9);
    d.u32(10);
    d.u64(uint64_t{1} << 60);
    expect_error(d.bytes, "array of 1152921504606846976");
}

TEST(GgufCorrupt, StringPastEnd) {
    GgufBuilder b;
    b.header(3, 0, 1);
    b.str("general.name");
    b.u32(8);
    b.u64(~uint64_t{0});  // string length 2^64-1
    b.raw("abc");
    expect_error(b.bytes, "key 'general.name'");
    GgufBuilder c;
    c.header(3, 0, 1);
    c.u64(1000);  // key length past the end
    c.raw("abcdefghijklmnopqrstuvwxyz");
    expect_error(c.bytes, "runs past the end");
}

TEST(GgufCorrupt, Truncated) {
    auto full = valid_builder().bytes;
    // Every strict prefix either fails cleanly; none may crash.
    for (size_t n = 0; n < full.size(); ++n) {
        std::vector<uint8_t> cut(full.begin(), full.begin() + n);
        EXPECT_FALSE(GgufFile::parse(cut, "cut").ok()) << n;
    }
}

TEST(GgufCorrupt, UnknownValueType) {
    GgufBuilder b;
    b.header(3, 0, 1);
    b.str("x");
    b.u32(13);
    b.u32(0);
    expect_error(b.bytes, "unknown value type 13");
    GgufBuilder c;
    c.header(3, 0, 1);
    c.str("x");
    c.u32(9);
    c.u32(77);
    c.u64(1);
    expect_error(c.bytes, "unknown array element type 77");
}

TEST(GgufCorrupt, UnknownGgmlType) {
    GgufBuilder b;
    b.header(3, 1, 0);
    b.tensor_info("w", {4}, 4 /* Q4_2, removed */, 0);
    b.pad_to(32);
    b.zeros(32);
    expect_error(b.bytes, "unknown ggml type 4");
}

TEST(GgufCorrupt, TooManyDims) {
    GgufBuilder b;
    b.header(3, 1, 0);
    b.tensor_info("w", {1, 1, 1, 1, 1}, 0, 0);
    expect_error(b.bytes, "n_dims 5");
}

TEST(GgufCorrupt, ElementCountOverflow) {
    GgufBuilder b;
    b.header(3, 1, 0);
    b.tensor_info("w", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0);
    expect_error(b.bytes, "overflows");
    GgufBuilder c;
    c.header(3, 1, 0);
    c.tensor_info("w", {~uint64_t{0}}, 0, 0);
    expect_error(c.bytes, "too large");
}

TEST(GgufCorrupt, PartialBlock) {
    GgufBuilder b;
    b.header(3, 1, 0);
    b.tensor_info("w", {33, 1}, 2 /* Q4_0 */, 0);
    b.pad_to(32);
    b.zeros(64);
    expect_error(b.bytes, "tensor 'w'");
    expect_error(b.bytes, "q4_0 blocks");
}

TEST(GgufCorrupt, DuplicateKey) {
    GgufBuilder b;
    b.header(3, 0, 2);
    b.kv_u32("a.b", 1);
    b.kv_u32("a.b", 2);
    expect_error(b.bytes, "key 'a.b': duplicate key");
}

TEST(GgufCorrupt, DuplicateTensor) {
    GgufBuilder b;
    b.header(3, 2, 0);
    b.tensor_info("w", {8}, 0, 0);
    b.tensor_info("w", {8}, 0, 32);
    b.pad_to(32);
    b.zeros(64);
    expect_error(b.bytes, "tensor 'w': duplicate tensor name");
}

TEST(GgufCorrupt, EmptyTensorName) {
    GgufBuilder b;
    b.header(3, 1, 0);
    b.tensor_info("", {8}, 0, 0);
    b.pad_to(32);
    b.zeros(32);
    expect_error(b.bytes, "empty tensor name");
}

TEST(GgufCorrupt, Misaligned) {
    GgufBuilder b;
    b.header(3, 1, 0);
    b.tensor_info("w", {8}, 0, 4);
    b.pad_to(32);
    b.zeros(64);
    expect_error(b.bytes, "not a multiple of the alignment 32");
}

TEST(GgufCorrupt, DataPastEnd) {
    GgufBuilder b;
    b.header(3, 1, 0);
    b.tensor_info("w", {16}, 0, 32);
    b.pad_to(32);
    b.zeros(64);  // tensor needs [32, 96)
    expect_error(b.bytes, "tensor 'w': data [32, +64) runs past the end");
}

TEST(GgufCorrupt, Overlap) {
    GgufBuilder b;
    b.header(3, 2, 0);
    b.tensor_info("a", {16}, 0, 0);  // [0, 64)
    b.tensor_info("b", {8}, 0, 32);  // [32, 64)
    b.pad_to(32);
    b.zeros(64);
    expect_error(b.bytes, "overlaps");
}

TEST(GgufCorrupt, BadAlignment) {
    for (uint32_t a : {0u, 3u, 48u}) {
        GgufBuilder b;
        b.header(3, 0, 1);
        b.kv_u32("general.alignment", a);
        expect_error(b.bytes, "general.alignment");
    }
    GgufBuilder c;
    c.header(3, 0, 1);
    c.str("general.alignment");
    c.u32(10);  // u64 instead of u32
    c.u64(32);
    expect_error(c.bytes, "must be u32");
}

TEST(GgufCorrupt, NestingDepth) {
    GgufBuilder b;
    b.header(3, 0, 1);
    b.str("deep");
    b.u32(9);
    for (int d = 0; d < 100; ++d) {
        b.u32(9);  // element type: array
        b.u64(1);
    }
    expect_error(b.bytes, "nested deeper");
}

TEST(GgufCorrupt, BadBool) {
    GgufBuilder b;
    b.header(3, 0, 1);
    b.str("flag");
    b.u32(7);
    b.bytes.push_back(2);
    expect_error(b.bytes, "bool");
}

}  // namespace
}  // namespace pelican
