// Token sampler (see sampler.h for the pipeline and its conventions).
#include "runtime/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>

#include "core/philox.h"
#include "model/forward_pass.h"

namespace pelican {

Status validate_sampler_params(const SamplerParams& p) {
    if (!std::isfinite(p.temperature) || p.temperature < 0)
        return make_error("sampler: temperature must be a finite number >= 0 (0 = greedy), got {}",
                          p.temperature);
    if (p.top_k < 0) return make_error("sampler: top_k must be >= 0 (0 = off), got {}", p.top_k);
    if (!(p.top_p > 0 && p.top_p <= 1))
        return make_error("sampler: top_p must be in (0, 1] (1 = off), got {}", p.top_p);
    if (!(p.min_p >= 0 && p.min_p <= 1))
        return make_error("sampler: min_p must be in [0, 1] (0 = off), got {}", p.min_p);
    if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0)
        return make_error("sampler: repetition_penalty must be a finite number > 0 (1 = off), got {}",
                          p.repetition_penalty);
    if (!std::isfinite(p.presence_penalty))
        return make_error("sampler: presence_penalty must be finite, got {}", p.presence_penalty);
    if (!std::isfinite(p.frequency_penalty))
        return make_error("sampler: frequency_penalty must be finite, got {}", p.frequency_penalty);
    if (p.penalty_last_n < -1)
        return make_error("sampler: penalty_last_n must be >= -1 (-1 = whole history, 0 = off), got {}",
                          p.penalty_last_n);
    return {};
}

Expected<Sampler> Sampler::create(const SamplerParams& params) {
    PELICAN_TRY(validate_sampler_params(params));
    return Sampler(params);
}

Sampler::Sampler(const SamplerParams& p) : params_(p), seed_(p.seed) {
    if (seed_ == kRandomSeed) {
        std::random_device rd;
        seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
        if (seed_ == kRandomSeed) seed_ = 0;
    }
    if (params_.penalty_last_n > 0) history_.reserve(static_cast<size_t>(params_.penalty_last_n));
}

void Sampler::reset() {
    history_.clear();
    history_head_ = 0;
    counter_ = 0;
}

void Sampler::accept(int32_t token) {
    const int32_t last_n = params_.penalty_last_n;
    if (last_n == 0) return;
    if (last_n < 0 || history_.size() < static_cast<size_t>(last_n)) {
        history_.push_back(token);
        return;
    }
    history_[history_head_] = token;
    history_head_ = (history_head_ + 1) % history_.size();
}

float Sampler::draw_uniform() { return sample_uniform(seed_, counter_++); }

void Sampler::apply_penalties(std::span<float> logits) {
    const float rp = params_.repetition_penalty;
    const float freq = params_.frequency_penalty;
    const float pres = params_.presence_penalty;
    if (history_.empty() || (rp == 1.0f && freq == 0.0f && pres == 0.0f)) return;
    const size_t n = logits.size();
    if (counts_.size() < n) counts_.assign(n, 0);
    touched_.clear();
    for (int32_t t : history_) {
        if (t < 0 || static_cast<size_t>(t) >= n) continue;  // ids outside this vocab are ignored
        if (counts_[t]++ == 0) touched_.push_back(t);
    }
    for (int32_t t : touched_) {
        float& l = logits[t];
        if (rp != 1.0f) l = l > 0 ? l / rp : l * rp;
        l -= static_cast<float>(counts_[t]) * freq + pres;
        counts_[t] = 0;
    }
}

int32_t Sampler::sample(std::span<float> logits) {
    // Every call with temperature > 0 uses one draw, whatever it returns (the GPU's rows do too).
    const float u_draw = params_.temperature > 0.0f ? draw_uniform() : 0.0f;
    const size_t n = logits.size();
    if (n == 0) return kNoToken;
    apply_penalties(logits);

    // Greedy: first maximum among finite logits.
    if (params_.temperature == 0.0f) {
        int32_t best = kNoToken;
        float best_l = 0;
        for (size_t i = 0; i < n; ++i) {
            const float l = logits[i];
            if (std::isfinite(l) && (best < 0 || l > best_l)) {
                best = static_cast<int32_t>(i);
                best_l = l;
            }
        }
        return best;
    }

    // Scaled logits (written back); m = the largest finite one.
    const float temp = params_.temperature;
    float m = -INFINITY;
    for (size_t i = 0; i < n; ++i) {
        float l = logits[i];
        if (!std::isfinite(l)) continue;
        l /= temp;
        if (l == INFINITY) l = FLT_MAX;  // tiny temperature: overflowed logits tie at the top
        logits[i] = l;
        m = std::max(m, l);
    }
    if (m == -INFINITY) return kNoToken;

    // Order: logit descending, then id ascending (a strict total order on candidates).
    const auto before = [](const Cand& a, const Cand& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    };
    const auto weight = [m](float l) { return std::exp(l - m); };  // unnormalised p in [0, 1]

    const bool use_top_p = params_.top_p < 1.0f;
    const float min_p = params_.min_p;
    const size_t top_k = static_cast<size_t>(params_.top_k);
    double z = 0;         // top_p's normaliser: sum of w over the top-k set (all when top_k is off)
    bool sorted = false;  // is cand_[0, kept) in `before` order?
    cand_.clear();
    const size_t cap = top_k > 0 ? std::min(top_k, n) : n;
    if (cand_.capacity() < cap) cand_.reserve(cap);
    if (top_k > 0 && top_k < n) {
        // Top-k by one scan with a heap of the best k so far (its top is the worst of them).
        for (size_t i = 0; i < n; ++i) {
            const Cand c{logits[i], 0, static_cast<int32_t>(i)};
            if (!std::isfinite(c.logit)) continue;
            if (cand_.size() < top_k) {
                cand_.push_back(c);
                std::push_heap(cand_.begin(), cand_.end(), before);
            } else if (before(c, cand_.front())) {
                std::pop_heap(cand_.begin(), cand_.end(), before);
                cand_.back() = c;
                std::push_heap(cand_.begin(), cand_.end(), before);
            }
        }
        std::sort_heap(cand_.begin(), cand_.end(), before);
        sorted = true;
        for (Cand& c : cand_) z += c.w = weight(c.logit);
    } else {
        // All finite candidates in id order. Without top_p, tokens clearly below the min_p
        // threshold (w < min_p) are skipped here, before paying for their exp.
        const float skip_below =
            min_p > 0 && !use_top_p ? m + std::log(min_p) - 1e-3f * (1 + std::fabs(m)) : -INFINITY;
        for (size_t i = 0; i < n; ++i) {
            const float l = logits[i];
            if (!std::isfinite(l) || l < skip_below) continue;
            const float w = weight(l);
            z += w;
            cand_.push_back({l, w, static_cast<int32_t>(i)});
        }
    }
    size_t kept = cand_.size();

    // min_p keeps p >= min_p * p_max, i.e. w >= min_p. Both top_p and min_p keep a prefix of the
    // sorted order, so applying min_p first (stable, in place) leaves the same final set.
    if (min_p > 0.0f) {
        size_t w = 0;
        for (size_t r = 0; r < kept; ++r)
            if (cand_[r].w >= min_p) cand_[w++] = cand_[r];
        kept = w;  // never 0: the maximum has w = 1
    }

    if (use_top_p) {
        // Sort a growing prefix until the cumulative probability reaches top_p.
        const double top_p = params_.top_p;
        const auto first = cand_.begin();
        double cum = 0;
        size_t done = 0, chunk = std::min<size_t>(kept, 64), cut = kept;
        while (done < kept) {
            if (!sorted) {  // bring the next best (chunk - done) to [done, chunk), sorted
                std::nth_element(first + static_cast<ptrdiff_t>(done),
                                 first + static_cast<ptrdiff_t>(chunk - 1),
                                 first + static_cast<ptrdiff_t>(kept), before);
                std::sort(first + static_cast<ptrdiff_t>(done), first + static_cast<ptrdiff_t>(chunk),
                          before);
            }
            for (size_t j = done; j < chunk && cut == kept; ++j) {
                cum += cand_[j].w / z;
                if (cum >= top_p) cut = j + 1;
            }
            if (cut < kept) break;
            done = chunk;
            chunk = std::min(kept, chunk * 4);
        }
        kept = cut;
    }

    // Draw from the softmax over the kept candidates.
    double total = 0;
    for (size_t j = 0; j < kept; ++j) total += cand_[j].w;
    double u = static_cast<double>(u_draw) * total;
    int32_t last_positive = cand_[0].id;
    for (size_t j = 0; j < kept; ++j) {
        const double w = cand_[j].w;
        if (w <= 0) continue;  // underflowed far below the maximum
        last_positive = cand_[j].id;
        u -= w;
        if (u < 0) return cand_[j].id;
    }
    return last_positive;  // rounding left u >= 0 after the last weight
}

StepSampling step_sampling(const SamplerParams& p) {
    StepSampling g;
    g.temperature = p.temperature;
    g.top_k = p.top_k;
    g.top_p = p.top_p;
    g.min_p = p.min_p;
    g.repetition_penalty = p.repetition_penalty;
    g.presence_penalty = p.presence_penalty;
    g.frequency_penalty = p.frequency_penalty;
    return g;
}

}  // namespace pelican
