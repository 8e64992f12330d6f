// Synthetic models (convert/synthetic.h): tensors and determinism, every architecture loads and runs,
// the Qwen3.5 shapes (full-size configs planned with their parameter counts, scaled-down ones run).
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "convert/convert.h"
#include "convert/synthetic.h"
#include "core/dequantize.h"
#include "core/float_convert.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/forward.h"
#include "runtime/forward_factory.h"
#include "model/model.h"
#include "model/rope_permute.h"
#include "tokenizer/tokenizer.h"
#include "convert_test_util.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using test::block_amax;
using test::file_bytes;
using test::kSource;
using test::kSpmVocab;
using test::kSynthConfig;
using test::quiet;
using test::TempDir;
using test::to_f32;
using test::write_synthetic;
using test::write_text;

TEST(Convert, SyntheticTensorsAndDeterminism) {
    TempDir dir;
    ASSERT_TRUE(write_synthetic("llama", kSynthConfig, dir / "a.gguf", DType::F32, 5).ok());
    // b: one thread (a uses two); token_embd (128 x 32000 f32, 16.4 MB) spans two write chunks.
    ASSERT_TRUE(
        write_synthetic("llama", kSynthConfig, dir / "b.gguf", DType::F32, 5, kSpmVocab.string(), 1).ok());
    ASSERT_TRUE(write_synthetic("llama", kSynthConfig, dir / "c.gguf", DType::F32, 6).ok());
    ASSERT_TRUE(write_synthetic("llama", kSynthConfig, dir / "q.gguf", DType::Q8_0, 5).ok());
    EXPECT_EQ(file_bytes(dir / "a.gguf"), file_bytes(dir / "b.gguf"));
    EXPECT_NE(file_bytes(dir / "a.gguf"), file_bytes(dir / "c.gguf"));

    auto f = GgufFile::open(dir / "a.gguf");
    ASSERT_TRUE(f.ok());
    const uint64_t V = 32000;  // llama-spm vocabulary
    std::map<std::string, std::vector<uint64_t>> want = {
        {"token_embd.weight", {128, V}}, {"output_norm.weight", {128}}, {"output.weight", {128, V}}};
    for (int l = 0; l < 2; ++l) {
        const auto n = [l](const char* b) { return fmt::format("blk.{}.{}.weight", l, b); };
        want[n("attn_norm")] = {128};
        want[n("attn_q")] = {128, 128};
        want[n("attn_k")] = {128, 64};
        want[n("attn_v")] = {128, 64};
        want[n("attn_output")] = {128, 128};
        want[n("ffn_norm")] = {128};
        want[n("ffn_gate")] = {128, 256};
        want[n("ffn_up")] = {128, 256};
        want[n("ffn_down")] = {256, 128};
    }
    ASSERT_EQ(f->tensors().size(), want.size());
    for (const GgufTensorInfo& t : f->tensors()) {
        ASSERT_TRUE(want.count(t.name)) << t.name;
        EXPECT_EQ(t.dims, want[t.name]) << t.name;
        // Magnitudes: matrices ~ N(0, 0.02^2), norms ~ 1 + N(0, 0.02^2).
        const std::vector<float> v = to_f32(*f, t);
        double sum = 0, sq = 0;
        for (float x : v) sum += x, sq += x * x;
        const double mean = sum / v.size(), sd = std::sqrt(sq / v.size() - mean * mean);
        const bool norm = t.dims.size() == 1;
        EXPECT_NEAR(mean, norm ? 1.0 : 0.0, norm ? 0.01 : 0.002) << t.name;
        EXPECT_NEAR(sd, 0.02, 0.004) << t.name;
    }
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_int("llama.context_length"), 4096);
    EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), V);
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");

    // The q8_0 file holds the same values, quantized.
    auto q = GgufFile::open(dir / "q.gguf");
    ASSERT_TRUE(q.ok());
    const std::vector<float> a = to_f32(*f, *f->find_tensor("blk.1.ffn_down.weight"));
    const std::vector<float> b = to_f32(*q, *q->find_tensor("blk.1.ffn_down.weight"));
    for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], block_amax(a, i, 32) / 254 * 1.002f + 1e-7f);
}

TEST(Convert, SyntheticArchitecturesLoadAndRun) {
    TempDir dir;
    struct Case {
        const char* arch;
        const char* extra;
        std::vector<std::string> has, lacks;
    };
    const std::vector<Case> cases = {
        {"llama", "", {"output.weight"}, {"blk.0.attn_q.bias"}},
        {"qwen2",
         R"(, "tie_word_embeddings": true)",
         {"blk.1.attn_q.bias", "blk.1.attn_v.bias"},
         {"output.weight"}},
        {"qwen3", R"(, "head_dim": 64)", {"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"}, {}},
        {"mistral", "", {"output.weight"}, {}},
        {"granite",
         R"(, "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
                        "logits_scaling": 8.0)",
         {},
         {}},
        {"llama",
         R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 512})",
         {"rope_freqs.weight"},
         {}},
    };
    ThreadPool pool(2);
    for (size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        std::string cfg = kSynthConfig;
        cfg.insert(cfg.rfind('}'), c.extra);
        // One file per case (llama twice): writes never replace an existing file without force.
        const std::string out = dir / fmt::format("{}-{}.gguf", i, c.arch);
        auto r = write_synthetic(c.arch, cfg, out, DType::Q8_0, 1);
        ASSERT_TRUE(r.ok()) << c.arch << ": " << r.error().message;
        auto f = GgufFile::open(out);
        ASSERT_TRUE(f.ok());
        for (const auto& n : c.has) EXPECT_NE(f->find_tensor(n), nullptr) << c.arch << " " << n;
        for (const auto& n : c.lacks) EXPECT_EQ(f->find_tensor(n), nullptr) << c.arch << " " << n;
        if (std::string(c.arch) == "granite") {
            EXPECT_FLOAT_EQ(static_cast<float>(*f->get_float("granite.embedding_scale")), 12.0f);
            EXPECT_FLOAT_EQ(static_cast<float>(*f->get_float("granite.logit_scale")), 8.0f);
        }
        auto m = Model::load(out);
        ASSERT_TRUE(m.ok()) << c.arch << ": " << m.error().message;
        auto fw = create_cpu_pass(**m, ForwardOptions{.n_ctx = 16});
        ASSERT_TRUE(fw.ok());
        const std::vector<int32_t> toks = {1, 450, 4996, 17354, 1701, 29916};
        ASSERT_TRUE((*fw)->eval(toks, 0, pool).ok());
        for (float x : (*fw)->last_logits()) ASSERT_TRUE(std::isfinite(x)) << c.arch;
    }
}

// Qwen3.5 synthetic models: the full-size configs plan with the expected parameter counts (not
// written: tens of GB), and scaled-down moe / dense ones load and run.
TEST(Convert, SyntheticQwen35) {
    struct Full {
        const char* file;
        double lo, hi;
    };
    for (const Full& c :
         {Full{"qwen3.5-35b-a3b.json", 34.5e9, 36.5e9}, Full{"qwen3.5-122b-a10b.json", 120e9, 126e9}}) {
        std::ifstream in(kSource / "tools/configs" / c.file);
        const std::string cfg{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        SyntheticOptions s{
            .arch = "qwen3_5_moe", .config_json = cfg, .config_name = c.file, .vocab = kSpmVocab.string()};
        auto job = plan_synthetic(s, quiet(DType::Q4_K));
        ASSERT_TRUE(job.ok()) << c.file << ": " << job.error().message;
        double params = 0;
        for (const PlannedTensor& t : job->tensors) {
            double n = 1;
            for (uint64_t d : t.dims) n *= static_cast<double>(d);
            params += n;
        }
        fmt::print("{}: {} tensors, {:.2f} B parameters\n", c.file, job->tensors.size(), params / 1e9);
        EXPECT_GE(params, c.lo) << c.file;
        EXPECT_LE(params, c.hi) << c.file;
    }

    TempDir dir;
    const std::string mini = R"({"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 32, "linear_value_head_dim": 32, "num_experts": 8, "num_experts_per_tok": 2,
        "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "intermediate_size": 256,
        "rope_parameters": {"rope_theta": 1e7, "partial_rotary_factor": 0.25, "mrope_section": [3, 3, 2]},
        "mtp_num_hidden_layers": 1})";
    ThreadPool pool(2);
    for (const char* arch : {"qwen3_5_moe", "qwen3_5"}) {
        const std::string out = dir / fmt::format("{}.gguf", arch);
        auto r = write_synthetic(arch, mini, out, DType::Q8_0, 3);
        ASSERT_TRUE(r.ok()) << arch << ": " << r.error().message;
        auto f = GgufFile::open(out);
        ASSERT_TRUE(f.ok());
        const bool moe = std::string(arch) == "qwen3_5_moe";
        const std::string a = moe ? "qwen35moe" : "qwen35";
        EXPECT_EQ(f->get_string("general.architecture"), a);
        EXPECT_EQ(f->get_int(a + ".block_count"), 5);
        EXPECT_EQ(f->get_int(a + ".nextn_predict_layers"), 1);
        EXPECT_EQ(f->find_tensor("blk.0.ssm_conv1d.weight")->type, DType::F32);
        EXPECT_NE(f->find_tensor("blk.4.nextn.eh_proj.weight"), nullptr);
        if (moe) {
            EXPECT_EQ(f->find_tensor("blk.0.ffn_gate_exps.weight")->dims,
                      (std::vector<uint64_t>{128, 64, 8}));
        }
        for (float x : to_f32(*f, *f->find_tensor("blk.0.ssm_a"))) EXPECT_LT(x, 0.0f);
        auto m = Model::load(out);
        ASSERT_TRUE(m.ok()) << arch << ": " << m.error().message;
        auto fw = create_cpu_pass(**m, ForwardOptions{.n_ctx = 16});
        ASSERT_TRUE(fw.ok()) << fw.error().message;
        const std::vector<int32_t> toks = {1, 450, 4996, 17354, 1701, 29916};
        std::vector<float> logits(toks.size() * static_cast<size_t>((*m)->hparams().n_vocab));
        ASSERT_TRUE((*fw)->eval(toks, 0, pool, logits).ok());
        for (float x : logits) ASSERT_TRUE(std::isfinite(x)) << arch;
    }
}

}  // namespace
}  // namespace pelican
