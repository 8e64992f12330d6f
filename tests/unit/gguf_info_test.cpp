// `pelican info` for GGUF: the summary (text and JSON) and the CLI's exit codes and messages.
#include <gtest/gtest.h>

#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/gguf_info.h"
#include "formats/gguf_writer.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;

// A llama-shaped file: hyper-parameters, a per-layer array (not a scalar: not listed), tensors.
std::vector<uint8_t> model_bytes() {
    GgufWriter w;
    EXPECT_TRUE(w.add_kv("general.architecture", gguf_string("llama")).ok());
    EXPECT_TRUE(w.add_kv("general.name", gguf_string("tiny-llama")).ok());
    EXPECT_TRUE(w.add_kv("llama.block_count", gguf_u32(2)).ok());
    EXPECT_TRUE(w.add_kv("llama.rope.freq_base", gguf_f32(500000.0f)).ok());
    EXPECT_TRUE(w.add_kv("llama.per_layer", gguf_array(GgufType::I32, {gguf_i32(1), gguf_i32(2)})).ok());
    EXPECT_TRUE(w.add_kv("tokenizer.ggml.model", gguf_string("gpt2")).ok());
    EXPECT_TRUE(w.add_kv("tokenizer.ggml.pre", gguf_string("llama-bpe")).ok());
    EXPECT_TRUE(w.add_kv("tokenizer.ggml.tokens", gguf_string_array({"a", "b", "c"})).ok());
    EXPECT_TRUE(w.add_tensor("token_embd.weight", DType::Q4_K, {256, 3}).ok());
    EXPECT_TRUE(w.add_tensor("output_norm.weight", DType::F32, {256}).ok());
    EXPECT_TRUE(w.add_tensor("blk.0.attn_q.weight", DType::Q4_K, {256, 256}).ok());
    std::vector<std::vector<uint8_t>> data;
    for (const auto& t : w.tensors()) data.emplace_back(t.n_bytes, 0);
    std::vector<std::span<const uint8_t>> spans(data.begin(), data.end());
    return *w.to_bytes(spans);
}

TEST(GgufInfo, SummaryJson) {
    auto bytes = model_bytes();
    auto f = GgufFile::parse(bytes, "tiny.gguf");
    ASSERT_TRUE(f.ok()) << f.error().message;
    auto j = gguf_summary_json(*f);
    EXPECT_EQ(j["architecture"], "llama");
    EXPECT_EQ(j["name"], "tiny-llama");
    EXPECT_EQ(j["hyper_parameters"]["block_count"], 2);
    EXPECT_EQ(j["hyper_parameters"]["rope.freq_base"], 500000.0);
    EXPECT_FALSE(j["hyper_parameters"].contains("per_layer"));
    EXPECT_EQ(j["tensor_count"], 3);
    EXPECT_EQ(j["parameters"], 256 * 3 + 256 + 256 * 256);
    EXPECT_EQ(j["tensor_types"]["q4_k"]["count"], 2);
    EXPECT_EQ(j["tensor_types"]["q4_k"]["bytes"], (3 + 256) * 144);
    EXPECT_EQ(j["tensor_types"]["f32"]["bytes"], 1024);
    EXPECT_EQ(j["tensor_bytes"], (3 + 256) * 144 + 1024);
    EXPECT_EQ(j["tokenizer"]["model"], "gpt2");
    EXPECT_EQ(j["tokenizer"]["pre"], "llama-bpe");
    EXPECT_EQ(j["tokenizer"]["vocab_size"], 3);
    EXPECT_EQ(j["chat_template"], false);
    // The --json text is the same object.
    EXPECT_EQ(nlohmann::json::parse(gguf_summary(*f, true)), j);
}

TEST(GgufInfo, SummaryText) {
    auto bytes = model_bytes();
    auto f = GgufFile::parse(bytes, "tiny.gguf");
    ASSERT_TRUE(f.ok());
    std::string s = gguf_summary(*f, false);
    EXPECT_NE(s.find("architecture:    llama\n"), std::string::npos) << s;
    EXPECT_NE(s.find("block_count"), std::string::npos) << s;
    EXPECT_NE(s.find("500000"), std::string::npos) << s;
    EXPECT_EQ(s.find("per_layer"), std::string::npos) << s;
    EXPECT_NE(s.find("q4_k"), std::string::npos) << s;
    EXPECT_NE(s.find("tokenizer:       gpt2 (pre: llama-bpe), 3 tokens"), std::string::npos) << s;
    EXPECT_NE(s.find("chat template:   no"), std::string::npos) << s;
}

struct CliResult {
    int code;
    std::string out;
};

CliResult run_cli(const std::string& args) {
    std::string cmd = std::string(PELICAN_BINARY) + " " + args + " 2>&1";
    CliResult r{-1, {}};
    std::FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int st = ::pclose(p);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

TEST(GgufInfo, Cli) {
    fs::path vocab = fs::path(PELICAN_SHARED_DIR) / "data" / "vocab" / "ggml-vocab-phi-3.gguf";
    CliResult ok = run_cli("info " + vocab.string());
    EXPECT_EQ(ok.code, 0) << ok.out;
    EXPECT_NE(ok.out.find("architecture:    phi3"), std::string::npos) << ok.out;
    EXPECT_NE(ok.out.find("chat template:   yes"), std::string::npos) << ok.out;
    CliResult js = run_cli("info --json " + vocab.string());
    ASSERT_EQ(js.code, 0) << js.out;
    EXPECT_EQ(nlohmann::json::parse(js.out)["tokenizer"]["vocab_size"], 32064);

    // A folder with neither GGUF magic nor safetensors weights: both readers' verdicts in one error.
    CliResult dir = run_cli("info " + vocab.parent_path().string());
    EXPECT_EQ(dir.code, 1);
    EXPECT_NE(dir.out.find("neither a GGUF file nor a Hugging Face model"), std::string::npos) << dir.out;
    EXPECT_NE(dir.out.find("holds no weights"), std::string::npos) << dir.out;

    // A Hugging Face folder goes to the safetensors summary.
    fs::path hf = fs::path(PELICAN_SOURCE_DIR) / "tests" / "golden" / "qwen3";
    CliResult hfo = run_cli("info " + hf.string());
    EXPECT_EQ(hfo.code, 0) << hfo.out;
    EXPECT_NE(hfo.out.find("model_type:  qwen3"), std::string::npos) << hfo.out;
    EXPECT_NE(hfo.out.find("250496 parameters"), std::string::npos) << hfo.out;

    // A corrupt GGUF reports the reader's error (file and byte offset).
    fs::path bad = fs::temp_directory_path() / ("pelican_info_bad_" + std::to_string(::getpid()) + ".gguf");
    {
        auto bytes = model_bytes();
        bytes.resize(bytes.size() / 2);
        std::FILE* f = std::fopen(bad.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        std::fwrite(bytes.data(), 1, bytes.size(), f);
        std::fclose(f);
    }
    CliResult cut = run_cli("info " + bad.string());
    EXPECT_EQ(cut.code, 1);
    EXPECT_NE(cut.out.find("pelican: error: " + bad.string()), std::string::npos) << cut.out;
    fs::remove(bad);
}

}  // namespace
}  // namespace pelican
