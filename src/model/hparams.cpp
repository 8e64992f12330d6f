// Hyper-parameters from GGUF keys or config.json (see hparams.h).
#include "model/hparams.h"

#include <cmath>

#include <fmt/format.h>

#include "model/rope_freq.h"

namespace pelican {
namespace {

constexpr int64_t kMaxLayers = 4096;  // far above any released model; bounds what a file can make us allocate

// Reads "<arch>.<key>" as an integer; required keys fail with the file and key named.
struct GgufKeys {
    const GgufFile& f;
    std::string prefix;  // "llama."

    std::string key(std::string_view k) const { return prefix + std::string(k); }

    Expected<int64_t> int_required(std::string_view k) const {
        const std::string name = key(k);
        const GgufValue* v = f.find(name);
        if (!v) return make_error("{}: missing metadata key {}", f.name(), name);
        const auto i = v->as_int();
        if (!i || v->type == GgufType::BOOL)
            return make_error("{}: metadata key {} must be an integer, found {}", f.name(), name,
                              gguf_type_name(v->type));
        return *i;
    }
    Expected<int64_t> int_or(std::string_view k, int64_t def) const {
        if (!f.find(key(k))) return def;
        return int_required(k);
    }
    Expected<double> float_or(std::string_view k, double def) const {
        const std::string name = key(k);
        const GgufValue* v = f.find(name);
        if (!v) return def;
        const auto d = v->as_float();
        if (!d || v->type == GgufType::BOOL)
            return make_error("{}: metadata key {} must be a number, found {}", f.name(), name,
                              gguf_type_name(v->type));
        return *d;
    }
};

Status finish_rope(ModelHParams& hp, const RopeScaling* scaling, std::string_view source) {
    PELICAN_ASSIGN(RopeFreqs freqs,
                   compute_rope_freqs(hp.rope_dim, hp.rope_theta, scaling, hp.n_ctx_train, source));
    hp.inv_freq = std::move(freqs.inv_freq);
    hp.rope_attn_factor = freqs.attn_factor;
    if (scaling) hp.rope_scaling = scaling->type;
    return {};
}

// The Qwen3.5 layer plan (qwen35moe, qwen35) with llama.cpp's keys: block_count counts the MTP
// layers appended after the main stack (nextn_predict_layers); the DeltaNet heads come as
// ssm.{group_count = n_k_heads, time_step_rank = n_v_heads, state_size = d_k, inner_size = n_v * d_v,
// conv_kernel}; full-attention layers from attention.recurrent_layers (bool per layer) when present,
// else every full_attention_interval-th layer. The DeltaNet value heads are in llama.cpp's tiled order.
Expected<ModelHParams> qwen35_hparams_from_gguf(const GgufFile& f, const ArchSpec& arch, const GgufKeys& k) {
    ModelHParams hp;
    hp.arch = &arch;
    hp.rope_layout = RopeLayout::kNeox;
    hp.norm_weight = NormWeight::kOnePlus;
    const bool moe = arch.ffn == Ffn::kMoe;
    PELICAN_ASSIGN(hp.n_embd, k.int_required("embedding_length"));
    PELICAN_ASSIGN(const int64_t n_block, k.int_required("block_count"));
    PELICAN_ASSIGN(hp.n_mtp_layers, k.int_or("nextn_predict_layers", 0));
    hp.n_layer = n_block - hp.n_mtp_layers;
    if (hp.n_mtp_layers < 0 || hp.n_layer <= 0)
        return make_error("{}: {}block_count {} with nextn_predict_layers {} leaves no main layers", f.name(),
                          k.prefix, n_block, hp.n_mtp_layers);
    if (hp.n_layer > kMaxLayers)
        return make_error("{}: {}block_count {} is above the supported {}", f.name(), k.prefix, n_block,
                          kMaxLayers);
    PELICAN_ASSIGN(hp.n_head, k.int_required("attention.head_count"));
    PELICAN_ASSIGN(hp.n_head_kv, k.int_or("attention.head_count_kv", hp.n_head));
    PELICAN_ASSIGN(hp.n_ctx_train, k.int_or("context_length", 0));
    PELICAN_ASSIGN(hp.n_vocab, k.int_or("vocab_size", 0));
    PELICAN_ASSIGN(hp.head_dim, k.int_required("attention.key_length"));
    PELICAN_ASSIGN(hp.rope_dim, k.int_or("rope.dimension_count", hp.head_dim));
    PELICAN_ASSIGN(hp.rope_theta, k.float_or("rope.freq_base", 10000.0));
    PELICAN_ASSIGN(const double eps, k.float_or("attention.layer_norm_rms_epsilon", 1e-6));
    hp.rms_eps = static_cast<float>(eps);
    hp.attn_scale = hp.head_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(hp.head_dim)) : 0.0f;

    if (const auto rec = f.get_i32_array(k.key("attention.recurrent_layers"))) {
        if (static_cast<int64_t>(rec->size()) < hp.n_layer)
            return make_error("{}: {}attention.recurrent_layers has {} entries for {} layers", f.name(),
                              k.prefix, rec->size(), hp.n_layer);
        for (int64_t i = 0; i < hp.n_layer; ++i)
            hp.layer.push_back(LayerKind{
                (*rec)[static_cast<size_t>(i)] ? Mixer::kDeltaNet : Mixer::kGatedAttention, arch.ffn});
    } else {
        PELICAN_ASSIGN(const int64_t every, k.int_or("full_attention_interval", 4));
        if (every <= 0)
            return make_error("{}: {}full_attention_interval must be positive, found {}", f.name(), k.prefix,
                              every);
        for (int64_t i = 0; i < hp.n_layer; ++i)
            hp.layer.push_back(
                LayerKind{(i + 1) % every == 0 ? Mixer::kGatedAttention : Mixer::kDeltaNet, arch.ffn});
    }
    PELICAN_ASSIGN(const int64_t nk, k.int_or("ssm.group_count", 0));
    PELICAN_ASSIGN(const int64_t nv, k.int_or("ssm.time_step_rank", 0));
    PELICAN_ASSIGN(const int64_t dk, k.int_or("ssm.state_size", 0));
    PELICAN_ASSIGN(const int64_t inner, k.int_or("ssm.inner_size", 0));
    PELICAN_ASSIGN(const int64_t conv, k.int_or("ssm.conv_kernel", 4));
    DeltaNetHParams& h = hp.deltanet;
    h.linear = DeltaNetShape{.n_k_heads = static_cast<int>(nk),
                             .n_v_heads = static_cast<int>(nv),
                             .d_k = static_cast<int>(dk),
                             .d_v = nv > 0 ? static_cast<int>(inner / nv) : 0,
                             .v_tiled = true};
    h.conv_kernel = static_cast<int>(conv);
    if (hp.has(Mixer::kDeltaNet) && (nk <= 0 || nv <= 0 || dk <= 0 || inner <= 0 || inner % nv != 0 ||
                                     nv % nk != 0 || conv <= 0 || conv > 16))
        return make_error(
            "{}: bad DeltaNet keys {}ssm.* (group_count {}, time_step_rank {}, state_size {}, inner_size {}, "
            "conv_kernel {})",
            f.name(), k.prefix, nk, nv, dk, inner, conv);
    if (moe) {
        MoeHParams& m = hp.moe;
        PELICAN_ASSIGN(const int64_t ne, k.int_required("expert_count"));
        PELICAN_ASSIGN(const int64_t nu, k.int_required("expert_used_count"));
        PELICAN_ASSIGN(m.n_ff_expert, k.int_required("expert_feed_forward_length"));
        PELICAN_ASSIGN(m.n_ff_shared, k.int_required("expert_shared_feed_forward_length"));
        m.n_expert = static_cast<int>(ne);
        m.n_expert_used = static_cast<int>(nu);
        if (ne <= 0 || nu <= 0 || nu > ne || m.n_ff_expert <= 0 || m.n_ff_shared <= 0)
            return make_error("{}: bad expert keys (count {}, used {}, ff {}, shared ff {})", f.name(), ne,
                              nu, m.n_ff_expert, m.n_ff_shared);
        hp.n_ff = m.n_ff_expert;
    } else {
        PELICAN_ASSIGN(hp.n_ff, k.int_required("feed_forward_length"));
    }
    PELICAN_TRY(validate_hparams(hp, f.name()));
    PELICAN_TRY(finish_rope(hp, nullptr, f.name()));
    return hp;
}

}  // namespace

Status validate_hparams(const ModelHParams& hp, std::string_view source) {
    const auto positive = [&](int64_t v, std::string_view what) -> Status {
        if (v <= 0) return make_error("{}: {} must be positive, found {}", source, what, v);
        return {};
    };
    PELICAN_TRY(positive(hp.n_embd, "hidden size (embedding_length)"));
    PELICAN_TRY(positive(hp.n_layer, "layer count (block_count)"));
    if (hp.n_layer > kMaxLayers)
        return make_error("{}: {} layers is above the supported {}", source, hp.n_layer, kMaxLayers);
    if (static_cast<int64_t>(hp.layer.size()) != hp.n_layer)
        return make_error("{}: {} layer kinds for {} layers", source, hp.layer.size(), hp.n_layer);
    for (const LayerKind& lk : hp.layer) {
        if (lk.mixer == Mixer::kDeltaNet && hp.deltanet.linear.n_v_heads <= 0)
            return make_error("{}: a Gated DeltaNet layer without DeltaNet heads", source);
        if (lk.ffn == Ffn::kMoe && (hp.moe.n_expert <= 0 || hp.moe.n_expert_used <= 0))
            return make_error("{}: an MoE layer without experts", source);
    }
    if (hp.n_kv_layers() == 0) return make_error("{}: no attention layer (not supported)", source);
    PELICAN_TRY(positive(hp.n_head, "attention head count"));
    PELICAN_TRY(positive(hp.n_head_kv, "key/value head count"));
    PELICAN_TRY(positive(hp.head_dim, "head dimension"));
    PELICAN_TRY(positive(hp.n_ff, "MLP width (feed_forward_length / intermediate_size)"));
    if (hp.n_head % hp.n_head_kv != 0)
        return make_error("{}: {} attention heads are not a multiple of {} key/value heads", source,
                          hp.n_head, hp.n_head_kv);
    if (hp.rope_dim <= 0 || hp.rope_dim > hp.head_dim || hp.rope_dim % 2 != 0)
        return make_error("{}: rope dimension {} must be even and in (0, head_dim = {}]", source, hp.rope_dim,
                          hp.head_dim);
    if (hp.head_dim > 512)
        return make_error("{}: head dimension {} is above the supported 512", source, hp.head_dim);
    if (!(hp.rms_eps > 0) || !std::isfinite(hp.rms_eps))
        return make_error("{}: rms norm epsilon must be positive, found {}", source, hp.rms_eps);
    if (hp.sliding_window < 0) return make_error("{}: negative sliding window {}", source, hp.sliding_window);
    for (float s : {hp.attn_scale, hp.embd_scale, hp.residual_scale, hp.logit_scale})
        if (!std::isfinite(s) || s == 0.0f)
            return make_error("{}: attention/embedding/residual/logit scales must be finite and non-zero",
                              source);
    return {};
}

Expected<ModelHParams> hparams_from_gguf(const GgufFile& f, const ArchSpec& arch) {
    const std::string arch_key = f.get_string("general.architecture").value_or(std::string(arch.name));
    const GgufKeys k{f, arch_key + "."};
    if (arch.layer_plan == LayerPlan::kLayerTypes) return qwen35_hparams_from_gguf(f, arch, k);
    ModelHParams hp;
    hp.arch = &arch;
    hp.rope_layout = arch.gguf_rope;
    PELICAN_ASSIGN(hp.n_embd, k.int_required("embedding_length"));
    PELICAN_ASSIGN(hp.n_layer, k.int_required("block_count"));
    if (hp.n_layer > 0 && hp.n_layer <= kMaxLayers)
        hp.layer.assign(static_cast<size_t>(hp.n_layer), LayerKind{});
    PELICAN_ASSIGN(hp.n_ff, k.int_required("feed_forward_length"));
    PELICAN_ASSIGN(hp.n_head, k.int_required("attention.head_count"));
    PELICAN_ASSIGN(hp.n_head_kv, k.int_or("attention.head_count_kv", hp.n_head));
    PELICAN_ASSIGN(hp.n_ctx_train, k.int_or("context_length", 0));
    PELICAN_ASSIGN(hp.n_vocab, k.int_or("vocab_size", 0));
    if (hp.n_head <= 0) return make_error("{}: {}attention.head_count must be positive", f.name(), k.prefix);
    PELICAN_ASSIGN(hp.head_dim, k.int_or("attention.key_length", hp.n_embd / hp.n_head));
    PELICAN_ASSIGN(const int64_t v_len, k.int_or("attention.value_length", hp.head_dim));
    if (v_len != hp.head_dim)
        return make_error("{}: value head size {} differs from key head size {} (not supported)", f.name(),
                          v_len, hp.head_dim);
    PELICAN_ASSIGN(hp.rope_dim, k.int_or("rope.dimension_count", hp.head_dim));
    PELICAN_ASSIGN(hp.rope_theta, k.float_or("rope.freq_base", 10000.0));
    PELICAN_ASSIGN(const double eps, k.float_or("attention.layer_norm_rms_epsilon", 1e-5));
    hp.rms_eps = static_cast<float>(eps);
    // A GGUF that names a window gets it whatever the arch (Mistral GGUFs are arch "llama").
    PELICAN_ASSIGN(hp.sliding_window, k.int_or("attention.sliding_window", 0));

    hp.attn_scale = hp.head_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(hp.head_dim)) : 0.0f;
    if (arch.scalar_multipliers) {
        PELICAN_ASSIGN(const double es, k.float_or("embedding_scale", 1.0));
        PELICAN_ASSIGN(const double rs, k.float_or("residual_scale", 1.0));
        PELICAN_ASSIGN(const double as, k.float_or("attention.scale", hp.attn_scale));
        PELICAN_ASSIGN(const double ls, k.float_or("logit_scale", 1.0));
        hp.embd_scale = static_cast<float>(es);
        hp.residual_scale = static_cast<float>(rs);
        hp.attn_scale = static_cast<float>(as);
        if (ls == 0) return make_error("{}: {}logit_scale must be non-zero", f.name(), k.prefix);
        hp.logit_scale = static_cast<float>(1.0 / ls);
    }
    PELICAN_TRY(validate_hparams(hp, f.name()));

    // Rope scaling keys as llama.cpp's converter writes them. llama3 scaling comes as the
    // rope_freqs.weight tensor instead (applied by the weight loader).
    std::optional<RopeScaling> scaling;
    if (const auto type = f.get_string(k.key("rope.scaling.type")); type && *type != "none") {
        RopeScaling s;
        s.type = *type;
        PELICAN_ASSIGN(s.factor, k.float_or("rope.scaling.factor", 1.0));
        PELICAN_ASSIGN(const int64_t orig, k.int_or("rope.scaling.original_context_length", 0));
        if (orig > 0) s.original_max_position_embeddings = orig;
        PELICAN_ASSIGN(const double attn, k.float_or("rope.scaling.attn_factor", 0.0));
        if (attn > 0) s.attention_factor = attn;
        PELICAN_ASSIGN(const double bf, k.float_or("rope.scaling.yarn_beta_fast", 32.0));
        PELICAN_ASSIGN(const double bs, k.float_or("rope.scaling.yarn_beta_slow", 1.0));
        s.beta_fast = bf;
        s.beta_slow = bs;
        scaling = std::move(s);
    }
    PELICAN_TRY(finish_rope(hp, scaling ? &*scaling : nullptr, f.name()));
    return hp;
}

Expected<ModelHParams> hparams_common_from_hf(const HfConfig& c, const ArchSpec& arch,
                                              std::string_view source) {
    ModelHParams hp;
    hp.arch = &arch;
    hp.rope_layout = RopeLayout::kNeox;
    hp.n_vocab = c.vocab_size;
    hp.n_embd = c.hidden_size;
    hp.n_layer = c.num_hidden_layers;
    hp.n_head = c.num_attention_heads;
    hp.n_head_kv = c.num_key_value_heads;
    hp.head_dim = c.head_dim;
    hp.n_ctx_train = c.max_position_embeddings;
    hp.rms_eps = static_cast<float>(c.rms_norm_eps);
    hp.rope_dim = c.rotary_dim();
    hp.rope_theta = c.rope_theta;
    hp.attn_scale = hp.head_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(hp.head_dim)) : 0.0f;
    if (c.hidden_act != "silu" && c.hidden_act != "swish")
        return make_error("{}: hidden_act \"{}\" is not supported for {} (expected silu)", source,
                          c.hidden_act, arch.name);
    return hp;
}

Expected<ModelHParams> hparams_from_hf(const HfConfig& c, const ArchSpec& arch, std::string_view source) {
    if (arch.layer_plan == LayerPlan::kLayerTypes) return qwen35_hparams_from_hf(c, arch, source);
    PELICAN_ASSIGN(ModelHParams hp, hparams_common_from_hf(c, arch, source));
    hp.n_ff = c.intermediate_size;
    if (hp.n_layer > 0 && hp.n_layer <= kMaxLayers)
        hp.layer.assign(static_cast<size_t>(hp.n_layer), LayerKind{});
    if (arch.sliding_window && c.sliding_window) hp.sliding_window = *c.sliding_window;
    if (c.is_moe())
        return make_error("{}: mixture-of-experts {} models are not supported yet", source, arch.name);
    if (arch.scalar_multipliers) {
        hp.embd_scale = static_cast<float>(c.embedding_multiplier);
        hp.residual_scale = static_cast<float>(c.residual_multiplier);
        if (c.attention_multiplier) hp.attn_scale = static_cast<float>(*c.attention_multiplier);
        if (c.logits_scaling == 0) return make_error("{}: logits_scaling must be non-zero", source);
        hp.logit_scale = static_cast<float>(1.0 / c.logits_scaling);
    }
    PELICAN_TRY(validate_hparams(hp, source));
    PELICAN_TRY(finish_rope(hp, c.rope_scaling ? &*c.rope_scaling : nullptr, source));
    return hp;
}

}  // namespace pelican
