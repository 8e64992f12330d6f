// Tiny random Llama-family models for the model tests: weights are generated in HF (torch) order
// and written as an HF folder (config.json + model.safetensors) and/or a GGUF file (names mapped
// with model/tensor_names.h, q/k rows permuted for the llama/mistral/granite archs exactly as
// llama.cpp's converter does). Also an independent double-precision reference forward pass written
// straight from the HF modeling code, to catch wiring errors in pelican's forward pass.
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/dequantize.h"
#include "core/float_convert.h"
#include "core/mmap_file.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "model/rope_freq.h"
#include "model/rope_permute.h"
#include "model/tensor_names.h"
#include "temp_dir.h"

namespace pelican::test {

namespace fs = std::filesystem;

struct TinySpec {
    std::string model_type = "llama";  // HF model_type (and GGUF arch, except mistral -> llama)
    int n_embd = 64, n_layer = 2, n_head = 4, n_kv = 2, head_dim = 16, n_ff = 96, n_vocab = 80;
    bool qkv_bias = false, qk_norm = false, tied = false;
    float embd_mul = 1, resid_mul = 1, attn_mul = 0, logits_scaling = 1;  // granite (attn_mul 0 = default)
    double theta = 10000.0, eps = 1e-5;
    int max_pos = 256;
    int window = 0;  // sliding window (mistral), 0 = none
    uint32_t seed = 7;

    int q_dim() const { return n_head * head_dim; }
    int kv_dim() const { return n_kv * head_dim; }
    bool permuted_in_gguf() const {
        return model_type == "llama" || model_type == "mistral" || model_type == "granite";
    }
};

// HF name -> (torch shape, fp32 values).
struct HfTensor {
    std::vector<uint64_t> shape;
    std::vector<float> data;
};
using HfWeightsMap = std::map<std::string, HfTensor>;

inline HfWeightsMap make_weights(const TinySpec& s) {
    std::mt19937 rng(s.seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    HfWeightsMap w;
    const auto add = [&](const std::string& name, std::vector<uint64_t> shape, float scale,
                         float offset = 0) {
        HfTensor t;
        t.shape = shape;
        size_t n = 1;
        for (auto d : shape) n *= d;
        t.data.resize(n);
        for (auto& x : t.data) x = offset + scale * nd(rng);
        w[name] = std::move(t);
    };
    const auto E = static_cast<uint64_t>(s.n_embd), Q = static_cast<uint64_t>(s.q_dim()),
               KV = static_cast<uint64_t>(s.kv_dim()), F = static_cast<uint64_t>(s.n_ff),
               V = static_cast<uint64_t>(s.n_vocab), HD = static_cast<uint64_t>(s.head_dim);
    add("model.embed_tokens.weight", {V, E}, 0.5f);
    add("model.norm.weight", {E}, 0.1f, 1.0f);
    if (!s.tied) add("lm_head.weight", {V, E}, 0.15f);
    for (int l = 0; l < s.n_layer; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l);
        add(p + "input_layernorm.weight", {E}, 0.1f, 1.0f);
        add(p + "post_attention_layernorm.weight", {E}, 0.1f, 1.0f);
        add(p + "self_attn.q_proj.weight", {Q, E}, 0.15f);
        add(p + "self_attn.k_proj.weight", {KV, E}, 0.15f);
        add(p + "self_attn.v_proj.weight", {KV, E}, 0.15f);
        add(p + "self_attn.o_proj.weight", {E, Q}, 0.15f);
        if (s.qkv_bias) {
            add(p + "self_attn.q_proj.bias", {Q}, 0.2f);
            add(p + "self_attn.k_proj.bias", {KV}, 0.2f);
            add(p + "self_attn.v_proj.bias", {KV}, 0.2f);
        }
        if (s.qk_norm) {
            add(p + "self_attn.q_norm.weight", {HD}, 0.1f, 1.0f);
            add(p + "self_attn.k_norm.weight", {HD}, 0.1f, 1.0f);
        }
        add(p + "mlp.gate_proj.weight", {F, E}, 0.15f);
        add(p + "mlp.up_proj.weight", {F, E}, 0.15f);
        add(p + "mlp.down_proj.weight", {E, F}, 0.15f);
    }
    return w;
}

inline nlohmann::json make_config(const TinySpec& s) {
    nlohmann::json c = {
        {"model_type", s.model_type},
        {"hidden_size", s.n_embd},
        {"intermediate_size", s.n_ff},
        {"num_hidden_layers", s.n_layer},
        {"num_attention_heads", s.n_head},
        {"num_key_value_heads", s.n_kv},
        {"head_dim", s.head_dim},
        {"vocab_size", s.n_vocab},
        {"max_position_embeddings", s.max_pos},
        {"rms_norm_eps", s.eps},
        {"rope_theta", s.theta},
        {"tie_word_embeddings", s.tied},
        {"hidden_act", "silu"},
        {"bos_token_id", 1},
        {"eos_token_id", 2},
    };
    if (s.window > 0) c["sliding_window"] = s.window;
    if (s.model_type == "granite") {
        c["embedding_multiplier"] = s.embd_mul;
        c["residual_multiplier"] = s.resid_mul;
        c["attention_multiplier"] = s.attn_mul;
        c["logits_scaling"] = s.logits_scaling;
    }
    return c;
}

// Writes config.json + model.safetensors (F32, or BF16 when bf16) into dir.
inline void write_hf_folder(const std::string& dir, const TinySpec& s, const HfWeightsMap& w,
                            bool bf16 = false, const nlohmann::json* config_override = nullptr) {
    fs::create_directories(dir);
    const std::string cfg = (config_override ? *config_override : make_config(s)).dump(2);
    ASSERT_TRUE(write_file_atomic(dir + "/config.json",
                                  std::span(reinterpret_cast<const uint8_t*>(cfg.data()), cfg.size()))
                    .ok());
    std::vector<std::vector<uint8_t>> storage;
    std::vector<SafetensorsWriteTensor> ts;
    for (const auto& [name, t] : w) {
        std::vector<uint8_t> bytes;
        if (bf16) {
            bytes.resize(t.data.size() * 2);
            for (size_t i = 0; i < t.data.size(); ++i) {
                const uint16_t b = f32_to_bf16(t.data[i]);
                std::memcpy(bytes.data() + 2 * i, &b, 2);
            }
        } else {
            bytes.resize(t.data.size() * 4);
            std::memcpy(bytes.data(), t.data.data(), bytes.size());
        }
        storage.push_back(std::move(bytes));
        ts.push_back({name, bf16 ? StDType::BF16 : StDType::F32, t.shape, storage.back()});
    }
    ASSERT_TRUE(safetensors_write(dir + "/model.safetensors", std::move(ts), {}).ok());
}

// Writes a GGUF of the same model. dtype: storage of 2-D weights (F32, F16, BF16, Q8_0...);
// norms and biases stay F32. Skips tensors listed in `skip` (GGUF names) for error tests.
// Rope scaling is written as llama.cpp's converter does: llama3 as a rope_freqs.weight tensor of
// per-pair divisors, linear/yarn as <arch>.rope.scaling.* keys. type_of: per-tensor storage types
// that override dtype (GGUF names, e.g. {"blk.0.attn_v.weight", Q6_K}) for mixed-type files.
inline void write_gguf_model(const std::string& path, const TinySpec& s, const HfWeightsMap& w,
                             DType dtype = DType::F32, const std::vector<std::string>& skip = {},
                             bool permute = true, const RopeScaling* scaling = nullptr,
                             const std::map<std::string, DType>& type_of = {}) {
    const std::string arch = s.model_type == "mistral" ? "llama" : s.model_type;
    GgufWriter g;
    ASSERT_TRUE(g.add_kv("general.architecture", gguf_string(arch)).ok());
    const auto u32 = [&](const std::string& k, uint32_t v) {
        ASSERT_TRUE(g.add_kv(arch + "." + k, gguf_u32(v)).ok());
    };
    const auto f32 = [&](const std::string& k, float v) {
        ASSERT_TRUE(g.add_kv(arch + "." + k, gguf_f32(v)).ok());
    };
    u32("context_length", static_cast<uint32_t>(s.max_pos));
    u32("embedding_length", static_cast<uint32_t>(s.n_embd));
    u32("block_count", static_cast<uint32_t>(s.n_layer));
    u32("feed_forward_length", static_cast<uint32_t>(s.n_ff));
    u32("attention.head_count", static_cast<uint32_t>(s.n_head));
    u32("attention.head_count_kv", static_cast<uint32_t>(s.n_kv));
    u32("attention.key_length", static_cast<uint32_t>(s.head_dim));
    u32("attention.value_length", static_cast<uint32_t>(s.head_dim));
    u32("rope.dimension_count", static_cast<uint32_t>(s.head_dim));
    f32("rope.freq_base", static_cast<float>(s.theta));
    f32("attention.layer_norm_rms_epsilon", static_cast<float>(s.eps));
    if (s.model_type == "granite") {
        f32("embedding_scale", s.embd_mul);
        f32("residual_scale", s.resid_mul);
        f32("attention.scale", s.attn_mul);
        f32("logit_scale", s.logits_scaling);
    }
    if (s.window > 0) u32("attention.sliding_window", static_cast<uint32_t>(s.window));
    std::vector<std::vector<uint8_t>> data;
    if (scaling && scaling->type == "llama3") {
        auto plain = compute_rope_freqs(s.head_dim, s.theta, nullptr, s.max_pos, "test");
        auto scaled = compute_rope_freqs(s.head_dim, s.theta, scaling, s.max_pos, "test");
        ASSERT_TRUE(plain.ok() && scaled.ok());
        std::vector<float> factors(plain->inv_freq.size());
        for (size_t i = 0; i < factors.size(); ++i) factors[i] = plain->inv_freq[i] / scaled->inv_freq[i];
        ASSERT_TRUE(g.add_tensor("rope_freqs.weight", DType::F32, {factors.size()}).ok());
        data.emplace_back(reinterpret_cast<const uint8_t*>(factors.data()),
                          reinterpret_cast<const uint8_t*>(factors.data() + factors.size()));
    } else if (scaling) {
        ASSERT_TRUE(g.add_kv(arch + ".rope.scaling.type", gguf_string(scaling->type)).ok());
        f32("rope.scaling.factor", static_cast<float>(scaling->factor));
        if (scaling->original_max_position_embeddings)
            u32("rope.scaling.original_context_length",
                static_cast<uint32_t>(*scaling->original_max_position_embeddings));
    }
    for (const auto& [hf_name, t] : w) {
        const auto name = hf_to_gguf_tensor_name(hf_name);
        ASSERT_TRUE(name.has_value()) << hf_name;
        if (std::find(skip.begin(), skip.end(), *name) != skip.end()) continue;
        std::vector<float> vals = t.data;
        const QkPermute kind = qk_permute_kind(*name);
        if (permute && s.permuted_in_gguf() && kind != QkPermute::None) {
            const int64_t rows = static_cast<int64_t>(t.shape[0]);
            const int64_t row_floats = t.shape.size() > 1 ? static_cast<int64_t>(t.shape[1]) : 1;
            std::vector<float> out(vals.size());
            const auto bytes = [](std::vector<float>& v) {
                return std::span(reinterpret_cast<uint8_t*>(v.data()), v.size() * 4);
            };
            ASSERT_TRUE(rope_permute_rows(bytes(vals), bytes(out), rows, row_floats * 4,
                                          kind == QkPermute::Q ? s.n_head : s.n_kv)
                            .ok());
            vals = std::move(out);
        }
        const auto over = type_of.find(*name);
        const DType dt = t.shape.size() != 2 ? DType::F32 : over != type_of.end() ? over->second : dtype;
        std::vector<uint64_t> dims(t.shape.rbegin(), t.shape.rend());
        ASSERT_TRUE(g.add_tensor(*name, dt, dims).ok()) << *name;
        std::vector<uint8_t> bytes(*dtype_row_bytes(dt, vals.size()));
        ASSERT_TRUE(quantize_row(dt, vals.data(), bytes.data(), static_cast<int64_t>(vals.size())).ok());
        data.push_back(std::move(bytes));
    }
    std::vector<std::span<const uint8_t>> spans(data.begin(), data.end());
    auto bytes = g.to_bytes(spans);
    ASSERT_TRUE(bytes.ok()) << bytes.error().message;
    ASSERT_TRUE(write_file_atomic(path, *bytes).ok());
}

// ---- independent reference forward (double precision, HF semantics, no KV cache) ----------------
// Returns logits [n_tok * n_vocab] for the whole sequence, straight from the formulas of
// transformers' Llama / Qwen2 / Qwen3 / Granite modeling code (NeoX rotate_half rope, no scaling).
using Vec = std::vector<double>;

inline Vec ref_linear(const HfWeightsMap& w, const Vec& x, const std::string& name, int n_in, int n_out) {
    const auto& m = w.at(name + ".weight").data;
    const auto bias = w.find(name + ".bias");
    Vec y(n_out);
    for (int o = 0; o < n_out; ++o) {
        double acc = bias != w.end() ? bias->second.data[o] : 0.0;
        for (int i = 0; i < n_in; ++i) acc += static_cast<double>(m[o * n_in + i]) * x[i];
        y[o] = acc;
    }
    return y;
}

// RMSNorm of x[off .. off+n) in place with weight g[0..n).
inline void ref_rmsnorm(Vec& x, const std::vector<float>& g, int off, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
    const double r = 1.0 / std::sqrt(ss / n + eps);
    for (int i = 0; i < n; ++i) x[off + i] = x[off + i] * r * g[i];
}

// rotate_half rope on every head of v at position pos.
inline void ref_rope(Vec& v, int n_heads, int hd, int pos, double theta) {
    for (int h = 0; h < n_heads; ++h) {
        for (int i = 0; i < hd / 2; ++i) {
            const double a = pos / std::pow(theta, 2.0 * i / hd), c = std::cos(a), sn = std::sin(a);
            const double x1 = v[h * hd + i], x2 = v[h * hd + i + hd / 2];
            v[h * hd + i] = x1 * c - x2 * sn;
            v[h * hd + i + hd / 2] = x2 * c + x1 * sn;
        }
    }
}

inline Vec reference_forward(const TinySpec& s, const HfWeightsMap& w, const std::vector<int32_t>& toks) {
    const int T = static_cast<int>(toks.size()), E = s.n_embd, HD = s.head_dim, NH = s.n_head, NKV = s.n_kv;
    const auto W = [&](const std::string& n) -> const std::vector<float>& { return w.at(n).data; };
    const double attn_scale = s.attn_mul != 0 ? s.attn_mul : 1.0 / std::sqrt(static_cast<double>(HD));
    std::vector<Vec> x(T, Vec(E));
    for (int t = 0; t < T; ++t)
        for (int i = 0; i < E; ++i) x[t][i] = s.embd_mul * W("model.embed_tokens.weight")[toks[t] * E + i];
    for (int l = 0; l < s.n_layer; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l);
        std::vector<Vec> q(T), k(T), v(T);
        for (int t = 0; t < T; ++t) {
            Vec h = x[t];
            ref_rmsnorm(h, W(p + "input_layernorm.weight"), 0, E, s.eps);
            q[t] = ref_linear(w, h, p + "self_attn.q_proj", E, s.q_dim());
            k[t] = ref_linear(w, h, p + "self_attn.k_proj", E, s.kv_dim());
            v[t] = ref_linear(w, h, p + "self_attn.v_proj", E, s.kv_dim());
            if (s.qk_norm) {
                for (int hh = 0; hh < NH; ++hh)
                    ref_rmsnorm(q[t], W(p + "self_attn.q_norm.weight"), hh * HD, HD, s.eps);
                for (int hh = 0; hh < NKV; ++hh)
                    ref_rmsnorm(k[t], W(p + "self_attn.k_norm.weight"), hh * HD, HD, s.eps);
            }
            ref_rope(q[t], NH, HD, t, s.theta);
            ref_rope(k[t], NKV, HD, t, s.theta);
        }
        for (int t = 0; t < T; ++t) {
            Vec att(s.q_dim(), 0.0);
            for (int hh = 0; hh < NH; ++hh) {
                const int kvh = hh / (NH / NKV);
                Vec sc(t + 1);
                double mx = -1e300;
                const int j0 = s.window > 0 ? std::max(0, t - s.window + 1) : 0;
                for (int j = 0; j < j0; ++j) sc[j] = -1e300;
                for (int j = j0; j <= t; ++j) {
                    double d = 0;
                    for (int i = 0; i < HD; ++i) d += q[t][hh * HD + i] * k[j][kvh * HD + i];
                    sc[j] = d * attn_scale;
                    mx = std::max(mx, sc[j]);
                }
                double sum = 0;
                for (auto& e : sc) sum += (e = e == -1e300 ? 0.0 : std::exp(e - mx));
                for (int j = 0; j <= t; ++j)
                    for (int i = 0; i < HD; ++i) att[hh * HD + i] += sc[j] / sum * v[j][kvh * HD + i];
            }
            const Vec o = ref_linear(w, att, p + "self_attn.o_proj", s.q_dim(), E);
            for (int i = 0; i < E; ++i) x[t][i] += s.resid_mul * o[i];
            Vec h = x[t];
            ref_rmsnorm(h, W(p + "post_attention_layernorm.weight"), 0, E, s.eps);
            Vec g = ref_linear(w, h, p + "mlp.gate_proj", E, s.n_ff);
            const Vec u = ref_linear(w, h, p + "mlp.up_proj", E, s.n_ff);
            for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
            const Vec d = ref_linear(w, g, p + "mlp.down_proj", s.n_ff, E);
            for (int i = 0; i < E; ++i) x[t][i] += s.resid_mul * d[i];
        }
    }
    Vec logits;
    const std::string head = s.tied ? "model.embed_tokens" : "lm_head";
    for (int t = 0; t < T; ++t) {
        Vec h = x[t];
        ref_rmsnorm(h, W("model.norm.weight"), 0, E, s.eps);
        for (double y : ref_linear(w, h, head, E, s.n_vocab)) logits.push_back(y / s.logits_scaling);
    }
    return logits;
}

// Largest |a - b| / max(1, max|b|) over the arrays.
template <typename A, typename B>
double max_rel_diff(const A& a, const B& b) {
    double scale = 1.0, d = 0.0;
    for (size_t i = 0; i < b.size(); ++i) scale = std::max(scale, std::abs(static_cast<double>(b[i])));
    for (size_t i = 0; i < b.size(); ++i)
        d = std::max(d, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    return d / scale;
}

}  // namespace pelican::test
