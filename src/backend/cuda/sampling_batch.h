// Batched token sampling on the GPU: one call samples n_rows rows of logits, each row with its own
// parameters, penalty window and random stream, in four kernel launches whose grids depend only on
// n_rows and n_vocab (graph-capturable: nothing is allocated, copied to or from the host, or
// synchronised; a captured call replays with whatever the device arrays hold at launch).
//
// Each row follows runtime/sampler.h exactly (penalties, greedy or temperature, top_k, top_p,
// min_p, the draw, tie rules, non-finite logits never sampled), and draws
//   u = sample_uniform(row.seed, row.counter)        (core/philox.h, computed on the device)
// so a row given a Sampler's seed() and counter() picks that Sampler's token (up to fp32 rounding
// of the softmax weights: expf against the host's exp; a draw within ~1e-6 of a boundary between
// two neighbouring candidates can land on the other one).
//
// The counter: the kernel reads row.counter and advances nothing. The caller owns each sequence's
// counter, passes the current value, and adds 1 after every row it samples with temperature > 0
// (as Sampler::sample and Sampler::draw_uniform do); a greedy row ignores its counter.
//
// Exactness: as sample_on_gpu (sampling.h), a row is sampled exactly when greedy or 1 <= top_k <=
// kMaxGpuTopK; other rows keep only the kMaxGpuTopK largest logits (gpu_sampling_exact says which).
// Host-includable, fmt-free.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/sampling.h"

namespace pelican::cuda {

// One row's parameters, in a device array [n_rows]. Same meaning and ranges as SamplerParams
// (runtime/sampler.h; validate there: the kernel does not check).
struct SampleRow {
    float temperature = 0.0f;  // >= 0; 0 = greedy (lowest id on ties)
    int32_t top_k = 0;         // >= 0; 0 = off
    float top_p = 1.0f;        // (0, 1]; 1 = off
    float min_p = 0.0f;        // [0, 1]; 0 = off
    float repetition_penalty = 1.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint32_t reserved = 0;
    uint64_t seed = 0;     // the sequence's seed (Sampler::seed(): resolved, never kRandomSeed)
    uint64_t counter = 0;  // the draw number of this row in the sequence's stream (see above)
};
static_assert(sizeof(SampleRow) == 48, "SampleRow is shared by host and device: keep it packed");

inline SampleRow sample_row(const GpuSampleParams& p, uint64_t seed, uint64_t counter) {
    SampleRow r;
    r.temperature = p.temperature;
    r.top_k = p.top_k;
    r.top_p = p.top_p;
    r.min_p = p.min_p;
    r.repetition_penalty = p.repetition_penalty;
    r.presence_penalty = p.presence_penalty;
    r.frequency_penalty = p.frequency_penalty;
    r.seed = seed;
    r.counter = counter;
    return r;
}

// True when the row is sampled exactly (greedy, or 1 <= top_k <= kMaxGpuTopK).
bool gpu_sampling_exact(const SampleRow& r);

// What a workspace is sized for; fixed when it is allocated, and passed unchanged to every call.
struct SampleBatchLimits {
    int max_rows = 1;             // 1 .. 65535
    int64_t n_vocab = 0;          // logits per row
    int64_t max_penalty_ids = 0;  // bound on penalty_offsets[n_rows] (all rows' windows together)
};

// Workspace bytes for these limits: about max_rows * 150 KB + max_penalty_ids * 16 bytes.
size_t sample_batch_workspace_bytes(const SampleBatchLimits& limits);

struct SampleBatchArgs {
    // [n_rows] rows of n_vocab fp32 logits on the device, row r at logits + r * row_stride
    // (row_stride >= n_vocab floats; the gap is never touched). Rewritten in place as
    // Sampler::sample leaves them: penalised, then (rows with temperature > 0) divided by the
    // temperature, +inf after the division clamped to FLT_MAX.
    float* logits = nullptr;
    int64_t row_stride = 0;
    int n_rows = 0;                   // 0 .. limits.max_rows (0: nothing is launched)
    const SampleRow* rows = nullptr;  // [n_rows] device
    // Penalty windows: row r's are penalty_ids[penalty_offsets[r] .. penalty_offsets[r + 1]) (the
    // last penalty_last_n accepted tokens, any order, repeats count for frequency; ids outside the
    // vocabulary are ignored). penalty_offsets: [n_rows + 1] int32 device, non-decreasing, >= 0,
    // penalty_offsets[n_rows] <= limits.max_penalty_ids (a row breaking this gets no penalties;
    // nothing is read or written out of bounds). Both nullptr: no row has a window.
    const int32_t* penalty_offsets = nullptr;
    const int32_t* penalty_ids = nullptr;
    int32_t* out_tokens = nullptr;  // [n_rows] device: the token, kNoToken (-1) if no logit is finite
    // [n_rows] device or nullptr: log p of the chosen token under the softmax over every finite
    // logit of the row as rewritten (after penalties and temperature; a greedy row's at
    // temperature 1), the number OpenAI's logprobs report; NaN for kNoToken. Computing it costs one
    // expf per logit.
    float* out_logprobs = nullptr;
    void* workspace = nullptr;  // sample_batch_workspace_bytes(limits) bytes, contents irrelevant
};

// Enqueues the sampling of a.n_rows rows on `stream`.
void sample_batch_on_gpu(const SampleBatchLimits& limits, const SampleBatchArgs& a, cudaStream_t stream);

}  // namespace pelican::cuda
