// Loading of the Qwen3.5 stack's weights (LayerPlan::kLayerTypes) from a Hugging Face folder or a
// llama.cpp GGUF (model/weights.h load_qwen35_weights).
#include "model/weights.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/dequantize.h"

namespace pelican {
namespace {

// Lookups by HF name with shapes in torch order (slowest first).
class HfLoader {
public:
    HfLoader(const WeightSource& src, ModelWeights& hw, const WeightLoadOptions& opt)
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
        // The copy replaces the mapped bytes (as in weights.cpp): released tensor by tensor.
        if (w->owns_data()) src_.release_pages(t);
        return std::move(w).value();
    }

    // t (a mapped tensor) is read no more: every part of it was copied (sliced experts prepared
    // as copies, gathered rows). Drops its pages, including those a part's own release kept
    // because they straddle two parts.
    void release(const Tensor& t) { src_.release_pages(t); }

    // torch [n_out, n_in]
    Expected<cpu::Weight> matrix(const std::string& name, int64_t n_out, int64_t n_in) {
        PELICAN_ASSIGN(std::optional<Tensor> t, get(name, {n_out, n_in}, true));
        return prepare(*t);
    }

    // Any shape, as n fp32 values: an owned copy (converted when stored narrower), never a view
    // of the mapping (see weights.cpp's Loader::vec).
    Expected<float*> owned_floats(const std::string& name, std::vector<int64_t> shape) {
        PELICAN_ASSIGN(std::optional<Tensor> t, get(name, shape, true));
        PELICAN_ASSIGN(Buffer b, Buffer::allocate(static_cast<size_t>(t->n_elements()) * sizeof(float)));
        auto* out = static_cast<float*>(b.data());
        PELICAN_TRY(dequantize_tensor(*t, out));
        hw_.owned.push_back(std::move(b));
        src_.release_pages(*t);
        return out;
    }
    Expected<const float*> floats(const std::string& name, std::vector<int64_t> shape) {
        PELICAN_ASSIGN(float* v, owned_floats(name, std::move(shape)));
        return static_cast<const float*>(v);
    }
    Expected<const float*> vec(const std::string& name, int64_t n) { return floats(name, {n}); }
    // A vector stored transformed (GGUF): the owned fp32 copy with fn applied to every value.
    Expected<const float*> vec_mapped(const std::string& name, int64_t n, float (*fn)(float)) {
        PELICAN_ASSIGN(float* v, owned_floats(name, {n}));
        for (int64_t i = 0; i < n; ++i) v[i] = fn(v[i]);
        return static_cast<const float*>(v);
    }

    // Rows [row0, row0 + n_rows) of matrix `m` of a 3-D tensor t (torch [n_mat, rows, n_in]) as a 2-D view.
    Expected<cpu::Weight> slice(const Tensor& t, int64_t m, int64_t row0, int64_t n_rows, std::string label) {
        const int64_t n_in = t.ne[0];
        auto* base = static_cast<uint8_t*>(t.data) + m * t.nb[2] + row0 * t.nb[1];
        hw_.names.push_back(std::move(label));
        PELICAN_ASSIGN(Tensor v, Tensor::contiguous_view(t.dtype, {n_in, n_rows}, base, hw_.names.back()));
        return prepare(v);
    }

    // The rows `rows` of the 2-D tensor t (in that order) as an owned, contiguous matrix (for weights
    // stored interleaved, e.g. Qwen3-Next's fused projections).
    Expected<cpu::Weight> gather_rows(const Tensor& t, const std::vector<int64_t>& rows, std::string label) {
        const size_t rb = static_cast<size_t>(t.row_bytes());
        PELICAN_ASSIGN(Buffer b, Buffer::allocate(rb * rows.size()));
        auto* dst = static_cast<uint8_t*>(b.data());
        for (size_t i = 0; i < rows.size(); ++i)
            std::memcpy(dst + i * rb, static_cast<const uint8_t*>(t.data) + rows[i] * t.nb[1], rb);
        hw_.names.push_back(std::move(label));
        PELICAN_ASSIGN(Tensor v,
                       Tensor::contiguous_view(t.dtype, {t.ne[0], static_cast<int64_t>(rows.size())}, dst,
                                               hw_.names.back()));
        PELICAN_ASSIGN(cpu::Weight w, prepare(v));
        if (!w.owns_data()) hw_.owned.push_back(std::move(b));  // w views the gathered rows
        return w;
    }

    const WeightSource& src() const { return src_; }
    // A name that lives as long as the weights (Tensor::name is a view).
    const std::string& keep_name(std::string n) {
        hw_.names.push_back(std::move(n));
        return hw_.names.back();
    }

private:
    const WeightSource& src_;
    ModelWeights& hw_;
    const WeightLoadOptions& opt_;
};

// True when every expert matrix is the Weight's own copy (none views the mapped experts tensor).
// The MTP block's decoder layers: gated attention with the stack's FFN.
LayerKind mtp_kind(const ModelHParams& hp) { return LayerKind{Mixer::kGatedAttention, hp.arch->ffn}; }

bool all_copied(const std::vector<SwigluWeights>& experts) {
    for (const SwigluWeights& s : experts)
        if (!s.gate.owns_data() || !s.up.owns_data() || !s.down.owns_data()) return false;
    return true;
}

Status load_swiglu(HfLoader& L, const std::string& p, int64_t e, int64_t ff, SwigluWeights& w) {
    PELICAN_ASSIGN(w.gate, L.matrix(p + "gate_proj.weight", ff, e));
    PELICAN_ASSIGN(w.up, L.matrix(p + "up_proj.weight", ff, e));
    PELICAN_ASSIGN(w.down, L.matrix(p + "down_proj.weight", e, ff));
    return {};
}

Status load_moe(HfLoader& L, const std::string& p, const ModelHParams& hp, MoeWeights& w) {
    const MoeHParams& h = hp.moe;
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
        if (all_copied(w.experts)) {
            L.release(*gate_up);
            L.release(*down);
        }
        return {};
    }
    for (int64_t x = 0; x < E; ++x)
        PELICAN_TRY(
            load_swiglu(L, fmt::format("{}experts.{}.", p, x), e, ff, w.experts[static_cast<size_t>(x)]));
    return {};
}

Status load_attention(HfLoader& L, const std::string& p, const ModelHParams& hp, AttentionWeights& w) {
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
    const DeltaNetHParams& h = hp.deltanet;
    const int64_t e = hp.n_embd, nv = h.linear.n_v_heads, cd = h.linear.conv_dim(), vd = h.linear.value_dim();
    const int64_t kd = h.linear.key_dim();
    PELICAN_ASSIGN(std::optional<Tensor> qkvz, L.get(p + "in_proj_qkvz.weight", {2 * kd + 2 * vd, e}, false));
    if (qkvz) {
        // Qwen3-Next: per key head g, rows [q_g (d_k) | k_g (d_k) | v_g (r d_v) | z_g (r d_v)] with r value
        // heads per key head (value head g r + j), and in_proj_ba per g: [b_g (r) | a_g (r)]. Split into
        // [Q | K | V], z, b, a in head order (transformers' fix_query_key_value_ordering).
        PELICAN_ASSIGN(std::optional<Tensor> ba, L.get(p + "in_proj_ba.weight", {2 * nv, e}, true));
        const int64_t nk = h.linear.n_k_heads, dk = h.linear.d_k, r = nv / nk, rv = r * h.linear.d_v;
        const int64_t group = 2 * dk + 2 * rv;
        std::vector<int64_t> qkv, z, b, a;
        auto span = [](std::vector<int64_t>& out, int64_t first, int64_t n) {
            for (int64_t i = 0; i < n; ++i) out.push_back(first + i);
        };
        for (int64_t g = 0; g < nk; ++g) span(qkv, g * group, dk);           // Q
        for (int64_t g = 0; g < nk; ++g) span(qkv, g * group + dk, dk);      // K
        for (int64_t g = 0; g < nk; ++g) span(qkv, g * group + 2 * dk, rv);  // V
        for (int64_t g = 0; g < nk; ++g) span(z, g * group + 2 * dk + rv, rv);
        for (int64_t g = 0; g < nk; ++g) span(b, g * 2 * r, r);
        for (int64_t g = 0; g < nk; ++g) span(a, g * 2 * r + r, r);
        PELICAN_ASSIGN(w.in_qkv, L.gather_rows(*qkvz, qkv, p + "in_proj_qkvz.weight[qkv]"));
        PELICAN_ASSIGN(w.in_z, L.gather_rows(*qkvz, z, p + "in_proj_qkvz.weight[z]"));
        PELICAN_ASSIGN(w.in_b, L.gather_rows(*ba, b, p + "in_proj_ba.weight[b]"));
        PELICAN_ASSIGN(w.in_a, L.gather_rows(*ba, a, p + "in_proj_ba.weight[a]"));
        L.release(*qkvz);  // every row of both is in the gathered copies
        L.release(*ba);
    } else {
        PELICAN_ASSIGN(w.in_qkv, L.matrix(p + "in_proj_qkv.weight", cd, e));
        PELICAN_ASSIGN(w.in_z, L.matrix(p + "in_proj_z.weight", vd, e));
        PELICAN_ASSIGN(w.in_b, L.matrix(p + "in_proj_b.weight", nv, e));
        PELICAN_ASSIGN(w.in_a, L.matrix(p + "in_proj_a.weight", nv, e));
    }
    PELICAN_ASSIGN(w.conv, L.floats(p + "conv1d.weight", {cd, 1, h.conv_kernel}));
    PELICAN_ASSIGN(w.dt_bias, L.vec(p + "dt_bias", nv));
    PELICAN_ASSIGN(w.a_log, L.vec(p + "A_log", nv));
    PELICAN_ASSIGN(w.norm, L.vec(p + "norm.weight", h.linear.d_v));
    PELICAN_ASSIGN(w.out, L.matrix(p + "out_proj.weight", e, vd));
    return {};
}

// One decoder layer of kind k under prefix p ("model.layers.3.").
Status load_layer(HfLoader& L, const std::string& p, const ModelHParams& hp, LayerKind k, LayerWeights& l) {
    l.kind = k;
    const bool full = k.mixer == Mixer::kGatedAttention;
    PELICAN_ASSIGN(l.attn_norm, L.vec(p + "input_layernorm.weight", hp.n_embd));
    PELICAN_ASSIGN(l.ffn_norm, L.vec(p + "post_attention_layernorm.weight", hp.n_embd));
    if (full)
        PELICAN_TRY(load_attention(L, p + "self_attn.", hp, l.attn));
    else
        PELICAN_TRY(load_deltanet(L, p + "linear_attn.", hp, l.linear));
    if (k.ffn == Ffn::kMoe) return load_moe(L, p + "mlp.", hp, l.moe);
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
    const int64_t n = std::max<int64_t>(hp.n_mtp_layers, 1);
    m.layers.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        PELICAN_TRY(load_layer(L, fmt::format("mtp.layers.{}.", i), hp, mtp_kind(hp),
                               m.layers[static_cast<size_t>(i)]));
    return {};
}

// ---- GGUF (llama.cpp's names for qwen35moe / qwen35) ---------------------------------------------
// llama.cpp's converter stores the zero-centred norms as 1 + w (exact to recover: w = stored - 1 is
// exact in fp32 for stored in [0.5, 2], and pelican computes 1 + w again), A_log as A = -exp(A_log)
// (recovered as log(-A)), conv1d as [C, K], dt_bias as ssm_dt.bias, splits the fused experts into
// ffn_{gate,up,down}_exps [E, ...] (or keeps ffn_gate_up_exps), and reorders the DeltaNet value
// heads to tiled order (handled by DeltaNetShape::v_tiled, no weight change needed here).
float zc_from_gguf(float w) { return w - 1.0f; }
float a_log_from_gguf(float a) { return std::log(-a); }

Status gguf_swiglu(HfLoader& L, const std::string& p, const std::string& sfx, int64_t e, int64_t ff,
                   SwigluWeights& w) {
    PELICAN_ASSIGN(w.gate, L.matrix(p + "ffn_gate" + sfx + ".weight", ff, e));
    PELICAN_ASSIGN(w.up, L.matrix(p + "ffn_up" + sfx + ".weight", ff, e));
    PELICAN_ASSIGN(w.down, L.matrix(p + "ffn_down" + sfx + ".weight", e, ff));
    return {};
}

Status gguf_moe(HfLoader& L, const std::string& p, const ModelHParams& hp, MoeWeights& w) {
    const MoeHParams& h = hp.moe;
    const int64_t e = hp.n_embd, ff = h.n_ff_expert, E = h.n_expert;
    PELICAN_ASSIGN(w.router, L.matrix(p + "ffn_gate_inp.weight", E, e));
    PELICAN_TRY(gguf_swiglu(L, p, "_shexp", e, h.n_ff_shared, w.shared));
    {  // llama.cpp declares it [n_embd]; its converter writes HF's [1, n_embd]
        const std::string name = p + "ffn_gate_inp_shexp.weight";
        PELICAN_ASSIGN(std::optional<Tensor> g, L.src().find(name));
        if (!g) return make_error("{}: missing tensor {} (expected shape [{}])", L.src().path(), name, e);
        if (g->n_elements() != e || g->ne[0] != e)
            return make_error("{}: tensor {} has {} elements, expected [{}] or [1, {}]", L.src().path(), name,
                              g->n_elements(), e, e);
        PELICAN_ASSIGN(Tensor v, Tensor::contiguous_view(g->dtype, {e, 1}, g->data, L.keep_name(name)));
        PELICAN_ASSIGN(w.shared_gate, L.prepare(v));
    }
    w.experts.resize(static_cast<size_t>(E));
    PELICAN_ASSIGN(std::optional<Tensor> down, L.get(p + "ffn_down_exps.weight", {E, e, ff}, true));
    PELICAN_ASSIGN(std::optional<Tensor> gate_up,
                   L.get(p + "ffn_gate_up_exps.weight", {E, 2 * ff, e}, false));
    std::optional<Tensor> gate, up;
    if (!gate_up) {
        PELICAN_ASSIGN(gate, L.get(p + "ffn_gate_exps.weight", {E, ff, e}, true));
        PELICAN_ASSIGN(up, L.get(p + "ffn_up_exps.weight", {E, ff, e}, true));
    }
    for (int64_t x = 0; x < E; ++x) {
        SwigluWeights& s = w.experts[static_cast<size_t>(x)];
        if (gate_up) {
            PELICAN_ASSIGN(s.gate,
                           L.slice(*gate_up, x, 0, ff, fmt::format("{}ffn_gate_up_exps[{}].gate", p, x)));
            PELICAN_ASSIGN(s.up,
                           L.slice(*gate_up, x, ff, ff, fmt::format("{}ffn_gate_up_exps[{}].up", p, x)));
        } else {
            PELICAN_ASSIGN(s.gate, L.slice(*gate, x, 0, ff, fmt::format("{}ffn_gate_exps[{}]", p, x)));
            PELICAN_ASSIGN(s.up, L.slice(*up, x, 0, ff, fmt::format("{}ffn_up_exps[{}]", p, x)));
        }
        PELICAN_ASSIGN(s.down, L.slice(*down, x, 0, e, fmt::format("{}ffn_down_exps[{}]", p, x)));
    }
    if (all_copied(w.experts))
        for (const std::optional<Tensor>* t : {&down, &gate_up, &gate, &up})
            if (t->has_value()) L.release(**t);
    return {};
}

Status gguf_layer(HfLoader& L, const std::string& p, const ModelHParams& hp, LayerKind k, LayerWeights& l) {
    const DeltaNetHParams& h = hp.deltanet;
    const int64_t e = hp.n_embd;
    l.kind = k;
    const bool full = k.mixer == Mixer::kGatedAttention;
    PELICAN_ASSIGN(l.attn_norm, L.vec_mapped(p + "attn_norm.weight", e, zc_from_gguf));
    PELICAN_ASSIGN(l.ffn_norm, L.vec_mapped(p + "post_attention_norm.weight", e, zc_from_gguf));
    if (full) {
        AttentionWeights& a = l.attn;
        const int64_t q = hp.q_dim(), kv = hp.kv_dim();
        PELICAN_ASSIGN(a.wq, L.matrix(p + "attn_q.weight", 2 * q, e));
        PELICAN_ASSIGN(a.wk, L.matrix(p + "attn_k.weight", kv, e));
        PELICAN_ASSIGN(a.wv, L.matrix(p + "attn_v.weight", kv, e));
        PELICAN_ASSIGN(a.wo, L.matrix(p + "attn_output.weight", e, q));
        PELICAN_ASSIGN(a.q_norm, L.vec_mapped(p + "attn_q_norm.weight", hp.head_dim, zc_from_gguf));
        PELICAN_ASSIGN(a.k_norm, L.vec_mapped(p + "attn_k_norm.weight", hp.head_dim, zc_from_gguf));
    } else {
        DeltaNetWeights& d = l.linear;
        const int64_t nv = h.linear.n_v_heads, cd = h.linear.conv_dim(), vd = h.linear.value_dim();
        PELICAN_ASSIGN(d.in_qkv, L.matrix(p + "attn_qkv.weight", cd, e));
        PELICAN_ASSIGN(d.in_z, L.matrix(p + "attn_gate.weight", vd, e));
        PELICAN_ASSIGN(d.in_b, L.matrix(p + "ssm_beta.weight", nv, e));
        PELICAN_ASSIGN(d.in_a, L.matrix(p + "ssm_alpha.weight", nv, e));
        PELICAN_ASSIGN(d.conv, L.floats(p + "ssm_conv1d.weight", {cd, h.conv_kernel}));
        PELICAN_ASSIGN(d.dt_bias, L.vec(p + "ssm_dt.bias", nv));
        PELICAN_ASSIGN(d.a_log, L.vec_mapped(p + "ssm_a", nv, a_log_from_gguf));
        PELICAN_ASSIGN(d.norm, L.vec(p + "ssm_norm.weight", h.linear.d_v));
        PELICAN_ASSIGN(d.out, L.matrix(p + "ssm_out.weight", e, vd));
    }
    if (k.ffn == Ffn::kMoe) return gguf_moe(L, p, hp, l.moe);
    return gguf_swiglu(L, p, "", e, hp.n_ff, l.mlp);
}

Status gguf_mtp(HfLoader& L, const ModelHParams& hp, MtpWeights& m, const float* output_norm) {
    if (hp.n_mtp_layers <= 0) return {};
    const int64_t e = hp.n_embd;
    const std::string p = fmt::format("blk.{}.", hp.n_layer);
    m.present = true;
    PELICAN_ASSIGN(m.fc, L.matrix(p + "nextn.eh_proj.weight", e, 2 * e));
    PELICAN_ASSIGN(m.norm_embd, L.vec_mapped(p + "nextn.enorm.weight", e, zc_from_gguf));
    PELICAN_ASSIGN(m.norm_hidden, L.vec_mapped(p + "nextn.hnorm.weight", e, zc_from_gguf));
    PELICAN_ASSIGN(std::optional<Tensor> hn, L.get(p + "nextn.shared_head_norm.weight", {e}, false));
    if (hn) {
        PELICAN_ASSIGN(m.norm, L.vec_mapped(p + "nextn.shared_head_norm.weight", e, zc_from_gguf));
    } else {
        m.norm = output_norm;  // llama.cpp falls back to the final norm
    }
    for (const char* own : {"nextn.embed_tokens.weight", "nextn.shared_head_head.weight"}) {
        PELICAN_ASSIGN(std::optional<Tensor> t, L.src().find(p + own));
        if (t)
            return make_error("{}: tensor {}{} (a dedicated MTP embedding / head) is not supported",
                              L.src().path(), p, own);
    }
    m.layers.resize(1);
    return gguf_layer(L, p, hp, mtp_kind(hp), m.layers[0]);
}

Expected<ModelWeights> load_qwen35_gguf(const WeightSource& src, ModelHParams& hp,
                                        const WeightLoadOptions& opt) {
    ModelWeights hw;
    ModelWeights& base = hw;
    HfLoader L(src, hw, opt);
    PELICAN_ASSIGN(std::optional<Tensor> embd, src.find("token_embd.weight"));
    if (!embd) return make_error("{}: missing tensor token_embd.weight", src.path());
    if (embd->n_dims != 2 || embd->ne[0] != hp.n_embd || (hp.n_vocab > 0 && embd->ne[1] != hp.n_vocab))
        return make_error("{}: tensor token_embd.weight has shape [{}, {}], expected [{}, {}]", src.path(),
                          embd->ne[1], embd->ne[0], hp.n_vocab, hp.n_embd);
    if (!dtype_info(embd->dtype).to_float)
        return make_error("{}: tensor token_embd.weight has type {}, which cannot be read", src.path(),
                          dtype_name(embd->dtype));
    hp.n_vocab = embd->ne[1];
    base.tok_embd = *embd;
    PELICAN_ASSIGN(base.output_norm, L.vec_mapped("output_norm.weight", hp.n_embd, zc_from_gguf));
    PELICAN_ASSIGN(std::optional<Tensor> head, L.get("output.weight", {hp.n_vocab, hp.n_embd}, false));
    base.tied_output = !head;
    PELICAN_ASSIGN(base.output, L.prepare(head ? *head : *embd));
    share_tied_embedding(base);
    hw.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int64_t i = 0; i < hp.n_layer; ++i)
        PELICAN_TRY(gguf_layer(L, fmt::format("blk.{}.", i), hp, hp.layer[static_cast<size_t>(i)],
                               hw.layers[static_cast<size_t>(i)]));
    PELICAN_TRY(gguf_mtp(L, hp, hw.mtp, base.output_norm));
    src.release_pages_again();
    return hw;
}

}  // namespace

Expected<ModelWeights> load_qwen35_weights(const WeightSource& src, ModelHParams& hp,
                                           const WeightLoadOptions& opt) {
    if (hp.arch->layer_plan != LayerPlan::kLayerTypes)
        return make_error("{}: {} does not use the Qwen3.5 tensor names", src.path(), hp.arch->name);
    if (src.is_gguf()) return load_qwen35_gguf(src, hp, opt);
    ModelWeights hw;
    ModelWeights& base = hw;
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
    share_tied_embedding(base);

    hw.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int64_t i = 0; i < hp.n_layer; ++i)
        PELICAN_TRY(load_layer(L, fmt::format("{}layers.{}.", hw.prefix, i), hp,
                               hp.layer[static_cast<size_t>(i)], hw.layers[static_cast<size_t>(i)]));
    PELICAN_TRY(load_mtp(L, hp, hw.mtp));
    src.release_pages_again();
    return hw;
}

}  // namespace pelican
