// One step's work for an Executor (runtime/executor.h): rows of tokens from any number of sequences,
// each at its own position, and which rows need logits.
//
//   Batch {token, pos, seq, out_rows}
//     token [n] ids; seq [n] the SequenceMemory id of each row; pos [n] its position.
//     A sequence's rows are consecutive and in position order, the first at the sequence's current
//     length (truncate first to rewrite): decode rows (one per sequence), prefill chunks and
//     speculative k+1 rows mix freely in one step.
//     out_rows: ascending row indices whose logits (and hidden rows) the step produces.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/sequence_memory.h"
#include "model/forward_pass.h"

namespace pelican {

struct Batch {
    std::span<const int32_t> token;
    std::span<const int64_t> pos;
    std::span<const SeqId> seq;
    std::span<const int32_t> out_rows;
    size_t size() const { return token.size(); }
};

// Sampling of one out row on the executor's device (Executor::samples_on_device): the parameters,
// the penalty window (ids outside the vocabulary are ignored) and the row's place in its sequence's
// random stream (core/philox.h: u = sample_uniform(seed, counter)), all from the request's host
// Sampler (seed(), counter(), penalty_window()), so a seed gives the host's tokens. The caller
// advances its Sampler's counter for every row with temperature > 0 (Sampler::draw_uniform).
struct RowSample {
    StepSampling params;
    std::span<const int32_t> window;
    uint64_t seed = 0;
    uint64_t counter = 0;
};

// Where a step's results go (host memory; empty spans: not wanted).
struct StepOutputs {
    std::span<float> logits;  // [out_rows, n_vocab] fp32
    std::span<float> hidden;  // [out_rows, n_embd] fp32: final-normed hidden state (MTP input)
    // Sampled on the device when set: sample [out_rows] -> tokens [out_rows]; logits reach the host
    // only if `logits` is given too.
    std::span<const RowSample> sample;
    std::span<int32_t> tokens;
};

// One sequence's rows of a batch: rows row0 .. row0 + n - 1 at positions pos0 .. pos0 + n - 1.
struct SeqRun {
    SeqId seq = 0;
    int64_t row0 = 0;
    int64_t n = 0;
    int64_t pos0 = 0;
};

// Where a sequence's first row may sit: at its length (a step), or, for Executor::mtp_step, at or before the
// MTP positions written (mtp_length) with every row before its length.
enum class RowsFrom : uint8_t { kLength, kMtp };

// Checks a batch against the memory and the model (sizes, ids in the vocabulary, open sequences,
// consecutive rows in position order from each sequence's length, each sequence once, the context,
// out_rows ascending and in range, output sizes) and splits it into runs (`runs` is cleared; its
// capacity is kept, so a caller that reserved max_tokens entries never allocates here).
// Errors say which row is at fault.
Status split_batch(const Batch& b, const SequenceMemory& mem, int64_t n_vocab, int64_t n_embd,
                   int64_t max_tokens, const StepOutputs& out, std::vector<SeqRun>& runs,
                   RowsFrom from = RowsFrom::kLength);

}  // namespace pelican
