// Forward pass of tiny random models: against an independent double-precision implementation
// (tests/unit/model_test_util.h), HF folder vs GGUF (llama q/k permutation), prefill vs token by
// token decode, chunked prefill, taps.
#include <gtest/gtest.h>

#include <set>

#include "core/dequantize.h"
#include "core/thread_pool.h"
#include "model/forward.h"
#include "runtime/forward_factory.h"
#include "model/model.h"
#include "model_test_util.h"

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

// All logits [n * n_vocab] of a fresh forward over tokens.
std::vector<float> run_all(const Model& m, const std::vector<int32_t>& toks, int64_t n_batch = 512,
                           int threads = 2) {
    auto f = create_cpu_pass(m, ForwardOptions{.n_ctx = 64, .n_batch = n_batch});
    EXPECT_TRUE(f.ok()) << f.error().message;
    ThreadPool pool(threads);
    std::vector<float> out(toks.size() * static_cast<size_t>(m.hparams().n_vocab));
    Status s = (*f)->eval(toks, 0, pool, out);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return out;
}

std::unique_ptr<Model> load(const std::string& path) {
    auto m = Model::load(path);
    EXPECT_TRUE(m.ok()) << m.error().message;
    return m.ok() ? std::move(m).value() : nullptr;
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
    }
    return s;
}

class ArchForward : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchForward, HfFolderMatchesIndependentReference) {
    const TinySpec s = variant(GetParam());
    const auto w = test::make_weights(s);
    TempDir dir("fwd_hf_" + GetParam());
    test::write_hf_folder(dir.str("hf"), s, w);
    auto m = load(dir.str("hf"));
    ASSERT_TRUE(m);
    EXPECT_EQ(m->hparams().rope_layout, RopeLayout::kNeox);
    const auto toks = some_tokens(12, s.n_vocab);
    const auto got = run_all(*m, toks);
    const auto want = test::reference_forward(s, w, toks);
    EXPECT_LT(test::max_rel_diff(got, want), 2e-5) << m->describe();
}

TEST_P(ArchForward, GgufMatchesHfFolder) {
    const TinySpec s = variant(GetParam());
    const auto w = test::make_weights(s);
    TempDir dir("fwd_gguf_" + GetParam());
    test::write_hf_folder(dir.str("hf"), s, w);
    test::write_gguf_model(dir.str("m.gguf"), s, w);
    auto hf = load(dir.str("hf"));
    auto gg = load(dir.str("m.gguf"));
    ASSERT_TRUE(hf && gg);
    EXPECT_EQ(gg->hparams().rope_layout, s.permuted_in_gguf() ? RopeLayout::kInterleaved : RopeLayout::kNeox);
    const auto toks = some_tokens(10, s.n_vocab, 11);
    const auto a = run_all(*hf, toks);
    const auto b = run_all(*gg, toks);
    EXPECT_LT(test::max_rel_diff(b, a), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Model, ArchForward,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "granite"));

TEST(ModelForward, LongerPrefillSplitsElementwiseWork) {
    // 100 tokens x n_ff 1024: the SwiGLU runs as several pool tasks (forward_layer.cpp over_rows).
    TinySpec s = variant("qwen2");
    s.n_embd = 128;
    s.n_ff = 1024;
    s.head_dim = 32;
    s.max_pos = 256;
    const auto w = test::make_weights(s);
    TempDir dir("fwd_long");
    test::write_hf_folder(dir.str("hf"), s, w);
    auto m = load(dir.str("hf"));
    ASSERT_TRUE(m);
    const auto toks = some_tokens(100, s.n_vocab);
    auto f = create_cpu_pass(*m, ForwardOptions{.n_ctx = 128});
    ASSERT_TRUE(f.ok());
    ThreadPool pool(4);
    std::vector<float> got(toks.size() * static_cast<size_t>(s.n_vocab));
    ASSERT_TRUE((*f)->eval(toks, 0, pool, got).ok());
    EXPECT_LT(test::max_rel_diff(got, test::reference_forward(s, w, toks)), 2e-5);
}

// The weights as stored in type t and read back (matrices only, unless all_tensors).
test::HfWeightsMap round_trip(const test::HfWeightsMap& w, DType t, bool all_tensors) {
    test::HfWeightsMap out = w;
    for (auto& [name, ht] : out) {
        if (ht.shape.size() != 2 && !all_tensors) continue;
        std::vector<uint8_t> bytes(*dtype_row_bytes(t, ht.data.size()));
        const auto n = static_cast<int64_t>(ht.data.size());
        EXPECT_TRUE(quantize_row(t, ht.data.data(), bytes.data(), n).ok());
        EXPECT_TRUE(dequantize_row(t, bytes.data(), ht.data.data(), n).ok());
    }
    return out;
}

TEST(ModelForward, NarrowWeightTypesMatchTheirRoundedWeights) {
    // bf16 HF folder and f16 / q8_0 / q4_0 / q4_k GGUFs against the reference run on the same weights
    // rounded to that type: what remains is fp32 arithmetic (bf16/f16: ~1e-6) and, for quantized
    // types, the 8-bit activation rounding of the integer kernels (~3-5% of the largest logit in
    // this random model, which amplifies noise; a wiring error gives ~100%). Against the unrounded
    // weights the 4-bit error is far larger (checked, so the rounding is real).
    TinySpec s = variant("llama");
    s.n_embd = s.n_ff = 256;  // K-quant rows are whole 256-blocks
    s.head_dim = 64;
    const auto w = test::make_weights(s);
    TempDir dir("fwd_narrow");
    test::write_hf_folder(dir.str("bf16"), s, w, /*bf16=*/true);
    struct Case {
        std::string file;
        DType type;
        double tol;
    };
    const Case cases[] = {{"bf16", DType::BF16, 1e-5},
                          {"f16.gguf", DType::F16, 1e-5},
                          {"q8_0.gguf", DType::Q8_0, 0.1},
                          {"q4_0.gguf", DType::Q4_0, 0.1},
                          {"q4_k.gguf", DType::Q4_K, 0.1}};
    const auto toks = some_tokens(10, s.n_vocab);
    const auto exact = test::reference_forward(s, w, toks);
    for (const Case& c : cases) {
        if (c.file.ends_with(".gguf")) test::write_gguf_model(dir.str(c.file), s, w, c.type);
        auto m = load(dir.str(c.file));
        ASSERT_TRUE(m);
        const auto got = run_all(*m, toks);
        const auto want = test::reference_forward(s, round_trip(w, c.type, c.type == DType::BF16), toks);
        const double d = test::max_rel_diff(got, want);
        EXPECT_LT(d, c.tol) << c.file;
        if (c.type != DType::Q8_0) {
            EXPECT_GT(test::max_rel_diff(got, exact), 2 * d) << c.file;
        }
    }
}

TEST(ModelForward, MistralSlidingWindow) {
    TinySpec s = variant("mistral");
    s.window = 4;
    const auto w = test::make_weights(s);
    TempDir dir("fwd_window");
    test::write_hf_folder(dir.str("hf"), s, w);
    test::write_gguf_model(dir.str("m.gguf"), s, w);
    auto hf = load(dir.str("hf"));
    auto gg = load(dir.str("m.gguf"));
    ASSERT_TRUE(hf && gg);
    EXPECT_EQ(hf->hparams().sliding_window, 4);
    EXPECT_EQ(gg->hparams().sliding_window, 4);
    const auto toks = some_tokens(12, s.n_vocab);
    const auto want = test::reference_forward(s, w, toks);
    EXPECT_LT(test::max_rel_diff(run_all(*hf, toks), want), 2e-5);
    EXPECT_LT(test::max_rel_diff(run_all(*gg, toks), want), 2e-5);
    s.window = 0;  // the window matters for this sequence
    EXPECT_GT(test::max_rel_diff(test::reference_forward(s, w, toks), want), 1e-3);
}

TEST(ModelForward, UnpermutedLlamaGgufDiffers) {
    // Guards the test above: without the q/k permutation, normal rope gives other logits.
    const TinySpec s = variant("llama");
    const auto w = test::make_weights(s);
    TempDir dir("fwd_unperm");
    test::write_hf_folder(dir.str("hf"), s, w);
    test::write_gguf_model(dir.str("m.gguf"), s, w, DType::F32, {}, /*permute=*/false);
    auto hf = load(dir.str("hf"));
    auto gg = load(dir.str("m.gguf"));
    ASSERT_TRUE(hf && gg);
    const auto toks = some_tokens(8, s.n_vocab);
    EXPECT_GT(test::max_rel_diff(run_all(*gg, toks), run_all(*hf, toks)), 1e-3);
}

TEST(ModelForward, PrefillThenDecodeEqualsOneByOne) {
    const TinySpec s = variant("qwen3");
    const auto w = test::make_weights(s);
    TempDir dir("fwd_decode");
    test::write_gguf_model(dir.str("m.gguf"), s, w);
    auto m = load(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    const auto toks = some_tokens(16, s.n_vocab);
    const auto V = static_cast<size_t>(s.n_vocab);
    const auto all = run_all(*m, toks);

    // Prefill 9 tokens, then decode the rest one at a time.
    auto f = create_cpu_pass(*m, ForwardOptions{.n_ctx = 32});
    ASSERT_TRUE(f.ok());
    ThreadPool pool(2);
    ASSERT_TRUE((*f)->eval(std::span(toks).first(9), 0, pool).ok());
    auto last = (*f)->last_logits();
    EXPECT_LT(test::max_rel_diff(last, std::vector<float>(all.begin() + 8 * V, all.begin() + 9 * V)), 1e-5);
    for (size_t t = 9; t < toks.size(); ++t) {
        ASSERT_TRUE((*f)->eval(std::span(toks).subspan(t, 1), static_cast<int64_t>(t), pool).ok());
        const std::vector<float> want(all.begin() + static_cast<std::ptrdiff_t>(t * V),
                                      all.begin() + static_cast<std::ptrdiff_t>((t + 1) * V));
        EXPECT_LT(test::max_rel_diff((*f)->last_logits(), want), 1e-5) << "position " << t;
    }

    // Fully token by token, and chunked prefill (n_batch 5), single-threaded.
    auto g = create_cpu_pass(*m, ForwardOptions{.n_ctx = 32});
    ASSERT_TRUE(g.ok());
    for (size_t t = 0; t < toks.size(); ++t) {
        ASSERT_TRUE((*g)->eval(std::span(toks).subspan(t, 1), static_cast<int64_t>(t), pool).ok());
        const std::vector<float> want(all.begin() + static_cast<std::ptrdiff_t>(t * V),
                                      all.begin() + static_cast<std::ptrdiff_t>((t + 1) * V));
        EXPECT_LT(test::max_rel_diff((*g)->last_logits(), want), 1e-5) << "position " << t;
    }
    EXPECT_LT(test::max_rel_diff(run_all(*m, toks, 5, 1), all), 1e-5);
}

TEST(ModelForward, RewindOverwritesCache) {
    const TinySpec s = variant("llama");
    const auto w = test::make_weights(s);
    TempDir dir("fwd_rewind");
    test::write_hf_folder(dir.str("hf"), s, w);
    auto m = load(dir.str("hf"));
    ASSERT_TRUE(m);
    const auto a = some_tokens(8, s.n_vocab, 1);
    auto b = a;
    b[5] = (b[5] + 1) % s.n_vocab;
    b[6] = (b[6] + 3) % s.n_vocab;
    auto f = create_cpu_pass(*m, ForwardOptions{.n_ctx = 16});
    ASSERT_TRUE(f.ok());
    ThreadPool pool(1);
    ASSERT_TRUE((*f)->eval(a, 0, pool).ok());
    ASSERT_TRUE((*f)->eval(std::span(b).subspan(5), 5, pool).ok());  // keep 5, replace the rest
    const auto all = run_all(*m, b);
    const std::vector<float> want(all.end() - s.n_vocab, all.end());
    EXPECT_LT(test::max_rel_diff((*f)->last_logits(), want), 1e-5);
}

TEST(ModelForward, EvalRejectsBadInput) {
    const TinySpec s = variant("llama");
    TempDir dir("fwd_bad");
    test::write_hf_folder(dir.str("hf"), s, test::make_weights(s));
    auto m = load(dir.str("hf"));
    ASSERT_TRUE(m);
    auto f = create_cpu_pass(*m, ForwardOptions{.n_ctx = 8});
    ASSERT_TRUE(f.ok());
    ThreadPool pool(1);
    const std::vector<int32_t> bad{1, s.n_vocab};
    Status st = (*f)->eval(bad, 0, pool);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("outside the vocabulary"), std::string::npos) << st.error().message;
    const std::vector<int32_t> nine(9, 1);
    st = (*f)->eval(nine, 0, pool);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("context of 8"), std::string::npos) << st.error().message;
    EXPECT_FALSE((*f)->eval(std::span<const int32_t>(), 0, pool).ok());
    std::vector<float> small(3);
    EXPECT_FALSE((*f)->eval(std::span(nine).first(2), 0, pool, small).ok());
    EXPECT_FALSE(create_cpu_pass(*m, ForwardOptions{.n_ctx = 0}).ok());
}

TEST(ModelForward, TapSeesNamedIntermediates) {
    const TinySpec s = variant("qwen3");
    TempDir dir("fwd_tap");
    test::write_hf_folder(dir.str("hf"), s, test::make_weights(s));
    auto m = load(dir.str("hf"));
    ASSERT_TRUE(m);
    std::set<std::string> names;
    int layer_outs = 0;
    auto f = create_cpu_pass(*m, ForwardOptions{.n_ctx = 8}, [&](const TapInfo& t) {
        names.insert(std::string(t.name));
        if (t.name == "l_out") {
            ++layer_outs;
            EXPECT_EQ(t.width, s.n_embd);
            EXPECT_EQ(t.n_rows, 3);
        }
        if (t.name == "q") {
            EXPECT_EQ(t.width, s.q_dim());
        }
    });
    ASSERT_TRUE(f.ok());
    ThreadPool pool(1);
    const std::vector<int32_t> toks{1, 2, 3};
    ASSERT_TRUE((*f)->eval(toks, 0, pool).ok());
    EXPECT_EQ(layer_outs, s.n_layer);
    for (const char* n : {"embd", "attn_norm", "q", "k", "v", "attn", "attn_out", "ffn_inp", "ffn_norm",
                          "ffn_act", "ffn_out", "l_out", "output_norm", "logits"})
        EXPECT_TRUE(names.count(n)) << n;
}

}  // namespace
}  // namespace pelican
