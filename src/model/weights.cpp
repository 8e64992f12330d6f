// Declaration and loading of the shared block's tensors (see weights.h). The GGUF names and
// shapes below are the single declaration used for every Llama-family architecture; the arch
// spec only says which optional parts are present (biases, q/k norms).
#include "model/weights.h"

#include <array>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "core/dequantize.h"
#include "model/tensor_names.h"

namespace pelican {
namespace {

class Loader {
public:
    Loader(const WeightSource& src, ModelWeights& w, const WeightLoadOptions& opt)
        : src_(src), w_(w), opt_(opt) {}

    // A tensor of exactly shape ne (GGUF order); nullopt if absent and not required.
    Expected<std::optional<Tensor>> get(const std::string& name, std::initializer_list<int64_t> ne,
                                        Need need) {
        if (need == Need::No) return std::optional<Tensor>{};
        PELICAN_ASSIGN(std::optional<Tensor> t, src_.find(name));
        if (!t) {
            if (need == Need::Required)
                return make_error("{}: missing tensor {} (expected shape {})", src_.path(),
                                  src_.file_name_of(name), src_.format_shape(std::vector<int64_t>(ne)));
            return t;
        }
        const std::vector<int64_t> want(ne);
        std::vector<int64_t> have(t->ne.begin(), t->ne.begin() + t->n_dims);
        bool same = have.size() == want.size();
        for (size_t i = 0; same && i < want.size(); ++i) same = have[i] == want[i];
        if (!same)
            return make_error("{}: tensor {} has shape {}, expected {}", src_.path(), src_.file_name_of(name),
                              src_.format_shape(have), src_.format_shape(want));
        return t;
    }

    // A matmul weight ne = {n_in, n_out}.
    Expected<cpu::Weight> matrix(const std::string& name, int64_t n_in, int64_t n_out) {
        PELICAN_ASSIGN(std::optional<Tensor> t, get(name, {n_in, n_out}, Need::Required));
        return prepare(*t);
    }

    Expected<cpu::Weight> prepare(const Tensor& t) {
        if (!cpu::matmul_supported(t.dtype))
            return make_error("{}: tensor {} has type {}, which the CPU matmul does not support", src_.path(),
                              src_.file_name_of(t.name), dtype_name(t.dtype));
        auto w = cpu::Weight::prepare(t, opt_.allow_repack, /*own_copy=*/opt_.allow_repack);
        if (!w) return make_error("{}: {}", src_.path(), w.error().message);
        // A copy (repacked or not) replaces the mapped bytes: drop them now, tensor by tensor, so
        // the load never holds the whole model twice. A tied LM head's copy releases the token
        // embedding too: its lookups then read that copy (share_tied_embedding) or, when the head
        // is repacked, fault back only the rows they read.
        if (w->owns_data()) src_.release_pages(t);
        return std::move(w).value();
    }

    // A 1-D fp32 vector of n elements, always an owned copy (converted when stored narrower);
    // nullptr if absent. Not a view: on a file system that caches files in large folios (ext4 on
    // Linux 6.x) reading one 8 KiB norm through the mapping can map the whole 2 MiB around it,
    // pages of the matrices released next to it.
    Expected<const float*> vec(const std::string& name, int64_t n, Need need) {
        PELICAN_ASSIGN(std::optional<Tensor> t, get(name, {n}, need));
        if (!t) return static_cast<const float*>(nullptr);
        PELICAN_ASSIGN(Buffer b, Buffer::allocate(static_cast<size_t>(n) * sizeof(float)));
        auto* out = static_cast<float*>(b.data());
        PELICAN_TRY(dequantize_tensor(*t, out));
        w_.owned.push_back(std::move(b));
        src_.release_pages(*t);
        return static_cast<const float*>(out);
    }

private:
    const WeightSource& src_;
    ModelWeights& w_;
    const WeightLoadOptions& opt_;
};

std::string lt(int layer, std::string_view base, std::string_view suffix = "weight") {
    return gguf_layer_tensor(layer, base, suffix);
}

Status load_layer(Loader& L, const ModelHParams& hp, const ArchSpec& a, int i, LayerWeights& l) {
    const int64_t e = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim(), ff = hp.n_ff, hd = hp.head_dim;
    AttentionWeights& at = l.attn;
    SwigluWeights& ml = l.mlp;
    PELICAN_ASSIGN(l.attn_norm, L.vec(lt(i, "attn_norm"), e, Need::Required));
    PELICAN_ASSIGN(at.wq, L.matrix(lt(i, "attn_q"), e, q));
    PELICAN_ASSIGN(at.wk, L.matrix(lt(i, "attn_k"), e, kv));
    PELICAN_ASSIGN(at.wv, L.matrix(lt(i, "attn_v"), e, kv));
    PELICAN_ASSIGN(at.wo, L.matrix(lt(i, "attn_output"), q, e));
    PELICAN_ASSIGN(at.bq, L.vec(lt(i, "attn_q", "bias"), q, a.qkv_bias));
    PELICAN_ASSIGN(at.bk, L.vec(lt(i, "attn_k", "bias"), kv, a.qkv_bias));
    PELICAN_ASSIGN(at.bv, L.vec(lt(i, "attn_v", "bias"), kv, a.qkv_bias));
    PELICAN_ASSIGN(at.bo, L.vec(lt(i, "attn_output", "bias"), e, a.out_bias));
    PELICAN_ASSIGN(at.q_norm, L.vec(lt(i, "attn_q_norm"), hd, a.qk_norm));
    PELICAN_ASSIGN(at.k_norm, L.vec(lt(i, "attn_k_norm"), hd, a.qk_norm));
    if ((at.q_norm == nullptr) != (at.k_norm == nullptr))
        return make_error("layer {}: attn_q_norm and attn_k_norm must both be present or both absent", i);
    PELICAN_ASSIGN(l.ffn_norm, L.vec(lt(i, "ffn_norm"), e, Need::Required));
    PELICAN_ASSIGN(ml.gate, L.matrix(lt(i, "ffn_gate"), e, ff));
    PELICAN_ASSIGN(ml.up, L.matrix(lt(i, "ffn_up"), e, ff));
    PELICAN_ASSIGN(ml.down, L.matrix(lt(i, "ffn_down"), ff, e));
    PELICAN_ASSIGN(ml.b_gate, L.vec(lt(i, "ffn_gate", "bias"), ff, a.mlp_bias));
    PELICAN_ASSIGN(ml.b_up, L.vec(lt(i, "ffn_up", "bias"), ff, a.mlp_bias));
    PELICAN_ASSIGN(ml.b_down, L.vec(lt(i, "ffn_down", "bias"), e, a.mlp_bias));
    return {};
}

}  // namespace

void share_tied_embedding(ModelWeights& w) {
    const Tensor& e = w.tok_embd;
    const cpu::Weight& o = w.output;
    if (!w.tied_output || !o.owns_data() || o.layout() != cpu::Weight::Layout::kRows || o.type() != e.dtype ||
        o.n_in() != e.ne[0] || o.n_out() != e.ne[1] || o.row_stride() != e.nb[1])
        return;
    w.tok_embd.data = const_cast<void*>(o.data());  // read only, as the mapped view was
}

Expected<ModelWeights> load_weights(const WeightSource& src, ModelHParams& hp, const WeightLoadOptions& opt) {
    if (hp.arch->layer_plan == LayerPlan::kLayerTypes) return load_qwen35_weights(src, hp, opt);
    if (!hp.uniform_attention())
        return make_error("{}: {} layers are not all attention + SwiGLU", src.path(), hp.arch->name);
    ModelWeights w;
    Loader L(src, w, opt);
    const ArchSpec& a = *hp.arch;

    // token_embd fixes the vocabulary size.
    PELICAN_ASSIGN(std::optional<Tensor> embd, src.find("token_embd.weight"));
    if (!embd)
        return make_error("{}: missing tensor {} (the token embeddings)", src.path(),
                          src.file_name_of("token_embd.weight"));
    if (embd->n_dims != 2 || embd->ne[0] != hp.n_embd)
        return make_error(
            "{}: tensor {} has shape {}, expected {}", src.path(), src.file_name_of("token_embd.weight"),
            src.format_shape(std::vector<int64_t>(embd->ne.begin(), embd->ne.begin() + embd->n_dims)),
            src.format_shape(std::vector<int64_t>{hp.n_embd, hp.n_vocab > 0 ? hp.n_vocab : embd->ne[1]}));
    if (hp.n_vocab > 0 && hp.n_vocab != embd->ne[1])
        return make_error("{}: tensor {} has {} rows but the vocabulary size is {}", src.path(),
                          src.file_name_of("token_embd.weight"), embd->ne[1], hp.n_vocab);
    hp.n_vocab = embd->ne[1];
    if (!dtype_info(embd->dtype).to_float)
        return make_error("{}: tensor {} has type {}, which cannot be read", src.path(),
                          src.file_name_of("token_embd.weight"), dtype_name(embd->dtype));
    w.tok_embd = *embd;

    PELICAN_ASSIGN(w.output_norm, L.vec("output_norm.weight", hp.n_embd, Need::Required));
    PELICAN_ASSIGN(std::optional<Tensor> out,
                   L.get("output.weight", {hp.n_embd, hp.n_vocab}, Need::Optional));
    w.tied_output = !out;
    PELICAN_ASSIGN(w.output, L.prepare(out ? *out : *embd));
    share_tied_embedding(w);

    // GGUF llama3 rope scaling: per-pair frequency divisors.
    PELICAN_ASSIGN(std::optional<Tensor> rf, L.get("rope_freqs.weight", {hp.rope_dim / 2}, Need::Optional));
    if (rf) {
        w.rope_freq_factors.resize(static_cast<size_t>(hp.rope_dim / 2));
        PELICAN_TRY(dequantize_tensor(*rf, w.rope_freq_factors.data()));
        for (size_t i = 0; i < hp.inv_freq.size(); ++i) {
            const float f = w.rope_freq_factors[i];
            if (!(f > 0))
                return make_error("{}: rope_freqs.weight[{}] = {} is not positive", src.path(), i, f);
            hp.inv_freq[i] /= f;
        }
        if (hp.rope_scaling.empty()) hp.rope_scaling = "rope_freqs";
    }

    w.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int i = 0; i < hp.n_layer; ++i) {
        Status s = load_layer(L, hp, a, i, w.layers[static_cast<size_t>(i)]);
        if (!s.ok()) {
            if (s.error().message.starts_with("layer "))
                return make_error("{}: {}", src.path(), s.error().message);
            return s.take_error();
        }
    }
    src.release_pages_again();
    return w;
}

}  // namespace pelican
