// Tiny random hybrid Qwen3.5 models (qwen3_5_moe_text / qwen3_5_text) written as HF folders by the
// tests themselves, and an independent double-precision reference forward written from transformers'
// modeling_qwen3_5_moe.py: token by token (the DeltaNet as its plain recurrence, attention over all
// earlier positions), nothing shared with pelican's forward pass but the weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model_test_util.h"

namespace pelican::test {

struct HybridSpec {
    bool moe = true;
    std::string prefix = "model.language_model.";  // or "model."
    bool fused_experts = true;
    bool mtp = false;  // add an mtp.* block (one full-attention MoE layer)
    int n_embd = 32, n_layer = 4, n_head = 4, n_kv = 2, head_dim = 16, n_vocab = 64;
    double partial_rotary = 0.25, theta = 1e7, eps = 1e-6;
    int nk = 2, nv = 4, dk = 8, dv = 8, conv = 4;
    int n_expert = 4, top_k = 2, ff_expert = 16, ff_shared = 24, ff_dense = 40;
    uint32_t seed = 5;

    bool full(int l) const { return (l + 1) % 4 == 0; }
    int key_dim() const { return nk * dk; }
    int value_dim() const { return nv * dv; }
    int conv_dim() const { return 2 * key_dim() + value_dim(); }
    int rot() const { return static_cast<int>(head_dim * partial_rotary); }
};

inline nlohmann::json hybrid_config(const HybridSpec& s) {
    std::vector<std::string> types;
    for (int l = 0; l < s.n_layer; ++l) types.push_back(s.full(l) ? "full_attention" : "linear_attention");
    nlohmann::json c = {
        {"model_type", s.moe ? "qwen3_5_moe_text" : "qwen3_5_text"},
        {"hidden_size", s.n_embd},
        {"num_hidden_layers", s.n_layer},
        {"num_attention_heads", s.n_head},
        {"num_key_value_heads", s.n_kv},
        {"head_dim", s.head_dim},
        {"vocab_size", s.n_vocab},
        {"max_position_embeddings", 1024},
        {"rms_norm_eps", s.eps},
        {"hidden_act", "silu"},
        {"tie_word_embeddings", false},
        {"layer_types", types},
        {"linear_num_key_heads", s.nk},
        {"linear_num_value_heads", s.nv},
        {"linear_key_head_dim", s.dk},
        {"linear_value_head_dim", s.dv},
        {"linear_conv_kernel_dim", s.conv},
        {"rope_parameters",
         {{"rope_type", "default"},
          {"rope_theta", s.theta},
          {"partial_rotary_factor", s.partial_rotary},
          {"mrope_section", {1, 1, 0}},
          {"mrope_interleaved", true}}},
        {"eos_token_id", 2},
    };
    if (s.moe) {
        c["num_experts"] = s.n_expert;
        c["num_experts_per_tok"] = s.top_k;
        c["moe_intermediate_size"] = s.ff_expert;
        c["shared_expert_intermediate_size"] = s.ff_shared;
    } else {
        c["intermediate_size"] = s.ff_dense;
    }
    if (s.mtp) c["mtp_num_hidden_layers"] = 1;
    return c;
}

// HF-named fp32 weights. Zero-centred norms get w ~ 0.15 N(0,1) (scale 1 + w), the DeltaNet's gated
// norm 1 + 0.1 N(0,1); decays exp(g) mostly in (0.3, 1).
inline HfWeightsMap hybrid_weights(const HybridSpec& s) {
    std::mt19937 rng(s.seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
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
    const auto E = static_cast<uint64_t>(s.n_embd), V = static_cast<uint64_t>(s.n_vocab);
    const auto layer = [&](const std::string& p, bool full) {
        add(p + "input_layernorm.weight", {E}, 0.15f);
        add(p + "post_attention_layernorm.weight", {E}, 0.15f);
        if (full) {
            const auto Q = static_cast<uint64_t>(s.n_head * s.head_dim),
                       KV = static_cast<uint64_t>(s.n_kv * s.head_dim);
            add(p + "self_attn.q_proj.weight", {2 * Q, E}, 0.2f);
            add(p + "self_attn.k_proj.weight", {KV, E}, 0.2f);
            add(p + "self_attn.v_proj.weight", {KV, E}, 0.2f);
            add(p + "self_attn.o_proj.weight", {E, Q}, 0.15f);
            add(p + "self_attn.q_norm.weight", {static_cast<uint64_t>(s.head_dim)}, 0.15f);
            add(p + "self_attn.k_norm.weight", {static_cast<uint64_t>(s.head_dim)}, 0.15f);
        } else {
            const auto C = static_cast<uint64_t>(s.conv_dim()), VD = static_cast<uint64_t>(s.value_dim()),
                       NV = static_cast<uint64_t>(s.nv);
            const std::string q = p + "linear_attn.";
            add(q + "in_proj_qkv.weight", {C, E}, 0.2f);
            add(q + "in_proj_z.weight", {VD, E}, 0.2f);
            add(q + "in_proj_b.weight", {NV, E}, 0.2f);
            add(q + "in_proj_a.weight", {NV, E}, 0.2f);
            add(q + "conv1d.weight", {C, 1, static_cast<uint64_t>(s.conv)}, 0.4f);
            add(q + "dt_bias", {NV}, 0.5f);
            HfTensor a;
            a.shape = {NV};
            for (uint64_t i = 0; i < NV; ++i) a.data.push_back(std::log(0.05f + 0.6f * ud(rng)));
            w[q + "A_log"] = std::move(a);
            add(q + "norm.weight", {static_cast<uint64_t>(s.dv)}, 0.1f, 1.0f);
            add(q + "out_proj.weight", {E, VD}, 0.15f);
        }
        const std::string m = p + "mlp.";
        if (!s.moe) {
            const auto F = static_cast<uint64_t>(s.ff_dense);
            add(m + "gate_proj.weight", {F, E}, 0.2f);
            add(m + "up_proj.weight", {F, E}, 0.2f);
            add(m + "down_proj.weight", {E, F}, 0.15f);
            return;
        }
        const auto X = static_cast<uint64_t>(s.n_expert), F = static_cast<uint64_t>(s.ff_expert),
                   S = static_cast<uint64_t>(s.ff_shared);
        add(m + "gate.weight", {X, E}, 0.5f);
        add(m + "shared_expert.gate_proj.weight", {S, E}, 0.2f);
        add(m + "shared_expert.up_proj.weight", {S, E}, 0.2f);
        add(m + "shared_expert.down_proj.weight", {E, S}, 0.15f);
        add(m + "shared_expert_gate.weight", {1, E}, 0.3f);
        add(m + "experts.gate_up_proj", {X, 2 * F, E}, 0.2f);
        add(m + "experts.down_proj", {X, E, F}, 0.15f);
    };
    add(s.prefix + "embed_tokens.weight", {V, E}, 0.7f);
    add(s.prefix + "norm.weight", {E}, 0.15f);
    add("lm_head.weight", {V, E}, 0.2f);
    for (int l = 0; l < s.n_layer; ++l) layer(fmt::format("{}layers.{}.", s.prefix, l), s.full(l));
    if (s.mtp) {
        add("mtp.fc.weight", {E, 2 * E}, 0.15f);
        add("mtp.pre_fc_norm_embedding.weight", {E}, 0.15f);
        add("mtp.pre_fc_norm_hidden.weight", {E}, 0.15f);
        add("mtp.norm.weight", {E}, 0.15f);
        layer("mtp.layers.0.", true);
    }
    return w;
}

// The fused experts of every MoE layer rewritten as per-expert tensors (same values).
inline HfWeightsMap unfuse_experts(const HfWeightsMap& in, const HybridSpec& s) {
    HfWeightsMap out;
    const auto E = static_cast<size_t>(s.n_embd), F = static_cast<size_t>(s.ff_expert);
    for (const auto& [name, t] : in) {
        if (name.ends_with("experts.gate_up_proj")) {
            const std::string p = name.substr(0, name.size() - std::string("gate_up_proj").size());
            for (size_t x = 0; x < static_cast<size_t>(s.n_expert); ++x) {
                const float* base = t.data.data() + x * 2 * F * E;
                out[fmt::format("{}{}.gate_proj.weight", p, x)] = HfTensor{{F, E}, {base, base + F * E}};
                out[fmt::format("{}{}.up_proj.weight", p, x)] =
                    HfTensor{{F, E}, {base + F * E, base + 2 * F * E}};
            }
        } else if (name.ends_with("experts.down_proj")) {
            const std::string p = name.substr(0, name.size() - std::string("down_proj").size());
            for (size_t x = 0; x < static_cast<size_t>(s.n_expert); ++x) {
                const float* base = t.data.data() + x * E * F;
                out[fmt::format("{}{}.down_proj.weight", p, x)] = HfTensor{{E, F}, {base, base + E * F}};
            }
        } else {
            out[name] = t;
        }
    }
    return out;
}

inline void write_hybrid_folder(const std::string& dir, const HybridSpec& s, const HfWeightsMap& w) {
    const nlohmann::json cfg = hybrid_config(s);
    write_hf_folder(dir, TinySpec{}, w, false, &cfg);
}

// ---- the double-precision reference --------------------------------------------------------------
class HybridReference {
public:
    HybridReference(const HybridSpec& s, const HfWeightsMap& w) : s_(s), w_(w) {
        conv_.assign(static_cast<size_t>(s.n_layer),
                     Vec(static_cast<size_t>((s.conv - 1) * s.conv_dim()), 0.0));
        ssm_.assign(static_cast<size_t>(s.n_layer), Vec(static_cast<size_t>(s.nv * s.dk * s.dv), 0.0));
        k_.resize(static_cast<size_t>(s.n_layer) + 1);  // the last slot is the MTP layer's
        v_.resize(static_cast<size_t>(s.n_layer) + 1);
    }

    // Logits [n_vocab] of `tok` at the next position.
    Vec step(int32_t tok) {
        const int E = s_.n_embd;
        const auto& emb = W(s_.prefix + "embed_tokens.weight");
        Vec x(emb.begin() + tok * E, emb.begin() + (tok + 1) * E);
        for (int l = 0; l < s_.n_layer; ++l) {
            const std::string p = fmt::format("{}layers.{}.", s_.prefix, l);
            Vec h = norm_zc(x, W(p + "input_layernorm.weight"));
            const Vec o =
                s_.full(l) ? attention(l, p + "self_attn.", h, pos_) : deltanet(l, p + "linear_attn.", h);
            for (int i = 0; i < E; ++i) x[i] += o[i];
            h = norm_zc(x, W(p + "post_attention_layernorm.weight"));
            const Vec m = s_.moe ? moe(p + "mlp.", h) : swiglu(p + "mlp.", h, s_.ff_dense);
            for (int i = 0; i < E; ++i) x[i] += m[i];
        }
        ++pos_;
        hidden_ = norm_zc(x, W(s_.prefix + "norm.weight"));
        return linear("lm_head.weight", hidden_, s_.n_vocab);
    }
    // The final-normed hidden state of the last step's token (the MTP input h_t).
    const Vec& hidden() const { return hidden_; }

    // One MTP step (research §1.7): h = main hidden state h_p at position p, tok = x_{p+1}:
    //   z = fc(concat[norm_zc(embd[tok], pre_fc_norm_embedding), norm_zc(h, pre_fc_norm_hidden)])
    //   z = decoder layer mtp.layers.0 (full attention at position p + 1 over the MTP's own K/V, then MoE)
    //   logits = lm_head(norm_zc(z, mtp.norm)).
    // Steps must come for consecutive p = 0, 1, 2, ... (the MTP K/V list grows by one per call).
    Vec mtp_step(int32_t tok, const Vec& h) {
        const int E = s_.n_embd;
        const auto& emb = W(s_.prefix + "embed_tokens.weight");
        const Vec e(emb.begin() + tok * E, emb.begin() + (tok + 1) * E);
        Vec cat = norm_zc(e, W("mtp.pre_fc_norm_embedding.weight"));
        const Vec hn = norm_zc(h, W("mtp.pre_fc_norm_hidden.weight"));
        cat.insert(cat.end(), hn.begin(), hn.end());
        Vec x = linear("mtp.fc.weight", cat, E);
        const std::string p = "mtp.layers.0.";
        const int l = s_.n_layer;
        const int pos = static_cast<int>(k_[static_cast<size_t>(l)].size()) + 1;
        Vec a = norm_zc(x, W(p + "input_layernorm.weight"));
        const Vec o = attention(l, p + "self_attn.", a, pos);
        for (int i = 0; i < E; ++i) x[i] += o[i];
        a = norm_zc(x, W(p + "post_attention_layernorm.weight"));
        const Vec m = s_.moe ? moe(p + "mlp.", a) : swiglu(p + "mlp.", a, s_.ff_dense);
        for (int i = 0; i < E; ++i) x[i] += m[i];
        return linear("lm_head.weight", norm_zc(x, W("mtp.norm.weight")), s_.n_vocab);
    }

private:
    const std::vector<float>& W(const std::string& n) const { return w_.at(n).data; }
    static double silu(double x) { return x / (1 + std::exp(-x)); }
    static double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

    // y = M x for M [n_out, n_in] stored at `name` (offset rows: row0).
    Vec linear(const std::string& name, const Vec& x, int n_out, size_t offset = 0) const {
        const auto& m = W(name);
        const size_t n_in = x.size();
        Vec y(static_cast<size_t>(n_out), 0.0);
        for (size_t o = 0; o < y.size(); ++o)
            for (size_t i = 0; i < n_in; ++i) y[o] += static_cast<double>(m[offset + o * n_in + i]) * x[i];
        return y;
    }
    static Vec norm_zc(const Vec& x, const std::vector<float>& w, size_t off = 0, size_t n = 0,
                       double eps = 1e-6) {
        if (n == 0) n = x.size();
        Vec y(x.begin() + static_cast<long>(off), x.begin() + static_cast<long>(off + n));
        double ss = 0;
        for (double v : y) ss += v * v;
        const double r = 1 / std::sqrt(ss / static_cast<double>(n) + eps);
        for (size_t i = 0; i < n; ++i) y[i] = y[i] * r * (1.0 + w[i]);
        return y;
    }

    Vec swiglu(const std::string& p, const Vec& h, int ff) const {
        const Vec g = linear(p + "gate_proj.weight", h, ff), u = linear(p + "up_proj.weight", h, ff);
        Vec a(static_cast<size_t>(ff));
        for (int i = 0; i < ff; ++i) a[i] = silu(g[i]) * u[i];
        return linear(p + "down_proj.weight", a, s_.n_embd);
    }

    Vec moe(const std::string& p, const Vec& h) const {
        const int X = s_.n_expert, E = s_.n_embd, F = s_.ff_expert;
        const Vec logits = linear(p + "gate.weight", h, X);
        const double mx = *std::max_element(logits.begin(), logits.end());
        Vec prob(static_cast<size_t>(X));
        double sum = 0;
        for (int i = 0; i < X; ++i) sum += prob[i] = std::exp(logits[i] - mx);
        for (double& v : prob) v /= sum;
        std::vector<int> ids(static_cast<size_t>(X));
        std::iota(ids.begin(), ids.end(), 0);
        std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return prob[a] > prob[b]; });
        double top = 0;
        for (int j = 0; j < s_.top_k; ++j) top += prob[ids[j]];
        Vec y = swiglu(p + "shared_expert.", h, s_.ff_shared);
        const double sg = sigmoid(linear(p + "shared_expert_gate.weight", h, 1)[0]);
        for (double& v : y) v *= sg;
        for (int j = 0; j < s_.top_k; ++j) {
            const int x = ids[j];
            const size_t gu = static_cast<size_t>(x) * 2 * F * E, dn = static_cast<size_t>(x) * E * F;
            const Vec g = linear(p + "experts.gate_up_proj", h, F, gu);
            const Vec u = linear(p + "experts.gate_up_proj", h, F, gu + static_cast<size_t>(F) * E);
            Vec a(static_cast<size_t>(F));
            for (int i = 0; i < F; ++i) a[i] = silu(g[i]) * u[i];
            const Vec d = linear(p + "experts.down_proj", a, E, dn);
            for (int i = 0; i < E; ++i) y[i] += prob[x] / top * d[i];
        }
        return y;
    }

    Vec attention(int l, const std::string& p, const Vec& h, int pos) {
        const int NH = s_.n_head, NKV = s_.n_kv, HD = s_.head_dim, R = s_.rot();
        const Vec qg = linear(p + "q_proj.weight", h, 2 * NH * HD);
        Vec k = linear(p + "k_proj.weight", h, NKV * HD), v = linear(p + "v_proj.weight", h, NKV * HD);
        Vec q(static_cast<size_t>(NH * HD)), gate(q.size());
        for (int hh = 0; hh < NH; ++hh)
            for (int d = 0; d < HD; ++d) {
                q[hh * HD + d] = qg[hh * 2 * HD + d];
                gate[hh * HD + d] = qg[hh * 2 * HD + HD + d];
            }
        const auto norm_rope = [&](Vec& x, int heads, const std::vector<float>& nw) {
            for (int hh = 0; hh < heads; ++hh) {
                const Vec y = norm_zc(x, nw, static_cast<size_t>(hh * HD), static_cast<size_t>(HD));
                for (int d = 0; d < HD; ++d) x[hh * HD + d] = y[d];
                for (int i = 0; i < R / 2; ++i) {  // NeoX pairs (i, i + R/2) of the first R dims
                    const double a = pos * std::pow(s_.theta, -2.0 * i / R);
                    const double x1 = x[hh * HD + i], x2 = x[hh * HD + i + R / 2];
                    x[hh * HD + i] = x1 * std::cos(a) - x2 * std::sin(a);
                    x[hh * HD + i + R / 2] = x2 * std::cos(a) + x1 * std::sin(a);
                }
            }
        };
        norm_rope(q, NH, W(p + "q_norm.weight"));
        norm_rope(k, NKV, W(p + "k_norm.weight"));
        k_[l].push_back(k);
        v_[l].push_back(v);
        Vec o(q.size(), 0.0);
        const size_t T = k_[l].size();
        for (int hh = 0; hh < NH; ++hh) {
            const int kh = hh / (NH / NKV);
            Vec sc(T);
            double mx = -1e300;
            for (size_t t = 0; t < T; ++t) {
                double d = 0;
                for (int i = 0; i < HD; ++i) d += q[hh * HD + i] * k_[l][t][kh * HD + i];
                sc[t] = d / std::sqrt(static_cast<double>(HD));
                mx = std::max(mx, sc[t]);
            }
            double sum = 0;
            for (double& x : sc) sum += x = std::exp(x - mx);
            for (size_t t = 0; t < T; ++t)
                for (int i = 0; i < HD; ++i) o[hh * HD + i] += sc[t] / sum * v_[l][t][kh * HD + i];
        }
        for (size_t i = 0; i < o.size(); ++i) o[i] *= sigmoid(gate[i]);
        return linear(p + "o_proj.weight", o, s_.n_embd);
    }

    Vec deltanet(int l, const std::string& p, const Vec& h) {
        const int C = s_.conv_dim(), K = s_.conv, KD = s_.key_dim(), NV = s_.nv, DK = s_.dk, DV = s_.dv;
        const Vec qkv = linear(p + "in_proj_qkv.weight", h, C);
        const Vec z = linear(p + "in_proj_z.weight", h, s_.value_dim());
        const Vec b = linear(p + "in_proj_b.weight", h, NV), a = linear(p + "in_proj_a.weight", h, NV);
        Vec& cs = conv_[l];  // [K-1, C], oldest first
        const auto& cw = W(p + "conv1d.weight");
        Vec y(static_cast<size_t>(C));
        for (int c = 0; c < C; ++c) {
            double acc = cw[c * K + K - 1] * qkv[c];
            for (int j = 0; j < K - 1; ++j) acc += cw[c * K + j] * cs[j * C + c];
            y[c] = silu(acc);
        }
        for (int j = 0; j + 1 < K - 1; ++j)
            for (int c = 0; c < C; ++c) cs[j * C + c] = cs[(j + 1) * C + c];
        for (int c = 0; c < C; ++c) cs[(K - 2) * C + c] = qkv[c];
        Vec q(y.begin(), y.begin() + KD), k(y.begin() + KD, y.begin() + 2 * KD),
            v(y.begin() + 2 * KD, y.end());
        for (int hh = 0; hh < s_.nk; ++hh) {
            for (Vec* x : {&q, &k}) {
                double ss = 0;
                for (int i = 0; i < DK; ++i) ss += (*x)[hh * DK + i] * (*x)[hh * DK + i];
                const double r = 1 / std::sqrt(ss + 1e-6);
                for (int i = 0; i < DK; ++i) (*x)[hh * DK + i] *= r;
            }
            for (int i = 0; i < DK; ++i) q[hh * DK + i] /= std::sqrt(static_cast<double>(DK));
        }
        const auto& a_log = W(p + "A_log");
        const auto& dt = W(p + "dt_bias");
        const auto& nw = W(p + "norm.weight");
        Vec o(static_cast<size_t>(s_.value_dim()));
        for (int hh = 0; hh < NV; ++hh) {
            const int kh = hh / (NV / s_.nk);
            const double beta = sigmoid(b[hh]);
            const double sp = a[hh] + dt[hh] > 20 ? a[hh] + dt[hh] : std::log1p(std::exp(a[hh] + dt[hh]));
            const double g = -std::exp(static_cast<double>(a_log[hh])) * sp;
            double* S = ssm_[l].data() + static_cast<size_t>(hh) * DK * DV;
            for (int i = 0; i < DK * DV; ++i) S[i] *= std::exp(g);
            for (int d = 0; d < DV; ++d) {
                double u = 0;
                for (int i = 0; i < DK; ++i) u += S[i * DV + d] * k[kh * DK + i];
                const double delta = beta * (v[hh * DV + d] - u);
                for (int i = 0; i < DK; ++i) S[i * DV + d] += k[kh * DK + i] * delta;
            }
            double ss = 0;
            for (int d = 0; d < DV; ++d) {
                double acc = 0;
                for (int i = 0; i < DK; ++i) acc += S[i * DV + d] * q[kh * DK + i];
                o[hh * DV + d] = acc;
                ss += acc * acc;
            }
            const double r = 1 / std::sqrt(ss / DV + s_.eps);
            for (int d = 0; d < DV; ++d) o[hh * DV + d] = nw[d] * o[hh * DV + d] * r * silu(z[hh * DV + d]);
        }
        return linear(p + "out_proj.weight", o, s_.n_embd);
    }

    const HybridSpec& s_;
    const HfWeightsMap& w_;
    int pos_ = 0;
    Vec hidden_;
    std::vector<Vec> conv_, ssm_;
    std::vector<std::vector<Vec>> k_, v_;
};

}  // namespace pelican::test
