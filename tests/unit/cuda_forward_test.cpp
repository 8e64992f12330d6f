// The CUDA forward pass (backend/cuda/cuda_forward.h) against the CPU pass and the independent
// double-precision reference on tiny random models (model_test_util.h): every architecture
// variant in f32, every GPU weight type (f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, and a mixed
// q4_k/q6_k file with split QKV and gate/up), prefill vs decode, graph replay vs eager launches,
// GPU sampling vs the host Sampler, and bad input. Golden fixtures and the CLI are in
// cuda_golden_test.cpp. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/device_buffer.h"
#include "model/forward.h"
#include "runtime/forward_factory.h"
#include "model/model.h"
#include "model_test_util.h"
#include "pelican/engine.h"
#include "quant_error_model.h"
#include "runtime/sampler.h"

namespace pelican {
namespace {

using test::TempDir;
using test::TinySpec;

std::vector<int32_t> some_tokens(int n, int n_vocab, uint32_t seed = 3) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
    return t;
}

// ||a - b||_2 / ||b||_2 over the whole arrays.
double rel_l2(std::span<const float> a, std::span<const float> b) {
    double d2 = 0, b2 = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        const double d = static_cast<double>(a[i]) - b[i];
        d2 += d * d;
        b2 += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(d2 / std::max(b2, 1e-30));
}

std::unique_ptr<Model> load_rows(const std::string& path) {  // GGUF rows, as the GPU needs
    auto m = Model::load(path, ModelLoadOptions{.allow_repack = false});
    EXPECT_TRUE(m.ok()) << m.error().message;
    return m.ok() ? std::move(m).value() : nullptr;
}

std::unique_ptr<cuda::CudaForward> gpu_pass(const Model& m, int64_t n_ctx = 64, int64_t n_batch = 512,
                                            cuda::CudaForwardOptions copt = {}) {
    auto f = cuda::CudaForward::create(m, ForwardOptions{.n_ctx = n_ctx, .n_batch = n_batch}, copt);
    EXPECT_TRUE(f.ok()) << f.error().message;
    return f.ok() ? std::move(f).value() : nullptr;
}

// All logits [n * n_vocab] of one prefill from position 0.
std::vector<float> all_logits(ForwardPass& f, const std::vector<int32_t>& toks) {
    ThreadPool pool(2);
    std::vector<float> out(toks.size() * static_cast<size_t>(f.model().hparams().n_vocab));
    Status s = f.eval(toks, 0, pool, out);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return out;
}

// Logits of every token fed one step at a time (the decode path on the GPU).
std::vector<float> step_logits(ForwardPass& f, const std::vector<int32_t>& toks, int64_t pos0 = 0) {
    ThreadPool pool(2);
    std::vector<float> out;
    for (size_t i = 0; i < toks.size(); ++i) {
        Status s = f.eval(std::span(toks).subspan(i, 1), pos0 + static_cast<int64_t>(i), pool);
        EXPECT_TRUE(s.ok()) << s.error().message;
        const auto l = f.last_logits();
        out.insert(out.end(), l.begin(), l.end());
    }
    return out;
}

TinySpec variant(const std::string& name) {
    TinySpec s;
    s.model_type = name;
    if (name == "qwen2") {
        s.qkv_bias = true;
        s.tied = true;
        s.theta = 1e6;
    } else if (name == "qwen3") {
        s.qk_norm = true;
        s.head_dim = 32;  // q_dim 128 != hidden 64
        s.n_layer = 3;
    } else if (name == "granite") {
        s.embd_mul = 12.0f;
        s.resid_mul = 0.22f;
        s.attn_mul = 0.0625f;
        s.logits_scaling = 8.0f;
    } else if (name == "mistral") {
        s.window = 5;  // shorter than the test sequences
    }
    return s;
}

// A shape every GPU type can hold (k-quant rows are 256-element blocks).
TinySpec wide_spec(const std::string& arch = "qwen2") {
    TinySpec s = variant(arch);
    s.n_embd = 256;
    s.n_ff = 512;
    s.n_head = 4;
    s.n_kv = 2;
    s.head_dim = 64;
    s.n_vocab = 320;
    s.tied = false;
    return s;
}

// ---- f32 against the independent reference, every architecture ---------------------------------

class CudaArch : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaArch, MatchesIndependentReferenceInPrefillAndDecode) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const TinySpec s = variant(GetParam());
    const auto w = test::make_weights(s);
    TempDir dir("cuda_arch_" + GetParam());
    test::write_hf_folder(dir.str("hf"), s, w);
    test::write_gguf_model(dir.str("m.gguf"), s, w);  // llama-family GGUFs: interleaved rope
    const auto toks = some_tokens(12, s.n_vocab);
    const auto want = test::reference_forward(s, w, toks);
    for (const char* src : {"hf", "m.gguf"}) {
        auto m = load_rows(dir.str(src));
        ASSERT_TRUE(m);
        auto g = gpu_pass(*m);
        ASSERT_TRUE(g);
        EXPECT_EQ(g->kv_type(), DType::F32) << "f32 weights keep an f32 cache";
        const auto pre = all_logits(*g, toks);
        const auto dec = step_logits(*g, toks);
        const double e_pre = test::max_rel_diff(pre, want), e_dec = test::max_rel_diff(dec, want);
        fmt::print("cuda {} {}: prefill {:.2e}, decode {:.2e} (max relative to the f64 reference)\n",
                   GetParam(), src, e_pre, e_dec);
        EXPECT_LT(e_pre, 2e-5) << m->describe() << " (" << src << ", prefill)";
        EXPECT_LT(e_dec, 2e-5) << m->describe() << " (" << src << ", decode)";
    }
}

INSTANTIATE_TEST_SUITE_P(Model, CudaArch, ::testing::Values("llama", "mistral", "qwen2", "qwen3", "granite"));

// ---- every GPU weight type against the CPU pass -------------------------------------------------
// Both passes read the same GGUF, so the weights' rounding cancels; what remains is how each
// rounds activations (error model of quant_error_model.h, same propagation gain kGain):
//   f32: summation order only (1e-5);
//   f16/bf16: GPU decode keeps fp32 activations; GPU prefill rounds the activations to the weight
//     type for the tensor-core GEMM: weight_eps(type) per matmul;
//   quantized: the CPU kernels round activations to 8-bit blocks (act_eps(type)); the GPU decode
//     does too (32-blocks: act_eps(Q8_0)), its prefill uses f16 activations and f16-rounded
//     dequantized weights (weight_eps(F16) each);
//   the GPU's F16 KV cache (every non-f32 model) rounds K and V: weight_eps(F16) each, per layer.
// Sources add in quadrature over the n_matmul = 4 * n_layer + 1 matmuls of a token and the
// 2 * n_layer cached tensors.
double gpu_cpu_bound(DType t, int n_layer, bool prefill, bool kv_f16) {
    if (t == DType::F32) return 1e-5;
    const double n_mm = 4.0 * n_layer + 1;
    double eps = 0;
    if (t == DType::F16 || t == DType::BF16) {
        eps = prefill ? *weight_eps(t) : 0.0;
    } else {
        const double cpu = act_eps(t);
        const double gpu = prefill ? std::sqrt(2.0) * *weight_eps(DType::F16) : act_eps(DType::Q8_0);
        eps = std::sqrt(cpu * cpu + gpu * gpu);
    }
    const double kv = kv_f16 ? *weight_eps(DType::F16) : 0.0;
    return std::max(1e-5, kGain * std::sqrt(n_mm * eps * eps + 2.0 * n_layer * kv * kv));
}

struct TypeCase {
    std::string name;
    DType type;
    std::map<std::string, DType> mixed;  // per-tensor overrides (GGUF names)
};

void PrintTo(const TypeCase& c, std::ostream* os) { *os << c.name; }

class CudaTypes : public ::testing::TestWithParam<TypeCase> {};

TEST_P(CudaTypes, LogitsMatchTheCpuPassWithinTheActivationRounding) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const TypeCase& c = GetParam();
    const TinySpec s = wide_spec();
    const auto w = test::make_weights(s);
    TempDir dir("cuda_type_" + c.name);
    test::write_gguf_model(dir.str("m.gguf"), s, w, c.type, {}, true, nullptr, c.mixed);
    auto m = load_rows(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    auto cpu = create_cpu_pass(*m, ForwardOptions{.n_ctx = 64});
    ASSERT_TRUE(cpu.ok()) << cpu.error().message;
    auto g = gpu_pass(*m);
    ASSERT_TRUE(g);
    if (!c.mixed.empty()) {  // the split layout is what this case is for
        EXPECT_EQ(g->weights().layer(0).attn.qkv.size(), 2u);
        EXPECT_EQ(g->weights().layer(0).mlp.gate_up.size(), 2u);
    }
    const auto toks = some_tokens(12, s.n_vocab, 5);
    const auto want = all_logits(**cpu, toks);
    const auto pre = all_logits(*g, toks);
    const auto dec = step_logits(*g, toks);
    // The CPU's own decode equals its prefill; compare the GPU's steps with it.
    const double r_pre = rel_l2(pre, want), r_dec = rel_l2(dec, want);
    const bool kv16 = g->kv_type() == DType::F16;
    const double b_pre = gpu_cpu_bound(c.type, s.n_layer, true, kv16),
                 b_dec = gpu_cpu_bound(c.type, s.n_layer, false, kv16);
    fmt::print("cuda vs cpu {}: prefill rel {:.2e} (bound {:.2e}), decode rel {:.2e} (bound {:.2e}), kv {}\n",
               c.name, r_pre, b_pre, r_dec, b_dec, dtype_name(g->kv_type()));
    EXPECT_LE(r_pre, b_pre) << c.name << " prefill";
    EXPECT_LE(r_dec, b_dec) << c.name << " decode";
}

std::vector<TypeCase> type_cases() {
    std::vector<TypeCase> v = {{"f32", DType::F32, {}},   {"f16", DType::F16, {}},
                               {"bf16", DType::BF16, {}}, {"q8_0", DType::Q8_0, {}},
                               {"q4_0", DType::Q4_0, {}}, {"q4_k", DType::Q4_K, {}},
                               {"q6_k", DType::Q6_K, {}}};
    // llama.cpp Q4_K_M style: V, up, down and the head in Q6_K -> QKV as [Q;K] + [V], gate | up split.
    TypeCase mixed{"q4_k_m_like", DType::Q4_K, {}};
    for (int l = 0; l < 2; ++l)
        for (const char* t : {"attn_v", "ffn_up", "ffn_down"})
            mixed.mixed[fmt::format("blk.{}.{}.weight", l, t)] = DType::Q6_K;
    mixed.mixed["output.weight"] = DType::Q6_K;
    v.push_back(mixed);
    return v;
}

INSTANTIATE_TEST_SUITE_P(Model, CudaTypes, ::testing::ValuesIn(type_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- prefill / decode / graph consistency -------------------------------------------------------

TEST(CudaForward, PrefillThenDecodeEqualsTokenByTokenAndChunking) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const TinySpec s = variant("qwen3");
    const auto w = test::make_weights(s);
    TempDir dir("cuda_pd");
    test::write_gguf_model(dir.str("m.gguf"), s, w);
    auto m = load_rows(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    const auto toks = some_tokens(14, s.n_vocab, 9);
    const auto V = static_cast<size_t>(s.n_vocab);
    // One by one from position 0.
    auto a = gpu_pass(*m);
    ASSERT_TRUE(a);
    const auto one_by_one = step_logits(*a, toks);
    // Prefill of 9, then 5 decode steps.
    auto b = gpu_pass(*m);
    ASSERT_TRUE(b);
    const std::vector<int32_t> head(toks.begin(), toks.begin() + 9), tail(toks.begin() + 9, toks.end());
    const auto pre = all_logits(*b, head);
    const auto dec = step_logits(*b, tail, 9);
    EXPECT_LT(test::max_rel_diff(pre, std::span(one_by_one).subspan(0, 9 * V)), 1e-5);
    EXPECT_LT(test::max_rel_diff(dec, std::span(one_by_one).subspan(9 * V)), 1e-5);
    // Chunked prefill (n_batch 4: chunks 4, 4, 4, 2) equals one chunk.
    auto c = gpu_pass(*m, 64, 4);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->n_batch(), 4);
    const auto chunked = all_logits(*c, toks);
    EXPECT_LT(test::max_rel_diff(chunked, one_by_one), 1e-5);
    // last_logits() is the last row.
    const auto last = c->last_logits();
    ASSERT_EQ(last.size(), V);
    EXPECT_LT(test::max_rel_diff(last, std::span(chunked).subspan(13 * V)), 1e-7);
    // Rewinding: eval at an earlier position overwrites the cache from there.
    ThreadPool pool(1);
    ASSERT_TRUE(c->eval(std::span(toks).subspan(5, 3), 5, pool).ok());
    EXPECT_LT(test::max_rel_diff(c->last_logits(), std::span(one_by_one).subspan(7 * V, V)), 1e-5);
}

TEST(CudaForward, GraphReplayEqualsEagerLaunches) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    for (DType t : {DType::F32, DType::Q4_K}) {
        const TinySpec s = wide_spec("llama");
        const auto w = test::make_weights(s);
        TempDir dir("cuda_graph");
        test::write_gguf_model(dir.str("m.gguf"), s, w, t);
        auto m = load_rows(dir.str("m.gguf"));
        ASSERT_TRUE(m);
        auto graph = gpu_pass(*m, 64, 512, {.use_graph = true});
        auto eager = gpu_pass(*m, 64, 512, {.use_graph = false});
        ASSERT_TRUE(graph && eager);
        EXPECT_TRUE(graph->uses_graph());
        EXPECT_FALSE(eager->uses_graph());
        const auto toks = some_tokens(20, s.n_vocab, 13);
        const auto a = step_logits(*graph, toks), b = step_logits(*eager, toks);
        const double d = test::max_rel_diff(a, b);
        fmt::print("cuda graph vs eager {}: max relative difference {:.2e}\n", dtype_name(t), d);
        EXPECT_LE(d, 1e-6) << dtype_name(t) << ": the same kernels in the same order";
    }
}

// ---- sampling on the GPU ------------------------------------------------------------------------

cuda::GpuSampleParams to_gpu(const SamplerParams& p) {
    cuda::GpuSampleParams g;
    g.temperature = p.temperature;
    g.top_k = p.top_k;
    g.top_p = p.top_p;
    g.min_p = p.min_p;
    g.repetition_penalty = p.repetition_penalty;
    g.presence_penalty = p.presence_penalty;
    g.frequency_penalty = p.frequency_penalty;
    return g;
}

TEST(CudaForward, DecodeSampleGreedyEqualsCpuGreedyFor32Steps) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const TinySpec s = variant("llama");
    const auto w = test::make_weights(s);
    TempDir dir("cuda_greedy");
    test::write_gguf_model(dir.str("m.gguf"), s, w);
    auto m = load_rows(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    const auto prompt = some_tokens(6, s.n_vocab, 21);
    ThreadPool pool(2);
    // CPU: forward + host greedy sampler.
    auto cpu = create_cpu_pass(*m, ForwardOptions{.n_ctx = 64});
    ASSERT_TRUE(cpu.ok());
    SamplerParams sp;
    sp.temperature = 0;
    auto sampler = Sampler::create(sp);
    ASSERT_TRUE(sampler.ok());
    ASSERT_TRUE((*cpu)->eval(prompt, 0, pool).ok());
    std::vector<int32_t> want;
    for (int i = 0; i < 32; ++i) {
        std::vector<float> l((*cpu)->last_logits().begin(), (*cpu)->last_logits().end());
        const int32_t t = sampler->sample(l);
        want.push_back(t);
        const int32_t one[1] = {t};
        ASSERT_TRUE((*cpu)->eval(one, static_cast<int64_t>(prompt.size()) + i, pool).ok());
    }
    // GPU: sample_last after the prompt, then decode_sample steps.
    auto g = gpu_pass(*m);
    ASSERT_TRUE(g);
    ASSERT_TRUE(g->eval(prompt, 0, pool).ok());
    const cuda::GpuSampleParams gp = to_gpu(sp);
    std::vector<int32_t> got;
    auto t = g->sample_last(gp, {}, 0.0f);
    ASSERT_TRUE(t.ok()) << t.error().message;
    got.push_back(*t);
    for (int i = 1; i < 32; ++i) {
        t = g->decode_sample(got.back(), static_cast<int64_t>(prompt.size()) + i - 1, gp, {}, 0.0f);
        ASSERT_TRUE(t.ok()) << t.error().message;
        got.push_back(*t);
    }
    EXPECT_EQ(got, want);
    // last_logits() after decode_sample: the step's logits as computed (not the sampler's copy).
    ASSERT_TRUE(
        (*cpu)->eval(std::span(got).subspan(30, 1), static_cast<int64_t>(prompt.size()) + 30, pool).ok());
    EXPECT_LT(test::max_rel_diff(g->last_logits(), (*cpu)->last_logits()), 1e-5);
}

// The GPU sampler on the same logits as the host Sampler, fed the host RNG's uniforms and the
// penalty window: the same tokens (a uniform within fp32 rounding of a boundary could differ;
// with these seeds none does).
TEST(CudaForward, GpuSamplingWithASeedEqualsTheCpuSampler) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const TinySpec s = wide_spec("llama");
    const auto w = test::make_weights(s);
    TempDir dir("cuda_sampling");
    test::write_gguf_model(dir.str("m.gguf"), s, w, DType::F16);
    auto m = load_rows(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    std::vector<SamplerParams> cases(5);
    cases[0] = SamplerParams{};  // CLI defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05
    cases[1].temperature = 1.0f, cases[1].top_k = cuda::kMaxGpuTopK, cases[1].top_p = 1, cases[1].min_p = 0;
    cases[2].temperature = 0.7f, cases[2].top_k = 50, cases[2].repetition_penalty = 1.3f,
    cases[2].frequency_penalty = 0.2f, cases[2].presence_penalty = 0.1f, cases[2].penalty_last_n = 16;
    cases[3].temperature = 0, cases[3].repetition_penalty = 1.5f, cases[3].penalty_last_n = -1;
    cases[4].temperature = 1.5f, cases[4].top_k = 1, cases[4].min_p = 0;
    ThreadPool pool(1);
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        SamplerParams sp = cases[ci];
        sp.seed = 1000 + ci;
        auto host = Sampler::create(sp), shadow = Sampler::create(sp);
        ASSERT_TRUE(host.ok() && shadow.ok());
        const cuda::GpuSampleParams gp = to_gpu(sp);
        ASSERT_TRUE(cuda::gpu_sampling_exact(gp)) << "case " << ci;
        const auto prompt = some_tokens(8, s.n_vocab, 40 + static_cast<uint32_t>(ci));
        for (int32_t t : prompt) host->accept(t), shadow->accept(t);
        auto g = gpu_pass(*m);
        ASSERT_TRUE(g);
        ASSERT_TRUE(g->eval(prompt, 0, pool).ok());
        int64_t pos = static_cast<int64_t>(prompt.size());
        int32_t prev = -1;
        for (int step = 0; step < 40; ++step) {
            // As Session::generate does: the double uniform rounded to float, kept below 1.
            const float u = sp.temperature > 0 ? std::min(static_cast<float>(shadow->draw_uniform()),
                                                          std::nextafter(1.0f, 0.0f))
                                               : 0.0f;
            auto got = prev < 0 ? g->sample_last(gp, shadow->penalty_window(), u)
                                : g->decode_sample(prev, pos++, gp, shadow->penalty_window(), u);
            ASSERT_TRUE(got.ok()) << got.error().message;
            std::vector<float> l(g->last_logits().begin(), g->last_logits().end());
            const int32_t want = host->sample(l);
            ASSERT_EQ(*got, want) << "case " << ci << " step " << step;
            host->accept(want);
            shadow->accept(want);
            prev = want;
        }
    }
}

// ---- errors ------------------------------------------------------------------------------------

TEST(CudaForward, BadInputsAreErrors) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const TinySpec s = variant("llama");
    const auto w = test::make_weights(s);
    TempDir dir("cuda_bad");
    test::write_gguf_model(dir.str("m.gguf"), s, w, DType::Q8_0);
    auto m = load_rows(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    auto g = gpu_pass(*m, 16);
    ASSERT_TRUE(g);
    ThreadPool pool(1);
    const auto has = [](const Status& st, const std::string& what) {
        return !st.ok() && st.error().message.find(what) != std::string::npos;
    };
    const int32_t bad_hi[1] = {s.n_vocab}, bad_lo[1] = {-1}, ok1[1] = {3};
    EXPECT_TRUE(has(g->eval({}, 0, pool), "no tokens"));
    EXPECT_TRUE(has(g->eval(bad_hi, 0, pool), "outside the vocabulary"));
    EXPECT_TRUE(has(g->eval(bad_lo, 0, pool), "outside the vocabulary"));
    EXPECT_TRUE(has(g->eval(ok1, 16, pool), "do not fit the context"));
    EXPECT_TRUE(has(g->eval(ok1, -1, pool), "do not fit the context"));
    const auto many = some_tokens(17, s.n_vocab);
    EXPECT_TRUE(has(g->eval(many, 0, pool), "do not fit the context"));
    std::vector<float> wrong(5);
    EXPECT_TRUE(has(g->eval(ok1, 0, pool, wrong), "all_logits"));
    EXPECT_TRUE(has(g->decode_no_logits(s.n_vocab, 0), "outside the vocabulary"));
    EXPECT_TRUE(has(g->decode_no_logits(1, 16), "does not fit the context"));
    EXPECT_TRUE(g->last_logits().empty()) << "nothing evaluated yet";

    cuda::GpuSampleParams greedy;
    EXPECT_FALSE(g->sample_last(greedy, {}, 0.0f).ok()) << "no logits yet";
    ASSERT_TRUE(g->eval(ok1, 0, pool).ok());
    EXPECT_TRUE(g->sample_last(greedy, {}, 0.0f).ok());
    cuda::GpuSampleParams no_top_k;
    no_top_k.temperature = 0.8f;  // top_k 0: not exact on the GPU
    auto r = g->sample_last(no_top_k, {}, 0.5f);
    EXPECT_FALSE(r.ok());
    if (!r.ok()) {
        EXPECT_NE(r.error().message.find("not sampled exactly"), std::string::npos) << r.error().message;
    }
    cuda::GpuSampleParams topk = no_top_k;
    topk.top_k = 10;
    EXPECT_FALSE(g->sample_last(topk, {}, 1.0f).ok()) << "u must be < 1";
    EXPECT_FALSE(g->sample_last(topk, {}, std::nanf("")).ok());
    const std::vector<int32_t> window(17, 1);
    topk.repetition_penalty = 1.2f;
    EXPECT_FALSE(g->sample_last(topk, window, 0.5f).ok()) << "window longer than the context";
    EXPECT_FALSE(g->decode_sample(-5, 1, topk, {}, 0.5f).ok());
    EXPECT_FALSE(g->decode_sample(1, 99, topk, {}, 0.5f).ok());
    // Ids outside the vocabulary in the window are ignored, as on the CPU.
    const std::vector<int32_t> odd = {-3, s.n_vocab + 7, 2};
    EXPECT_TRUE(g->decode_sample(1, 1, topk, odd, 0.5f).ok());
    // After all that the pass still works.
    EXPECT_TRUE(g->eval(some_tokens(4, s.n_vocab), 0, pool).ok());
    EXPECT_EQ(g->last_logits().size(), static_cast<size_t>(s.n_vocab));

    // Creation errors.
    EXPECT_FALSE(cuda::CudaForward::create(*m, ForwardOptions{.n_ctx = 0}).ok());
    EXPECT_FALSE(cuda::CudaForward::create(*m, ForwardOptions{.n_ctx = 8, .n_batch = 0}).ok());
    EXPECT_FALSE(cuda::CudaForward::create(*m, ForwardOptions{.n_ctx = 8}, {.kv_type = DType::Q8_0}).ok());
    auto repacked = Model::load(dir.str("m.gguf"));  // CPU layout (Q8_0 interleaved)
    ASSERT_TRUE(repacked.ok());
    auto e = cuda::CudaForward::create(**repacked, ForwardOptions{.n_ctx = 8});
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("repacked"), std::string::npos) << e.error().message;
}

TEST(CudaForward, EngineDeviceSelection) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const std::string fixture = std::string(PELICAN_SOURCE_DIR) + "/tests/golden/qwen3";
    auto autod = Engine::load(fixture);  // auto: a GPU is here and qwen3 f32 is supported
    ASSERT_TRUE(autod.ok()) << autod.error().message;
    EXPECT_EQ((*autod)->device(), Device::kCuda);
    EXPECT_EQ((*autod)->device_description().rfind("cuda: ", 0), 0u) << (*autod)->device_description();
    auto sess = (*autod)->create_session({.n_ctx = 32});
    ASSERT_TRUE(sess.ok()) << sess.error().message;
    EXPECT_EQ((*sess)->device_name(), "cuda");
    auto cpu_sess = (*autod)->create_session({.n_ctx = 32, .n_threads = 2, .device = Device::kCpu});
    ASSERT_TRUE(cpu_sess.ok()) << cpu_sess.error().message;
    EXPECT_EQ((*cpu_sess)->device_name(), "cpu");
    // Both sessions give the same logits.
    const std::vector<int32_t> toks = {1, 5, 9, 2, 7};
    auto a = (*sess)->eval(toks);
    ASSERT_TRUE(a.ok());
    const std::vector<float> la(a->begin(), a->end());
    auto b = (*cpu_sess)->eval(toks);
    ASSERT_TRUE(b.ok());
    EXPECT_LT(test::max_rel_diff(la, *b), 1e-5);

    auto cpu = Engine::load(fixture, EngineOptions{.device = Device::kCpu});
    ASSERT_TRUE(cpu.ok());
    EXPECT_EQ((*cpu)->device(), Device::kCpu);
    auto bad = (*cpu)->create_session({.n_ctx = 32, .device = Device::kCuda});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("engine loaded for CUDA"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace pelican
