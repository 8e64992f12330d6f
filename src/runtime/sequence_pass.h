// One sequence on an Executor, as the ForwardPass interface the runtime's single-sequence users
// (Session, bench, eval) call: its own SequenceMemory with one open sequence, prompts split into
// steps of at most n_batch tokens, the last row's logits kept on the host.
//
// eval(tokens, pos0) rewinds to pos0 first (SequenceMemory::truncate), so pos0 may be any position
// up to the tokens evaluated so far. A recurrent model rewinds exactly within the memory's
// checkpoints; further back the pass re-feeds its kept tokens from the length the memory restored.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/forward.h"
#include "model/forward_pass.h"
#include "runtime/executor.h"

namespace pelican {

class SequencePass final : public ForwardPass {
public:
    // opt.n_ctx positions for the sequence, steps of at most min(opt.n_batch, the executor's
    // max_batch_tokens). Errors: bad sizes, allocation failures.
    static Expected<std::unique_ptr<SequencePass>> create(std::unique_ptr<Executor> exec,
                                                          const ForwardOptions& opt);

    Status eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                std::span<float> all_logits = {}) override;
    std::span<const float> last_logits() const override { return last_logits_; }
    int64_t n_ctx() const override { return mem_->max_seq_tokens(); }
    int64_t n_batch() const override { return n_batch_; }
    const Model& model() const override { return exec_->model(); }
    size_t kv_bytes() const override { return mem_->storage().bytes(); }
    std::string_view device_name() const override { return exec_->device_name(); }

    Executor& executor() { return *exec_; }
    SequenceMemory& memory() { return *mem_; }
    SeqId seq() const { return seq_; }

private:
    SequencePass() = default;

    std::unique_ptr<Executor> exec_;
    std::unique_ptr<SequenceMemory> mem_;
    SeqId seq_ = 0;
    int64_t n_batch_ = 0;
    int64_t n_vocab_ = 0;
    std::vector<int64_t> pos_;        // [n_batch]
    std::vector<SeqId> seq_ids_;      // [n_batch]
    std::vector<int32_t> rows_;       // [n_batch] 0, 1, 2, ...
    std::vector<float> last_logits_;  // [n_vocab]
    std::vector<int32_t> history_;    // [n_ctx capacity] the tokens at positions 0 .. length-1
    std::vector<int32_t> replay_;     // [n_ctx capacity] tokens re-fed after a rewind past the checkpoints

    // Steps of at most n_batch tokens at pos0..; logits of every row into all_logits when given,
    // else of the last row into last_logits_ when want_last.
    Status run(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool, std::span<float> all_logits,
               bool want_last);
};

}  // namespace pelican
