// Rope inverse frequencies with scaling (see rope_freq.h). fp32 arithmetic mirrors transformers'
// modeling_rope_utils so golden logits match; constants follow its defaults.
#include "model/rope_freq.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace pelican {
namespace {

void apply_llama3(RopeFreqs& r, const RopeScaling& s, int64_t orig_ctx) {
    const float factor = static_cast<float>(s.factor);
    const float low = static_cast<float>(s.low_freq_factor.value_or(1.0));
    const float high = static_cast<float>(s.high_freq_factor.value_or(4.0));
    const float old_ctx = static_cast<float>(orig_ctx);
    const float low_wavelen = old_ctx / low;
    const float high_wavelen = old_ctx / high;
    for (float& f : r.inv_freq) {
        const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
        if (wavelen > low_wavelen) {
            f = f / factor;
        } else if (!(wavelen < high_wavelen)) {  // medium band: blend
            const float smooth = (old_ctx / wavelen - low) / (high - low);
            f = (1.0f - smooth) * f / factor + smooth * f;
        }
    }
}

double yarn_mscale(double scale) { return scale <= 1.0 ? 1.0 : 0.1 * std::log(scale) + 1.0; }

void apply_yarn(RopeFreqs& r, const RopeScaling& s, int64_t rope_dim, double theta, int64_t orig_ctx) {
    const double factor = s.factor;
    const double beta_fast = s.beta_fast.value_or(32.0);
    const double beta_slow = s.beta_slow.value_or(1.0);
    const auto correction_dim = [&](double n_rot) {
        return (static_cast<double>(rope_dim) *
                std::log(static_cast<double>(orig_ctx) / (n_rot * 2.0 * std::numbers::pi))) /
               (2.0 * std::log(theta));
    };
    // transformers' default truncate=True: floor/ceil the correction range.
    double low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
    double high = std::min(std::ceil(correction_dim(beta_slow)), static_cast<double>(rope_dim - 1));
    if (low == high) high += 0.001;
    const float ffactor = static_cast<float>(factor);
    for (size_t i = 0; i < r.inv_freq.size(); ++i) {
        const float ramp =
            std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
        const float extrap_w = 1.0f - ramp;  // weight of the unscaled frequency
        const float extrap = r.inv_freq[i];
        const float interp = extrap / ffactor;
        r.inv_freq[i] = interp * (1.0f - extrap_w) + extrap * extrap_w;
    }
    r.attn_factor = static_cast<float>(s.attention_factor.value_or(yarn_mscale(factor)));
}

}  // namespace

Expected<RopeFreqs> compute_rope_freqs(int64_t rope_dim, double theta, const RopeScaling* scaling,
                                       int64_t max_position_embeddings, std::string_view source) {
    if (rope_dim <= 0 || rope_dim % 2 != 0)
        return make_error("{}: rope dimension must be positive and even, found {}", source, rope_dim);
    if (!(theta > 0) || !std::isfinite(theta))
        return make_error("{}: rope theta must be positive, found {}", source, theta);
    RopeFreqs r;
    r.inv_freq.resize(static_cast<size_t>(rope_dim / 2));
    const float base = static_cast<float>(theta);
    for (int64_t i = 0; i < rope_dim / 2; ++i) {
        const float expo = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
        r.inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(base, expo);
    }
    if (!scaling || scaling->type.empty() || scaling->type == "default" || scaling->type == "none" ||
        scaling->type == "dynamic")
        return r;
    const RopeScaling& s = *scaling;
    if (!(s.factor > 0) || !std::isfinite(s.factor))
        return make_error("{}: rope scaling factor must be positive, found {}", source, s.factor);
    const int64_t orig_ctx = s.original_max_position_embeddings.value_or(max_position_embeddings);
    if (s.type == "linear") {
        for (float& f : r.inv_freq) f /= static_cast<float>(s.factor);
    } else if (s.type == "llama3") {
        if (orig_ctx <= 0)
            return make_error("{}: llama3 rope scaling needs original_max_position_embeddings", source);
        const double lo = s.low_freq_factor.value_or(1.0), hi = s.high_freq_factor.value_or(4.0);
        if (!(hi > lo) || !(lo > 0))
            return make_error(
                "{}: llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, found {} / {}", source,
                lo, hi);
        apply_llama3(r, s, orig_ctx);
    } else if (s.type == "yarn") {
        if (orig_ctx <= 0)
            return make_error("{}: yarn rope scaling needs original_max_position_embeddings", source);
        apply_yarn(r, s, rope_dim, theta, orig_ctx);
    } else {
        return make_error(
            "{}: rope scaling type \"{}\" is not supported (supported: linear, llama3, yarn, dynamic)",
            source, s.type);
    }
    return r;
}

}  // namespace pelican
