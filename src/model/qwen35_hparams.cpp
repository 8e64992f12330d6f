// config.json -> ModelHParams for the Qwen3.5 layer plan (LayerPlan::kLayerTypes, model/hparams.h): the
// kinds of each layer from layer_types, the DeltaNet heads, the experts.
#include "model/hparams.h"
#include "model/rope_freq.h"

namespace pelican {

Expected<ModelHParams> qwen35_hparams_from_hf(const HfConfig& c, const ArchSpec& arch,
                                              std::string_view source) {
    PELICAN_ASSIGN(ModelHParams hp, hparams_common_from_hf(c, arch, source));

    hp.norm_weight = NormWeight::kOnePlus;
    if (static_cast<int64_t>(c.layer_types.size()) != c.num_hidden_layers)
        return make_error("{}: layer_types has {} entries for {} layers", source, c.layer_types.size(),
                          c.num_hidden_layers);
    for (size_t i = 0; i < c.layer_types.size(); ++i) {
        const std::string& t = c.layer_types[i];
        if (t != "full_attention" && t != "linear_attention")
            return make_error("{}: layer_types[{}] is \"{}\" (expected full_attention or linear_attention)",
                              source, i, t);
        hp.layer.push_back(
            LayerKind{t == "full_attention" ? Mixer::kGatedAttention : Mixer::kDeltaNet, arch.ffn});
    }
    DeltaNetHParams& h = hp.deltanet;
    h.linear = DeltaNetShape{.n_k_heads = static_cast<int>(c.linear_num_key_heads),
                             .n_v_heads = static_cast<int>(c.linear_num_value_heads),
                             .d_k = static_cast<int>(c.linear_key_head_dim),
                             .d_v = static_cast<int>(c.linear_value_head_dim)};
    h.conv_kernel = static_cast<int>(c.linear_conv_kernel_dim > 0 ? c.linear_conv_kernel_dim : 4);
    hp.n_mtp_layers = c.mtp_num_hidden_layers;
    if (hp.n_mtp_layers < 0 || hp.n_mtp_layers > 64)
        return make_error("{}: mtp_num_hidden_layers {} is out of range (0 to 64)", source, hp.n_mtp_layers);
    if (hp.has(Mixer::kDeltaNet)) {
        if (h.linear.n_k_heads <= 0 || h.linear.n_v_heads <= 0 || h.linear.d_k <= 0 || h.linear.d_v <= 0)
            return make_error(
                "{}: linear_num_key_heads, linear_num_value_heads, linear_key_head_dim and "
                "linear_value_head_dim "
                "must be positive (found {}, {}, {}, {})",
                source, h.linear.n_k_heads, h.linear.n_v_heads, h.linear.d_k, h.linear.d_v);
        if (h.linear.n_v_heads % h.linear.n_k_heads != 0)
            return make_error(
                "{}: linear_num_value_heads ({}) is not a multiple of linear_num_key_heads ({})", source,
                h.linear.n_v_heads, h.linear.n_k_heads);
        if (h.conv_kernel > 16)
            return make_error("{}: linear_conv_kernel_dim {} is above the supported 16", source,
                              h.conv_kernel);
    }
    if (arch.ffn == Ffn::kMoe) {
        MoeHParams& m = hp.moe;
        m.n_expert = static_cast<int>(c.num_experts);
        m.n_expert_used = static_cast<int>(c.num_experts_per_tok);
        m.n_ff_expert = c.moe_intermediate_size;
        m.n_ff_shared = c.shared_expert_intermediate_size;
        if (m.n_expert <= 0 || m.n_expert_used <= 0 || m.n_expert_used > m.n_expert || m.n_ff_expert <= 0 ||
            m.n_ff_shared <= 0)
            return make_error(
                "{}: {} needs num_experts, num_experts_per_tok (<= num_experts), moe_intermediate_size and "
                "shared_expert_intermediate_size > 0 (found {}, {}, {}, {})",
                source, arch.name, m.n_expert, m.n_expert_used, m.n_ff_expert, m.n_ff_shared);
        hp.n_ff = m.n_ff_expert;
    } else {
        hp.n_ff = c.intermediate_size;
    }
    PELICAN_TRY(validate_hparams(hp, source));
    PELICAN_ASSIGN(RopeFreqs freqs,
                   compute_rope_freqs(hp.rope_dim, hp.rope_theta, c.rope_scaling ? &*c.rope_scaling : nullptr,
                                      hp.n_ctx_train, source));
    hp.inv_freq = std::move(freqs.inv_freq);
    hp.rope_attn_factor = freqs.attn_factor;
    return hp;
}

}  // namespace pelican
