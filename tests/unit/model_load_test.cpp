// Model loading: tensor names, the rope permutation, rope frequencies, hyper-parameters, and the
// errors a user sees for broken files (named tensor, expected vs found shape).
#include <gtest/gtest.h>

#include <numbers>

#include "model/model.h"
#include "model/rope_freq.h"
#include "model/rope_permute.h"
#include "model/tensor_names.h"
#include "model_test_util.h"

namespace pelican {
namespace {

using test::TempDir;
using test::TinySpec;

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

std::string load_error(const std::string& path) {
    auto m = Model::load(path);
    EXPECT_FALSE(m.ok()) << "load unexpectedly succeeded: " << path;
    return m.ok() ? "" : m.error().message;
}

TEST(TensorNames, MapsBothWays) {
    const std::pair<const char*, const char*> cases[] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
        {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
        {"model.layers.12.self_attn.q_proj.weight", "blk.12.attn_q.weight"},
        {"model.layers.3.self_attn.k_proj.bias", "blk.3.attn_k.bias"},
        {"model.layers.3.self_attn.v_proj.bias", "blk.3.attn_v.bias"},
        {"model.layers.7.self_attn.o_proj.weight", "blk.7.attn_output.weight"},
        {"model.layers.1.self_attn.q_norm.weight", "blk.1.attn_q_norm.weight"},
        {"model.layers.1.self_attn.k_norm.weight", "blk.1.attn_k_norm.weight"},
        {"model.layers.2.post_attention_layernorm.weight", "blk.2.ffn_norm.weight"},
        {"model.layers.2.mlp.gate_proj.weight", "blk.2.ffn_gate.weight"},
        {"model.layers.2.mlp.up_proj.weight", "blk.2.ffn_up.weight"},
        {"model.layers.2.mlp.down_proj.weight", "blk.2.ffn_down.weight"},
    };
    for (const auto& [hf, gguf] : cases) {
        EXPECT_EQ(hf_to_gguf_tensor_name(hf).value_or("?"), gguf);
        EXPECT_EQ(gguf_to_hf_tensor_name(gguf).value_or("?"), hf);
    }
    for (const char* bad : {"model.layers.x.mlp.up_proj.weight", "model.layers.01.mlp.up_proj.weight",
                            "model.layers.1.mlp.up_proj", "model.rotary_emb.inv_freq",
                            "model.layers.1.mlp.foo.weight", "model.layers..mlp.up_proj.weight"})
        EXPECT_FALSE(hf_to_gguf_tensor_name(bad).has_value()) << bad;
    EXPECT_FALSE(gguf_to_hf_tensor_name("rope_freqs.weight").has_value());
    EXPECT_EQ(qk_permute_kind("blk.4.attn_q.weight"), QkPermute::Q);
    EXPECT_EQ(qk_permute_kind("blk.4.attn_q.bias"), QkPermute::Q);
    EXPECT_EQ(qk_permute_kind("blk.4.attn_k.weight"), QkPermute::K);
    EXPECT_EQ(qk_permute_kind("blk.4.attn_v.weight"), QkPermute::None);
    EXPECT_EQ(qk_permute_kind("blk.4.attn_q_norm.weight"), QkPermute::None);
    EXPECT_EQ(gguf_layer_tensor(5, "ffn_up", "bias"), "blk.5.ffn_up.bias");
}

TEST(RopePermute, MatchesLlamaCppFormulaAndInverts) {
    // llama.cpp: w.reshape(n_head, 2, hd/2, ...).swapaxes(1, 2).reshape(w.shape)
    const int n_head = 3, hd = 8, rows = n_head * hd, row_bytes = 2;
    std::vector<uint8_t> src(rows * row_bytes), dst(src.size()), back(src.size());
    for (int r = 0; r < rows; ++r) src[r * row_bytes] = src[r * row_bytes + 1] = static_cast<uint8_t>(r);
    ASSERT_TRUE(rope_permute_rows(src, dst, rows, row_bytes, n_head).ok());
    for (int h = 0; h < n_head; ++h)
        for (int i = 0; i < hd / 2; ++i)
            for (int j = 0; j < 2; ++j) {
                // new index (h, i, j) <- old index (h, j, i)
                const int new_row = h * hd + i * 2 + j, old_row = h * hd + j * (hd / 2) + i;
                EXPECT_EQ(dst[new_row * row_bytes], old_row);
                EXPECT_EQ(dst[new_row * row_bytes + 1], old_row);
            }
    ASSERT_TRUE(rope_unpermute_rows(dst, back, rows, row_bytes, n_head).ok());
    EXPECT_EQ(back, src);
    std::vector<uint8_t> small(4);
    EXPECT_FALSE(rope_permute_rows(src, small, rows, row_bytes, n_head).ok());
    EXPECT_FALSE(rope_permute_rows(src, dst, rows, row_bytes, 5).ok());  // 24 rows, 5 heads
    std::vector<uint8_t> odd(3 * 6), odd2(odd.size());
    EXPECT_FALSE(rope_permute_rows(odd, odd2, 6, 3, 2).ok());  // head_dim 3
}

TEST(RopeFreq, PlainLinearLlama3Yarn) {
    auto plain = compute_rope_freqs(8, 10000.0, nullptr, 128, "t");
    ASSERT_TRUE(plain.ok());
    ASSERT_EQ(plain->inv_freq.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(plain->inv_freq[i], std::pow(10000.0, -2.0 * i / 8), 1e-7);
    EXPECT_EQ(plain->attn_factor, 1.0f);

    RopeScaling lin{.type = "linear", .factor = 4.0};
    auto l = compute_rope_freqs(8, 10000.0, &lin, 128, "t");
    ASSERT_TRUE(l.ok());
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(l->inv_freq[i], plain->inv_freq[i] / 4);

    // llama3 (factor 8, original context 64, low 1, high 4): wavelengths > 64 divided by 8,
    // < 16 unchanged, in between blended.
    RopeScaling l3{.type = "llama3",
                   .factor = 8.0,
                   .low_freq_factor = 1.0,
                   .high_freq_factor = 4.0,
                   .original_max_position_embeddings = 64};
    auto r3 = compute_rope_freqs(16, 10000.0, &l3, 256, "t");
    ASSERT_TRUE(r3.ok());
    for (size_t i = 0; i < r3->inv_freq.size(); ++i) {
        const double f = std::pow(10000.0, -2.0 * static_cast<double>(i) / 16), wl = 2 * std::numbers::pi / f;
        double want = f;
        if (wl > 64)
            want = f / 8;
        else if (wl >= 16) {
            const double smooth = (64 / wl - 1) / (4 - 1);
            want = (1 - smooth) * f / 8 + smooth * f;
        }
        EXPECT_NEAR(r3->inv_freq[i], want, 1e-6 * f) << i;
    }

    RopeScaling y{.type = "yarn", .factor = 4.0, .original_max_position_embeddings = 32};
    auto ry = compute_rope_freqs(16, 10000.0, &y, 128, "t");
    ASSERT_TRUE(ry.ok());
    EXPECT_NEAR(ry->attn_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);
    EXPECT_FLOAT_EQ(ry->inv_freq[0], 1.0f);  // the highest frequency is extrapolated (kept)
    EXPECT_NEAR(ry->inv_freq[7], std::pow(10000.0, -14.0 / 16) / 4, 1e-9);  // lowest interpolated

    RopeScaling bad{.type = "longrope", .factor = 2.0};
    auto e = compute_rope_freqs(16, 10000.0, &bad, 128, "cfg.json");
    ASSERT_FALSE(e.ok());
    EXPECT_TRUE(contains(e.error().message, "longrope")) << e.error().message;
    EXPECT_FALSE(compute_rope_freqs(7, 10000.0, nullptr, 128, "t").ok());
}

TEST(ModelLoad, HyperParametersFromBothSources) {
    TinySpec s;
    s.model_type = "granite";
    s.embd_mul = 12;
    s.resid_mul = 0.25f;
    s.attn_mul = 0.0625f;
    s.logits_scaling = 8;
    const auto w = test::make_weights(s);
    TempDir dir("load_hp");
    test::write_hf_folder(dir.str("hf"), s, w);
    test::write_gguf_model(dir.str("m.gguf"), s, w);
    for (const std::string& p : {dir.str("hf"), dir.str("m.gguf")}) {
        auto m = Model::load(p);
        ASSERT_TRUE(m.ok()) << m.error().message;
        const ModelHParams& h = (*m)->hparams();
        EXPECT_EQ((*m)->arch().name, "granite");
        EXPECT_EQ(h.n_vocab, s.n_vocab);
        EXPECT_EQ(h.n_embd, 64);
        EXPECT_EQ(h.n_layer, 2);
        EXPECT_EQ(h.n_head, 4);
        EXPECT_EQ(h.n_head_kv, 2);
        EXPECT_EQ(h.head_dim, 16);
        EXPECT_EQ(h.n_ff, s.n_ff);
        EXPECT_EQ(h.n_ctx_train, s.max_pos);
        EXPECT_FLOAT_EQ(h.embd_scale, 12);
        EXPECT_FLOAT_EQ(h.residual_scale, 0.25f);
        EXPECT_FLOAT_EQ(h.attn_scale, 0.0625f);
        EXPECT_FLOAT_EQ(h.logit_scale, 0.125f);
        EXPECT_FALSE((*m)->weights().tied_output);
        EXPECT_FALSE((*m)->describe().empty());
    }
}

TEST(ModelLoad, QuantizedAndBf16WeightsLoad) {
    const TinySpec s;
    const auto w = test::make_weights(s);
    TempDir dir("load_q");
    test::write_hf_folder(dir.str("bf16"), s, w, /*bf16=*/true);
    test::write_gguf_model(dir.str("q8.gguf"), s, w, DType::Q8_0);
    test::write_gguf_model(dir.str("f16.gguf"), s, w, DType::F16);
    for (const std::string& p : {dir.str("bf16"), dir.str("q8.gguf"), dir.str("f16.gguf")}) {
        auto m = Model::load(p);
        ASSERT_TRUE(m.ok()) << m.error().message;
    }
}

TEST(ModelLoad, ErrorsNameTheTensor) {
    const TinySpec s;
    const auto w = test::make_weights(s);
    TempDir dir("load_err");

    test::write_gguf_model(dir.str("missing.gguf"), s, w, DType::F32, {"blk.1.ffn_up.weight"});
    std::string e = load_error(dir.str("missing.gguf"));
    EXPECT_TRUE(contains(e, "missing tensor blk.1.ffn_up.weight")) << e;
    EXPECT_TRUE(contains(e, "[64, 96]")) << e;  // expected shape, GGUF order
    EXPECT_TRUE(contains(e, "missing.gguf")) << e;

    auto w2 = w;
    w2.erase("model.layers.1.mlp.up_proj.weight");
    test::write_hf_folder(dir.str("hf_missing"), s, w2);
    e = load_error(dir.str("hf_missing"));
    EXPECT_TRUE(contains(e, "missing tensor model.layers.1.mlp.up_proj.weight")) << e;
    EXPECT_TRUE(contains(e, "[96, 64]")) << e;  // torch order

    auto w3 = w;
    w3["model.layers.0.self_attn.k_proj.weight"].shape = {16, 64};
    w3["model.layers.0.self_attn.k_proj.weight"].data.resize(16 * 64);
    test::write_hf_folder(dir.str("hf_shape"), s, w3);
    e = load_error(dir.str("hf_shape"));
    EXPECT_TRUE(contains(e, "model.layers.0.self_attn.k_proj.weight has shape [16, 64], expected [32, 64]"))
        << e;

    auto w4 = w;
    w4.erase("lm_head.weight");
    test::write_hf_folder(dir.str("hf_nohead"), s, w4);
    e = load_error(dir.str("hf_nohead"));
    EXPECT_TRUE(contains(e, "lm_head.weight")) << e;

    TinySpec q2 = s;
    q2.model_type = "qwen2";  // requires q/k/v biases; the weights have none
    test::write_hf_folder(dir.str("hf_nobias"), q2, w);
    e = load_error(dir.str("hf_nobias"));
    EXPECT_TRUE(contains(e, "missing tensor model.layers.0.self_attn.q_proj.bias")) << e;

    auto cfg = test::make_config(s);
    cfg["model_type"] = "gpt2";
    test::write_hf_folder(dir.str("hf_arch"), s, w, false, &cfg);
    e = load_error(dir.str("hf_arch"));
    EXPECT_TRUE(contains(e, "gpt2") && contains(e, "not supported")) << e;

    cfg = test::make_config(s);
    cfg["num_key_value_heads"] = 3;
    test::write_hf_folder(dir.str("hf_heads"), s, w, false, &cfg);
    e = load_error(dir.str("hf_heads"));
    EXPECT_TRUE(contains(e, "not a multiple")) << e;

    cfg = test::make_config(s);
    cfg["vocab_size"] = 81;
    test::write_hf_folder(dir.str("hf_vocab"), s, w, false, &cfg);
    e = load_error(dir.str("hf_vocab"));
    EXPECT_TRUE(contains(e, "model.embed_tokens.weight")) << e;

    e = load_error(dir.str("nonexistent.gguf"));
    EXPECT_TRUE(contains(e, "no such file")) << e;
}

}  // namespace
}  // namespace pelican
