// Token sampler: turns one step's logits into a token id.
//
//   PELICAN_ASSIGN(Sampler s, Sampler::create(params));
//   for (int32_t t : prompt) s.accept(t);        // optional: prompt tokens count for penalties
//   int32_t tok = s.sample(logits);              // logits: [n_vocab] fp32, modified in place
//   s.accept(tok);
//
// Pipeline of sample() (HF transformers / vLLM order):
//   1. penalties over the last penalty_last_n accepted tokens (each distinct token once):
//        repetition (HF/llama.cpp): logit > 0 ? logit / r : logit * r
//        frequency/presence (OpenAI): logit -= count * frequency + (count > 0) * presence
//   2. temperature == 0: greedy argmax (lowest id on ties); steps 3-6 are skipped.
//   3. logits /= temperature
//   4. top_k (0 = off): keep the k largest
//   5. top_p (1 = off): in descending order, keep the smallest prefix whose probability
//      (renormalised over the top-k set) reaches top_p; the token that crosses it is kept
//   6. min_p (0 = off): keep tokens with p >= min_p * p_max
//   7. draw from the softmax of the kept logits.
// Ties in ordering break by lower token id, so the kept set is a well-defined prefix of the
// order (logit desc, id asc). Non-finite logits (-inf masks, NaN) are never sampled.
//
// Reproducibility: the draw of step 7 is u = sample_uniform(seed, counter) (core/philox.h,
// Philox4x32-10, 24 bits), counter = the number of sample() calls with temperature > 0 since
// create() or reset(); a seed gives the same tokens on every platform and run, and on the GPU
// (backend/cuda/sampling_batch.h computes the same u from a row's seed and counter). Before issue 17
// the stream was std::mt19937_64's, so a seed now picks other tokens than it did then.
// Cost: no allocation per call after the first with a given vocabulary size; O(n_vocab) per call
// plus a partial sort of the kept prefix.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace pelican {

// seed value meaning "pick a random seed" (Sampler::seed() then reports the one chosen).
inline constexpr uint64_t kRandomSeed = UINT64_MAX;
// Returned by sample() when no logit is finite (or the span is empty).
inline constexpr int32_t kNoToken = -1;

struct SamplerParams {
    float temperature = 0.8f;         // >= 0; 0 = greedy
    int32_t top_k = 40;               // >= 0; 0 = off
    float top_p = 0.95f;              // (0, 1]; 1 = off
    float min_p = 0.05f;              // [0, 1]; 0 = off
    float repetition_penalty = 1.0f;  // > 0; 1 = off
    float presence_penalty = 0.0f;    // finite; 0 = off
    float frequency_penalty = 0.0f;   // finite; 0 = off
    int32_t penalty_last_n = 64;      // tokens of history the penalties see; 0 = none, -1 = all
    uint64_t seed = kRandomSeed;
};

// Errors name the parameter and its allowed range.
Status validate_sampler_params(const SamplerParams& p);

// The parameters a forward pass or an executor applies on its device (the same fields;
// model/forward_pass.h defines StepSampling).
struct StepSampling;
StepSampling step_sampling(const SamplerParams& p);

class Sampler {
public:
    static Expected<Sampler> create(const SamplerParams& params);

    // Picks a token from logits ([n_vocab] fp32; rewritten in place: penalised and scaled).
    // Returns kNoToken only if no logit is finite.
    int32_t sample(std::span<float> logits);
    // Appends a token to the penalty history (prompt tokens and generated tokens alike).
    void accept(int32_t token);
    // Forgets the history and restarts the draws from counter 0.
    void reset();

    // For sampling done elsewhere (the GPU, cuda/sampling.h and cuda/sampling_batch.h) with this
    // sampler's state: counter() is the draw number the next sample() with temperature > 0 uses
    // (sampling_batch.h takes seed() and counter() per row); draw_uniform() returns that draw's u in
    // [0, 1) and advances the counter exactly as such a sample() does (greedy calls draw nothing);
    // penalty_window() is the last penalty_last_n accepted tokens, in no particular order (empty
    // when off).
    uint64_t counter() const { return counter_; }
    float draw_uniform();
    std::span<const int32_t> penalty_window() const { return history_; }

    const SamplerParams& params() const { return params_; }
    uint64_t seed() const { return seed_; }  // the seed in use (resolved when kRandomSeed)

private:
    explicit Sampler(const SamplerParams& p);
    void apply_penalties(std::span<float> logits);

    struct Cand {
        float logit;  // scaled by 1 / temperature
        float w;      // exp(logit - max logit), in [0, 1]
        int32_t id;
    };

    SamplerParams params_;
    uint64_t seed_ = 0;
    uint64_t counter_ = 0;  // draws so far (the next draw's counter)

    // Penalty history: a ring of the last penalty_last_n tokens (or all, when -1).
    std::vector<int32_t> history_;
    size_t history_head_ = 0;  // next slot to overwrite once the ring is full

    // Scratch reused across calls.
    std::vector<Cand> cand_;
    std::vector<int32_t> counts_;   // [n_vocab] occurrences in the penalty window (zero between calls)
    std::vector<int32_t> touched_;  // distinct ids counted this call
};

}  // namespace pelican
