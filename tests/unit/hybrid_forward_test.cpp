// The hybrid Qwen3.5 stack on the CPU (create_cpu_pass: a SequencePass on the CPU executor) on tiny random
// models written as HF folders by the test: logits at every position against an independent double-precision
// reference (tests/unit/hybrid_test_util.h) for qwen3_5_moe (fused experts, model.language_model.* names, MTP
// block) and dense qwen3_5 (model.* names); per-expert tensors give the same logits as fused ones;
// chunked prefill then decode equals token-by-token decode; rewinding re-feeds; errors are clear.
#include <gtest/gtest.h>

#include <random>

#include "golden_test_util.h"
#include "hybrid_test_util.h"
#include "convert/convert.h"
#include "runtime/forward_factory.h"
#include "model/model.h"
#include "pelican/engine.h"

namespace pelican {
namespace {

using test::HybridSpec;

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
}

struct Fixture {
    HybridSpec spec;
    test::HfWeightsMap w;
    test::TempDir dir;
    std::unique_ptr<Model> model;

    Fixture(const HybridSpec& s, const std::string& tag, bool unfuse = false)
        : spec(s), w(test::hybrid_weights(s)), dir(tag) {
        test::write_hybrid_folder(dir.str(), spec, unfuse ? test::unfuse_experts(w, spec) : w);
        auto m = Model::load(dir.str());
        EXPECT_TRUE(m.ok()) << m.error().message;
        if (m.ok()) model = std::move(m).value();
    }

    std::vector<float> reference(const std::vector<int32_t>& toks) const {
        test::HybridReference r(spec, w);
        std::vector<float> out;
        for (int32_t t : toks)
            for (double x : r.step(t)) out.push_back(static_cast<float>(x));
        return out;
    }

    std::vector<float> run(const std::vector<int32_t>& toks, int64_t n_batch = 512) const {
        auto f = create_cpu_pass(*model, ForwardOptions{.n_ctx = 256, .n_batch = n_batch});
        EXPECT_TRUE(f.ok()) << f.error().message;
        ThreadPool pool(2);
        std::vector<float> got(toks.size() * static_cast<size_t>(spec.n_vocab));
        auto s = (*f)->eval(toks, 0, pool, got);
        EXPECT_TRUE(s.ok()) << s.error().message;
        return got;
    }
};

HybridSpec moe_spec() {
    HybridSpec s;
    s.mtp = true;
    return s;
}

HybridSpec dense_spec() {
    HybridSpec s;
    s.moe = false;
    s.prefix = "model.";
    s.seed = 9;
    return s;
}

TEST(HybridCpu, MoeMatchesDoubleReference) {
    Fixture fx(moe_spec(), "hyb_moe");
    ASSERT_TRUE(fx.model);
    EXPECT_EQ(fx.model->arch().name, "qwen35moe");
    const auto toks = random_tokens(150, fx.spec.n_vocab, 1);  // crosses two 64-token chunks
    const auto want = fx.reference(toks);
    const auto got = fx.run(toks);
    const double d = golden::row_rel_diff(got, want, static_cast<size_t>(fx.spec.n_vocab));
    fmt::print("qwen3_5_moe vs double reference, 150 positions: max relative logit error {:.2e}\n", d);
    EXPECT_LT(d, 1e-4);
    fmt::print("{}\n", fx.model->describe());
}

TEST(HybridCpu, DenseMatchesDoubleReference) {
    Fixture fx(dense_spec(), "hyb_dense");
    ASSERT_TRUE(fx.model);
    EXPECT_EQ(fx.model->arch().name, "qwen35");
    const auto toks = random_tokens(130, fx.spec.n_vocab, 2);
    const double d =
        golden::row_rel_diff(fx.run(toks), fx.reference(toks), static_cast<size_t>(fx.spec.n_vocab));
    fmt::print("qwen3_5 vs double reference, 130 positions: max relative logit error {:.2e}\n", d);
    EXPECT_LT(d, 1e-4);
}

TEST(HybridCpu, PerExpertTensorsEqualFused) {
    HybridSpec s = moe_spec();
    s.prefix = "model.";
    Fixture fused(s, "hyb_fused"), split(s, "hyb_split", /*unfuse=*/true);
    ASSERT_TRUE(fused.model && split.model);
    const auto toks = random_tokens(70, s.n_vocab, 3);
    EXPECT_EQ(fused.run(toks), split.run(toks));
}

// Qwen3-Next (model_type qwen3_next) stores the DeltaNet input projections fused and grouped per key
// head: in_proj_qkvz rows per key head g = [q_g (dk) | k_g (dk) | v_g (r dv) | z_g (r dv)], in_proj_ba
// rows per g = [b_g (r) | a_g (r)] (r = nv / nk; transformers' fix_query_key_value_ordering). The same
// weights written that way must load (split on load) and give the qwen3_5_moe folder's logits exactly.
test::HfWeightsMap fuse_qwen3_next(const test::HfWeightsMap& w, const HybridSpec& s) {
    test::HfWeightsMap out = w;
    const int E = s.n_embd, r = s.nv / s.nk, rv = r * s.dv, group = 2 * s.dk + 2 * rv;
    for (int l = 0; l < s.n_layer; ++l) {
        if (s.full(l)) continue;
        const std::string p = fmt::format("{}layers.{}.linear_attn.", s.prefix, l);
        const auto& qkv = w.at(p + "in_proj_qkv.weight").data;
        const auto& z = w.at(p + "in_proj_z.weight").data;
        const auto& b = w.at(p + "in_proj_b.weight").data;
        const auto& a = w.at(p + "in_proj_a.weight").data;
        test::HfTensor qkvz, ba;
        qkvz.shape = {static_cast<uint64_t>(s.nk * group), static_cast<uint64_t>(E)};
        ba.shape = {static_cast<uint64_t>(2 * s.nv), static_cast<uint64_t>(E)};
        auto rows = [&](std::vector<float>& dst, const std::vector<float>& src, int first, int n) {
            dst.insert(dst.end(), src.begin() + static_cast<std::ptrdiff_t>(first) * E,
                       src.begin() + static_cast<std::ptrdiff_t>(first + n) * E);
        };
        for (int g = 0; g < s.nk; ++g) {
            rows(qkvz.data, qkv, g * s.dk, s.dk);                // q_g
            rows(qkvz.data, qkv, s.key_dim() + g * s.dk, s.dk);  // k_g
            rows(qkvz.data, qkv, 2 * s.key_dim() + g * rv, rv);  // v_g
            rows(qkvz.data, z, g * rv, rv);                      // z_g
            rows(ba.data, b, g * r, r);                          // b_g
            rows(ba.data, a, g * r, r);                          // a_g
        }
        for (const char* n :
             {"in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight"})
            out.erase(p + n);
        out[p + "in_proj_qkvz.weight"] = std::move(qkvz);
        out[p + "in_proj_ba.weight"] = std::move(ba);
    }
    return out;
}

TEST(HybridCpu, Qwen3NextFusedProjectionsEqualQwen35) {
    HybridSpec s = moe_spec();
    s.prefix = "model.";
    s.mtp = false;
    Fixture split(s, "hyb_q35");
    ASSERT_TRUE(split.model);
    nlohmann::json cfg = test::hybrid_config(s);
    cfg["model_type"] = "qwen3_next";
    cfg.erase("layer_types");  // derived from full_attention_interval (default 4), as Qwen3-Next configs do
    cfg["full_attention_interval"] = 4;
    cfg["rope_theta"] = s.theta;
    cfg["partial_rotary_factor"] = s.partial_rotary;
    cfg.erase("rope_parameters");
    test::TempDir dir("hyb_q3next");
    test::write_hf_folder(dir.str(), test::TinySpec{}, fuse_qwen3_next(split.w, s), false, &cfg);
    auto next = Model::load(dir.str());
    ASSERT_TRUE(next.ok()) << next.error().message;
    EXPECT_EQ((*next)->arch().name, "qwen3next");
    const auto toks = random_tokens(70, s.n_vocab, 4);
    auto f = create_cpu_pass(**next, ForwardOptions{.n_ctx = 256});
    ASSERT_TRUE(f.ok()) << f.error().message;
    ThreadPool pool(2);
    std::vector<float> got(toks.size() * static_cast<size_t>(s.n_vocab));
    ASSERT_TRUE((*f)->eval(toks, 0, pool, got).ok());
    EXPECT_EQ(got, split.run(toks));
    // No GGUF layout for it yet: convert says so.
    auto job = plan_convert(dir.str(), ConvertOptions{});
    ASSERT_FALSE(job.ok());
    EXPECT_NE(job.error().message.find("converting it to GGUF is not supported yet"), std::string::npos)
        << job.error().message;
}

TEST(HybridCpu, ChunkedPrefillThenDecodeEqualsTokenByToken) {
    Fixture fx(moe_spec(), "hyb_chunk");
    ASSERT_TRUE(fx.model);
    const size_t V = static_cast<size_t>(fx.spec.n_vocab);
    const auto toks = random_tokens(140, fx.spec.n_vocab, 4);
    ThreadPool pool(2);
    // Token by token: every DeltaNet step is the recurrent form.
    auto one = create_cpu_pass(*fx.model, ForwardOptions{.n_ctx = 256});
    ASSERT_TRUE(one.ok());
    std::vector<float> step(toks.size() * V);
    for (size_t t = 0; t < toks.size(); ++t)
        ASSERT_TRUE((*one)
                        ->eval(std::span(&toks[t], 1), static_cast<int64_t>(t), pool,
                               std::span(step).subspan(t * V, V))
                        .ok());
    // Prefill 100 (chunked form, n_batch 512 and n_batch 48), then decode 40.
    for (int64_t n_batch : {int64_t{512}, int64_t{48}}) {
        auto mix = create_cpu_pass(*fx.model, ForwardOptions{.n_ctx = 256, .n_batch = n_batch});
        ASSERT_TRUE(mix.ok());
        std::vector<float> got(toks.size() * V);
        ASSERT_TRUE((*mix)->eval(std::span(toks).first(100), 0, pool, std::span(got).first(100 * V)).ok());
        for (size_t t = 100; t < toks.size(); ++t)
            ASSERT_TRUE((*mix)
                            ->eval(std::span(&toks[t], 1), static_cast<int64_t>(t), pool,
                                   std::span(got).subspan(t * V, V))
                            .ok());
        const double d = golden::row_rel_diff(got, step, V);
        fmt::print("chunked prefill (n_batch {}) + decode vs token by token: {:.2e}\n", n_batch, d);
        EXPECT_LT(d, 1e-5) << "n_batch " << n_batch;
        EXPECT_EQ((*mix)->memory().length((*mix)->seq()), 140);
    }
}

TEST(HybridCpu, RewindReplaysKeptTokens) {
    Fixture fx(dense_spec(), "hyb_rewind");
    ASSERT_TRUE(fx.model);
    const size_t V = static_cast<size_t>(fx.spec.n_vocab);
    const auto a = random_tokens(80, fx.spec.n_vocab, 5), b = random_tokens(30, fx.spec.n_vocab, 6);
    ThreadPool pool(2);
    auto f = create_cpu_pass(*fx.model, ForwardOptions{.n_ctx = 256});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->eval(a, 0, pool).ok());
    std::vector<float> got(b.size() * V);
    ASSERT_TRUE((*f)->eval(b, 40, pool, got).ok());  // keep a[0..40), then b
    std::vector<int32_t> fresh(a.begin(), a.begin() + 40);
    fresh.insert(fresh.end(), b.begin(), b.end());
    const auto want = fx.run(fresh);
    // Same function; the chunk boundaries differ (40 + 30 vs 70), so equal up to fp32 rounding.
    const std::vector<float> tail(want.end() - static_cast<long>(b.size() * V), want.end());
    EXPECT_LT(golden::row_rel_diff(got, tail, V), 1e-5);
    EXPECT_FALSE((*f)->eval(b, 100, pool).ok());  // a gap: cannot skip positions
}

TEST(HybridCpu, MtpWeightsAddressable) {
    Fixture fx(moe_spec(), "hyb_mtp");
    ASSERT_TRUE(fx.model);
    const ModelWeights* hw = &fx.model->weights();
    EXPECT_EQ(hw->prefix, "model.language_model.");
    ASSERT_TRUE(hw->mtp.present);
    ASSERT_EQ(hw->mtp.layers.size(), 1u);
    EXPECT_EQ(hw->mtp.layers[0].kind, (LayerKind{Mixer::kGatedAttention, Ffn::kMoe}));
    // The main stack's kinds: the spec's full-attention layers, every FFN MoE.
    ASSERT_EQ(fx.model->hparams().layer.size(), static_cast<size_t>(fx.spec.n_layer));
    for (int l = 0; l < fx.spec.n_layer; ++l) {
        const LayerKind k = fx.model->hparams().layer[static_cast<size_t>(l)];
        EXPECT_EQ(k.mixer, fx.spec.full(l) ? Mixer::kGatedAttention : Mixer::kDeltaNet) << l;
        EXPECT_EQ(k.ffn, Ffn::kMoe) << l;
        EXPECT_EQ(hw->layers[static_cast<size_t>(l)].kind, k) << l;
    }
    EXPECT_EQ(hw->mtp.fc.n_in(), 2 * fx.spec.n_embd);
    EXPECT_EQ(hw->mtp.layers[0].moe.experts.size(), static_cast<size_t>(fx.spec.n_expert));
    EXPECT_EQ(hw->mtp.norm_embd[0], fx.w.at("mtp.pre_fc_norm_embedding.weight").data[0]);
}

TEST(HybridCpu, EngineGeneratesAndCudaIsRefusedClearly) {
    Fixture fx(moe_spec(), "hyb_engine");
    ASSERT_TRUE(fx.model);
    auto e = Engine::load(fx.dir.str(), EngineOptions{.load_tokenizer = false});
    ASSERT_TRUE(e.ok()) << e.error().message;
    auto session = (*e)->create_session(SessionOptions{.n_ctx = 128, .n_threads = 2});
    ASSERT_TRUE(session.ok()) << session.error().message;
    const auto prompt = random_tokens(70, fx.spec.n_vocab, 7);
    GenerateParams gp;
    gp.max_tokens = 8;
    gp.sampling.temperature = 0;
    gp.ignore_eos = true;
    auto r = (*session)->generate(std::span<const int32_t>(prompt), gp);
    ASSERT_TRUE(r.ok()) << r.error().message;
    // Greedy = argmax of the reference's logits, step by step.
    test::HybridReference ref(fx.spec, fx.w);
    std::vector<double> logits;
    for (int32_t t : prompt) logits = ref.step(t);
    ASSERT_EQ(r->tokens.size(), 8u);
    for (int32_t t : r->tokens) {
        EXPECT_EQ(t, std::max_element(logits.begin(), logits.end()) - logits.begin());
        logits = ref.step(t);
    }
    // A second generate sharing a prefix rewinds the recurrent state by replay.
    auto r2 = (*session)->generate(std::span<const int32_t>(prompt), gp);
    ASSERT_TRUE(r2.ok()) << r2.error().message;
    EXPECT_EQ(r2->tokens, r->tokens);

    // A CUDA pass needs the weights on the GPU (or, built without CUDA, says so).
    auto cuda = create_forward_pass(*fx.model, ForwardOptions{.n_ctx = 16}, Device::kCuda, nullptr);
    ASSERT_FALSE(cuda.ok());
    EXPECT_TRUE(cuda.error().message.find("not on the GPU") != std::string::npos ||
                cuda.error().message.find("without the CUDA backend") != std::string::npos ||
                cuda.error().message.find("no NVIDIA GPU on this machine") != std::string::npos)
        << cuda.error().message;
}

TEST(HybridCpu, MissingTensorIsNamed) {
    HybridSpec s = dense_spec();
    auto w = test::hybrid_weights(s);
    w.erase("model.layers.1.linear_attn.A_log");
    test::TempDir dir("hyb_missing");
    test::write_hybrid_folder(dir.str(), s, w);
    auto m = Model::load(dir.str());
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message.find("model.layers.1.linear_attn.A_log"), std::string::npos)
        << m.error().message;
}

}  // namespace
}  // namespace pelican
