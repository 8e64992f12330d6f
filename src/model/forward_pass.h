// The interface every forward-pass implementation offers to the runtime (Session, bench, eval):
// the CPU dense block (model/forward.h), the CUDA backend (backend/cuda/), and architecture-
// specific passes (hybrid Qwen3.5). A ForwardPass owns one sequence's cache and scratch.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.h"
#include "core/thread_pool.h"

namespace pelican {

class Model;

class ForwardPass {
public:
    virtual ~ForwardPass() = default;

    // Runs `tokens` at positions pos0 .. pos0 + n - 1 (positions >= pos0 are overwritten, so pos0
    // may rewind). Logits of the last token go to last_logits(); with all_logits non-empty
    // (n * n_vocab floats) every token's logits are written there too. The pool is used by CPU
    // implementations (GPU ones may ignore it).
    // Errors: empty input, token ids outside the vocabulary, pos0 + n > n_ctx, wrong all_logits size.
    virtual Status eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                        std::span<float> all_logits = {}) = 0;
    // [n_vocab] fp32 host memory, valid until the next eval.
    virtual std::span<const float> last_logits() const = 0;
    virtual int64_t n_ctx() const = 0;
    virtual int64_t n_batch() const = 0;
    virtual const Model& model() const = 0;
    virtual size_t kv_bytes() const = 0;
    virtual std::string_view device_name() const { return "cpu"; }
    // Waits until the queued work is done (GPU passes queue work asynchronously; a CPU pass has
    // finished when eval returns). Used to time steps.
    virtual Status synchronize() { return {}; }
};

}  // namespace pelican
