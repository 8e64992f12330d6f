// The Executor: one per backend (CPU: backend/cpu/cpu_executor.h; CUDA next), stateless with
// respect to sequences. A step runs the model's blocks over a Batch (runtime/batch.h), reading and
// writing the sequences' KV pages and recurrent states in a SequenceMemory (kv/sequence_memory.h)
// that the same executor created (its storage is the backend's), and writes logits / hidden rows
// of the batch's out_rows. Input checks, chunking limits and the logits handling are written once
// per backend, not once per model family.
//
//   PELICAN_ASSIGN(auto exec, create_cpu_executor(model, {.max_batch_tokens = 512}));
//   PELICAN_ASSIGN(auto mem, exec->create_memory({.max_seqs = 8, .max_seq_tokens = 4096}));
//   PELICAN_ASSIGN(SeqId a, mem->open());
//   PELICAN_TRY(exec->step(batch, *mem, outputs, pool));
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/sequence_memory.h"
#include "runtime/batch.h"

namespace pelican {

class Model;

// How much sequence memory to make.
struct MemoryOptions {
    int32_t max_seqs = 1;        // sequences open at once
    int64_t max_seq_tokens = 0;  // context of one sequence (> 0)
    int64_t kv_tokens = 0;       // KV positions in the pool over all sequences; 0: max_seqs * max_seq_tokens
    int32_t block_tokens = 16;   // positions per KV block
    int32_t checkpoints = 8;     // recurrent models: exact truncation within this many positions
    bool mtp = false;            // also hold the K/V of the model's MTP layers (Executor::mtp_step)
};

class Executor {
public:
    virtual ~Executor() = default;
    // Memory for sequences of this executor's model, on its device.
    virtual Expected<std::unique_ptr<SequenceMemory>> create_memory(const MemoryOptions& opt) = 0;
    // Runs the batch. On an error nothing was committed (lengths unchanged; blocks a failed
    // step reserved stay reserved). The pool is for CPU work (a device executor may ignore it).
    virtual Status step(const Batch& batch, SequenceMemory& mem, const StepOutputs& out,
                        ThreadPool& pool) = 0;
    // The model's multi-token-prediction block (Qwen3.5 mtp.*) over the rows of b: row i reads the token at
    // position b.pos[i] + 1 of b.seq[i] (b.token[i]) and hidden[i], the final-normed hidden state the main
    // model gave position b.pos[i] (StepOutputs::hidden of that step) [rows, n_embd]; its K/V row goes to the
    // MTP layer's pages at position b.pos[i]. A sequence's rows are consecutive, the first at or before
    // mem.mtp_length(seq), all before mem.length(seq) (the memory must be made with MemoryOptions::mtp).
    // Writes the drafted distribution's logits (and the MTP's normed hidden rows) of out_rows as step() does,
    // and commit_mtp. Errors: no MTP block, a memory without its pages, bad rows (nothing written then).
    virtual Status mtp_step(const Batch& b, std::span<const float> hidden, SequenceMemory& mem,
                            const StepOutputs& out, ThreadPool& pool) {
        (void)b, (void)hidden, (void)mem, (void)out, (void)pool;
        return make_error("the {} executor has no MTP step yet", device_name());
    }

    // True when step() samples rows with these parameters exactly as the host Sampler would
    // (StepOutputs::sample); otherwise the caller samples from host logits.
    virtual bool samples_on_device(const StepSampling& p) const { return false; }
    // Waits for the work queued on the executor's device (a CPU step has finished when it returns).
    virtual Status synchronize() { return {}; }
    // Most rows one step takes.
    virtual int64_t max_batch_tokens() const = 0;
    virtual const Model& model() const = 0;
    virtual std::string_view device_name() const = 0;
};

}  // namespace pelican
