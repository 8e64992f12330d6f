// Loading of the hybrid Qwen3.5 weights from a Hugging Face folder (model/hybrid_weights.h).
#include "model/hybrid_weights.h"

#include <fmt/format.h>

#include "core/dequantize.h"

namespace pelican {
namespace {

// Lookups by HF name with shapes in torch order (slowest first).
class HfLoader {
public:
    HfLoader(const WeightSource& src, HybridWeights& hw, const WeightLoadOptions& opt)
        : src_(src), hw_(hw), opt_(opt) {}

    Expected<std::optional<Tensor>> get(const std::string& name, std::vector<int64_t> shape, bool required) {
        PELICAN_ASSIGN(std::optional<Tensor> t, src_.find(name));
        if (!t) {
            if (required)
                return make_error("{}: missing tensor {} (expected shape [{}])", src_.path(), name,
                                  fmt::join(shape, ", "));
            return t;
        }
        std::vector<int64_t> have(t->ne.rbegin() + (kMaxDims - t->n_dims), t->ne.rend());
        if (have != shape)
            return make_error("{}: tensor {} has shape [{}], expected [{}]", src_.path(), name,
                              fmt::join(have, ", "), fmt::join(shape, ", "));
        return t;
    }

    Expected<cpu::Weight> prepare(const Tensor& t) {
        if (!cpu::matmul_supported(t.dtype))
            return make_error("{}: tensor {} has type {}, which the CPU matmul does not support", src_.path(),
                              t.name, dtype_name(t.dtype));
        auto w = cpu::Weight::prepare(t, opt_.allow_repack, /*own_copy=*/opt_.allow_repack);
        if (!w) return make_error("{}: {}", src_.path(), w.error().message);
        return std::move(w).value();
    }

    // torch [n_out, n_in]
    Expected<cpu::Weight> matrix(const std::string& name, int64_t n_out, int64_t n_in) {
        PELICAN_ASSIGN(std::optional<Tensor> t, get(name, {n_out, n_in}, true));
        return prepare(*t);
    }

    // Any shape, as n fp32 values (converted when stored narrower).
    Expected<const float*> floats(const std::string& name, std::vector<int64_t> shape) {
        PELICAN_ASSIGN(std::optional<Tensor> t, get(name, shape, true));
        if (t->dtype == DType::F32) return static_cast<const float*>(t->data);
        PELICAN_ASSIGN(Buffer b, Buffer::allocate(static_cast<size_t>(t->n_elements()) * sizeof(float)));
        auto* out = static_cast<float*>(b.data());
        PELICAN_TRY(dequantize_tensor(*t, out));
        hw_.owned.push_back(std::move(b));
        return static_cast<const float*>(out);
    }
    Expected<const float*> vec(const std::string& name, int64_t n) { return floats(name, {n}); }

    // Rows [row0, row0 + n_rows) of matrix `m` of a 3-D tensor t (torch [n_mat, rows, n_in]) as a 2-D view.
    Expected<cpu::Weight> slice(const Tensor& t, int64_t m, int64_t row0, int64_t n_rows, std::string label) {
        const int64_t n_in = t.ne[0];
        auto* base = static_cast<uint8_t*>(t.data) + m * t.nb[2] + row0 * t.nb[1];
        hw_.names.push_back(std::move(label));
        PELICAN_ASSIGN(Tensor v, Tensor::contiguous_view(t.dtype, {n_in, n_rows}, base, hw_.names.back()));
        return prepare(v);
    }

    const WeightSource& src() const { return src_; }

private:
    const WeightSource& src_;
    HybridWeights& hw_;
    const WeightLoadOptions& opt_;
};

Status load_swiglu(HfLoader& L, const std::string& p, int64_t e, int64_t ff, SwigluWeights& w) {
    PELICAN_ASSIGN(w.gate, L.matrix(p + "gate_proj.weight", ff, e));
    PELICAN_ASSIGN(w.up, L.matrix(p + "up_proj.weight", ff, e));
    PELICAN_ASSIGN(w.down, L.matrix(p + "down_proj.weight", e, ff));
    return {};
}

Status load_moe(HfLoader& L, const std::string& p, const ModelHParams& hp, MoeWeights& w) {
    const HybridHParams& h = *hp.hybrid;
    const int64_t e = hp.n_embd, ff = h.n_ff_expert, E = h.n_expert;
    PELICAN_ASSIGN(w.router, L.matrix(p + "gate.weight", E, e));
    PELICAN_TRY(load_swiglu(L, p + "shared_expert.", e, h.n_ff_shared, w.shared));
    PELICAN_ASSIGN(w.shared_gate, L.matrix(p + "shared_expert_gate.weight", 1, e));
    w.experts.resize(static_cast<size_t>(E));
    PELICAN_ASSIGN(std::optional<Tensor> gate_up, L.get(p + "experts.gate_up_proj", {E, 2 * ff, e}, false));
    if (gate_up) {  // fused: rows 0..ff-1 of each expert are gate, ff..2ff-1 up
        PELICAN_ASSIGN(std::optional<Tensor> down, L.get(p + "experts.down_proj", {E, e, ff}, true));
        for (int64_t x = 0; x < E; ++x) {
            SwigluWeights& s = w.experts[static_cast<size_t>(x)];
            PELICAN_ASSIGN(s.gate,
                           L.slice(*gate_up, x, 0, ff, fmt::format("{}experts.gate_up_proj[{}].gate", p, x)));
            PELICAN_ASSIGN(s.up,
                           L.slice(*gate_up, x, ff, ff, fmt::format("{}experts.gate_up_proj[{}].up", p, x)));
            PELICAN_ASSIGN(s.down, L.slice(*down, x, 0, e, fmt::format("{}experts.down_proj[{}]", p, x)));
        }
        return {};
    }
    for (int64_t x = 0; x < E; ++x)
        PELICAN_TRY(
            load_swiglu(L, fmt::format("{}experts.{}.", p, x), e, ff, w.experts[static_cast<size_t>(x)]));
    return {};
}

Status load_attention(HfLoader& L, const std::string& p, const ModelHParams& hp, GatedAttentionWeights& w) {
    const int64_t e = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim();
    PELICAN_ASSIGN(w.wq, L.matrix(p + "q_proj.weight", 2 * q, e));
    PELICAN_ASSIGN(w.wk, L.matrix(p + "k_proj.weight", kv, e));
    PELICAN_ASSIGN(w.wv, L.matrix(p + "v_proj.weight", kv, e));
    PELICAN_ASSIGN(w.wo, L.matrix(p + "o_proj.weight", e, q));
    PELICAN_ASSIGN(w.q_norm, L.vec(p + "q_norm.weight", hp.head_dim));
    PELICAN_ASSIGN(w.k_norm, L.vec(p + "k_norm.weight", hp.head_dim));
    return {};
}

Status load_deltanet(HfLoader& L, const std::string& p, const ModelHParams& hp, DeltaNetWeights& w) {
    const HybridHParams& h = *hp.hybrid;
    const int64_t e = hp.n_embd, nv = h.linear.n_v_heads, cd = h.linear.conv_dim(), vd = h.linear.value_dim();
    PELICAN_ASSIGN(w.in_qkv, L.matrix(p + "in_proj_qkv.weight", cd, e));
    PELICAN_ASSIGN(w.in_z, L.matrix(p + "in_proj_z.weight", vd, e));
    PELICAN_ASSIGN(w.in_b, L.matrix(p + "in_proj_b.weight", nv, e));
    PELICAN_ASSIGN(w.in_a, L.matrix(p + "in_proj_a.weight", nv, e));
    PELICAN_ASSIGN(w.conv, L.floats(p + "conv1d.weight", {cd, 1, h.conv_kernel}));
    PELICAN_ASSIGN(w.dt_bias, L.vec(p + "dt_bias", nv));
    PELICAN_ASSIGN(w.a_log, L.vec(p + "A_log", nv));
    PELICAN_ASSIGN(w.norm, L.vec(p + "norm.weight", h.linear.d_v));
    PELICAN_ASSIGN(w.out, L.matrix(p + "out_proj.weight", e, vd));
    return {};
}

// One decoder layer under prefix p ("model.layers.3."); `full` picks the mixer.
Status load_layer(HfLoader& L, const std::string& p, const ModelHParams& hp, bool full,
                  HybridLayerWeights& l) {
    l.full_attention = full;
    PELICAN_ASSIGN(l.attn_norm, L.vec(p + "input_layernorm.weight", hp.n_embd));
    PELICAN_ASSIGN(l.ffn_norm, L.vec(p + "post_attention_layernorm.weight", hp.n_embd));
    if (full)
        PELICAN_TRY(load_attention(L, p + "self_attn.", hp, l.attn));
    else
        PELICAN_TRY(load_deltanet(L, p + "linear_attn.", hp, l.linear));
    if (hp.hybrid->moe) return load_moe(L, p + "mlp.", hp, l.moe);
    return load_swiglu(L, p + "mlp.", hp.n_embd, hp.n_ff, l.mlp);
}

Status load_mtp(HfLoader& L, const ModelHParams& hp, MtpWeights& m) {
    PELICAN_ASSIGN(std::optional<Tensor> fc, L.get("mtp.fc.weight", {hp.n_embd, 2 * hp.n_embd}, false));
    if (!fc) return {};
    m.present = true;
    PELICAN_ASSIGN(m.fc, L.prepare(*fc));
    PELICAN_ASSIGN(m.norm_embd, L.vec("mtp.pre_fc_norm_embedding.weight", hp.n_embd));
    PELICAN_ASSIGN(m.norm_hidden, L.vec("mtp.pre_fc_norm_hidden.weight", hp.n_embd));
    PELICAN_ASSIGN(m.norm, L.vec("mtp.norm.weight", hp.n_embd));
    const int64_t n = std::max<int64_t>(hp.hybrid->n_mtp_layers, 1);
    m.layers.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        PELICAN_TRY(
            load_layer(L, fmt::format("mtp.layers.{}.", i), hp, true, m.layers[static_cast<size_t>(i)]));
    return {};
}

}  // namespace

Expected<HybridWeights> load_hybrid_weights(const WeightSource& src, ModelHParams& hp, ModelWeights& base,
                                            const WeightLoadOptions& opt) {
    if (src.is_gguf() || !hp.hybrid)
        return make_error("{}: the {} weights load from a Hugging Face folder only", src.path(),
                          hp.arch->name);
    HybridWeights hw;
    HfLoader L(src, hw, opt);
    PELICAN_ASSIGN(std::optional<Tensor> embd, src.find("model.language_model.embed_tokens.weight"));
    hw.prefix = "model.language_model.";
    if (!embd) {
        PELICAN_ASSIGN(embd, src.find("model.embed_tokens.weight"));
        hw.prefix = "model.";
    }
    if (!embd)
        return make_error(
            "{}: missing tensor model.language_model.embed_tokens.weight (or model.embed_tokens.weight)",
            src.path());
    const std::string embd_name = hw.prefix + "embed_tokens.weight";
    if (embd->n_dims != 2 || embd->ne[0] != hp.n_embd || (hp.n_vocab > 0 && embd->ne[1] != hp.n_vocab))
        return make_error("{}: tensor {} has shape [{}, {}], expected [{}, {}]", src.path(), embd_name,
                          embd->ne[1], embd->ne[0], hp.n_vocab, hp.n_embd);
    if (!dtype_info(embd->dtype).to_float)
        return make_error("{}: tensor {} has type {}, which cannot be read", src.path(), embd_name,
                          dtype_name(embd->dtype));
    hp.n_vocab = embd->ne[1];
    base.tok_embd = *embd;
    PELICAN_ASSIGN(base.output_norm, L.vec(hw.prefix + "norm.weight", hp.n_embd));
    PELICAN_ASSIGN(std::optional<Tensor> head, L.get("lm_head.weight", {hp.n_vocab, hp.n_embd}, false));
    base.tied_output = !head;
    PELICAN_ASSIGN(base.output, L.prepare(head ? *head : *embd));

    hw.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int64_t i = 0; i < hp.n_layer; ++i)
        PELICAN_TRY(load_layer(L, fmt::format("{}layers.{}.", hw.prefix, i), hp,
                               hp.hybrid->full_attention[static_cast<size_t>(i)] != 0,
                               hw.layers[static_cast<size_t>(i)]));
    PELICAN_TRY(load_mtp(L, hp, hw.mtp));
    return hw;
}

}  // namespace pelican
