// The interface every forward-pass implementation offers to the runtime (Session, bench, eval):
// the CPU dense block (runtime/sequence_pass.h over backend/cpu/cpu_executor.h), the CUDA backend
// (backend/cuda/), and architecture- specific passes (hybrid Qwen3.5). A ForwardPass owns one sequence's
// cache and scratch.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.h"
#include "core/thread_pool.h"

namespace pelican {

class Model;

// Sampling parameters a pass may apply next to its logits (a GPU pass: no [n_vocab] copy to the
// host). The same meaning as runtime/sampler.h's SamplerParams; the uniform draw and the penalty
// window come from the host sampler, so a seed gives the host's tokens.
struct StepSampling {
    float temperature = 0.0f;  // 0 = greedy argmax (lowest id on ties)
    int32_t top_k = 0;
    float top_p = 1.0f;
    float min_p = 0.0f;
    float repetition_penalty = 1.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
};

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

    // ---- what a device pass does differently (the defaults describe a CPU pass) ----
    // Weight bytes one decode step reads as this pass stores them (a GPU pass knows its own
    // layout, e.g. k of the E routed experts), or -1: count them from the model.
    virtual int64_t decode_weight_bytes() const { return -1; }
    // Bytes of one cached K or V element, and its type's name.
    virtual int kv_elem_bytes() const { return 4; }
    virtual std::string_view kv_type_name() const { return "f32"; }
    // One decode step whose logits stay where they are (bench's tg): a GPU pass skips the copy and
    // the host sync; call synchronize() after the last one.
    virtual Status decode_no_logits(int32_t token, int64_t pos, ThreadPool& pool) {
        return eval(std::span<const int32_t>(&token, 1), pos, pool);
    }
    // True when sample_last / decode_sample apply `p` exactly as the host sampler would.
    virtual bool samples_on_device(const StepSampling& p) const { return false; }
    // Samples from the last eval's logits; u: the uniform draw in [0, 1) (unused when greedy);
    // window: the penalty window. Only where samples_on_device.
    virtual Expected<int32_t> sample_last(const StepSampling& p, std::span<const int32_t> window, float u) {
        return make_error("this forward pass does not sample on its device");
    }
    // One decode step of `token` at `pos`, then the next token sampled from its logits.
    virtual Expected<int32_t> decode_sample(int32_t token, int64_t pos, const StepSampling& p,
                                            std::span<const int32_t> window, float u) {
        return make_error("this forward pass does not sample on its device");
    }
};

}  // namespace pelican
