// The forward pass of the shared dense block (backend/cpu/cpu_executor.h on the CPU) on one CUDA GPU.
//
// Everything is allocated at create(): the KV cache (F16, or F32 when every matrix is F32 so the
// fp32 golden fixtures keep ~1e-6 accuracy), activation scratch for n_batch tokens, workspaces,
// pinned staging memory; nothing is allocated by eval() or the decode calls. All work runs on the
// pass's own stream.
//
// Prefill (eval with n > 1, in n_batch chunks): get_rows -> per layer rms_norm, cuBLAS QKV
//   (prefill_matmul.h), bias, rope_store_kv (q/k norm, rope, K/V rows into the cache),
//   attention_prefill, cuBLAS wo, bias, x += residual_scale * o, rms_norm, cuBLAS gate_up,
//   bias, swiglu, cuBLAS down, bias, residual; output norm + LM head on the last row (every row
//   when all logits are wanted, in groups of kLogitRows).
// Decode (n == 1): one step = get_rows of a token id read from device memory, per layer GEMV QKV
//   with the RMSNorm prologue and bias epilogue, rope_store_kv, attention_decode (split-KV),
//   GEMV wo with the residual epilogue, GEMV gate_up with prologue + glu, GEMV down with the
//   residual; the final norm fused into the LM-head GEMV prologue. The step is captured ONCE in
//   a CUDA graph at create() (it reads the token id and position from device memory) and
//   replayed for every token; the inputs reach the device with one cudaMemcpyAsync from a pinned
//   ring slot before the launch (a slot is reused only after its copy completed: an event each).
// Host synchronisation: only where the host needs a result: last_logits() (copies [n_vocab]
//   floats on first use after an eval), all_logits, the 4-byte token of decode_sample /
//   sample_last, and synchronize(). decode_no_logits never waits (bench tg syncs once at the end).
// Errors: bad ids / positions / sizes come back as Status with a message; a failing CUDA call
//   aborts (backend/cuda/cuda_check.h): a broken device context cannot be recovered.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include <cuda_runtime_api.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_model.h"
#include "backend/cuda/host_staging.h"
#include "backend/cuda/prefill_matmul.h"
#include "backend/cuda/sampling.h"
#include "model/forward.h"

namespace pelican::cuda {

struct CudaForwardOptions {
    bool use_graph = true;         // false: decode steps launch their kernels one by one (tests)
    std::optional<DType> kv_type;  // F16 or F32; default: F32 when every matrix is F32, else F16
};

class CudaForward final : public ForwardPass {
public:
    // With weights already on the GPU (an Engine's), shared by every pass of that engine.
    static Expected<std::unique_ptr<CudaForward>> create(std::shared_ptr<const GpuModel> weights,
                                                         const ForwardOptions& opt,
                                                         const CudaForwardOptions& copt = {});
    // Uploads the model's weights for this pass alone (the model must be loaded with
    // allow_repack = false).
    static Expected<std::unique_ptr<CudaForward>> create(const Model& model, const ForwardOptions& opt,
                                                         const CudaForwardOptions& copt = {});
    ~CudaForward() override;
    CudaForward(const CudaForward&) = delete;
    CudaForward& operator=(const CudaForward&) = delete;

    // ForwardPass. The pool is not used. eval returns once the work is queued (all_logits: once
    // they are on the host).
    Status eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                std::span<float> all_logits = {}) override;
    // Copies the last token's logits to pinned host memory on the first call after an eval
    // (waits for the GPU); empty before the first eval.
    std::span<const float> last_logits() const override;
    int64_t n_ctx() const override { return n_ctx_; }
    int64_t n_batch() const override { return n_batch_; }
    const Model& model() const override { return model_; }
    size_t kv_bytes() const override { return kv_k_.size() + kv_v_.size(); }
    std::string_view device_name() const override { return "cuda"; }
    Status synchronize() override;

    // One decode step of `token` at `pos` (its K/V row written there; positions > pos are
    // invalid afterwards), then the next token sampled on the GPU from its logits; only that
    // 4-byte id is read back (the one host sync). penalty_ids: the penalty window (repeats count;
    // ids outside the vocabulary are ignored, as the CPU sampler does; at most n_ctx of them);
    // u: the uniform draw in [0, 1) (unused when greedy). last_logits() then gives the step's
    // logits as computed (sampling works on a copy).
    // Errors: token outside the vocabulary, pos outside [0, n_ctx), parameters the GPU does not
    // sample exactly (gpu_sampling_exact), u outside [0, 1), no finite logit.
    Expected<int32_t> decode_sample(int32_t token, int64_t pos, const GpuSampleParams& p,
                                    std::span<const int32_t> penalty_ids, float u);
    // Samples from the logits of the last eval / decode step (e.g. after the prompt).
    // Errors: no eval yet, and as decode_sample.
    Expected<int32_t> sample_last(const GpuSampleParams& p, std::span<const int32_t> penalty_ids, float u);
    // One decode step without sampling and without copying logits (llama-bench's tg): no host
    // sync; call synchronize() after the last one. Errors: token or pos out of range.
    Status decode_no_logits(int32_t token, int64_t pos);

    DType kv_type() const { return kv_type_; }
    const GpuModel& weights() const { return *gm_; }
    bool uses_graph() const { return step_exec_ != nullptr; }

    // ForwardPass's device hooks, through the functions above.
    int64_t decode_weight_bytes() const override { return static_cast<int64_t>(gm_->decode_read_bytes()); }
    int kv_elem_bytes() const override { return kv_type_ == DType::F32 ? 4 : 2; }
    std::string_view kv_type_name() const override { return dtype_name(kv_type_); }
    Status decode_no_logits(int32_t token, int64_t pos, ThreadPool&) override {
        return decode_no_logits(token, pos);
    }
    bool samples_on_device(const StepSampling& p) const override;
    Expected<int32_t> sample_last(const StepSampling& p, std::span<const int32_t> window, float u) override;
    Expected<int32_t> decode_sample(int32_t token, int64_t pos, const StepSampling& p,
                                    std::span<const int32_t> window, float u) override;

    static constexpr int kLogitRows = 32;  // LM-head rows per group when every row's logits are wanted
    static constexpr int kRing = 64;       // pinned staging slots for decode inputs

private:
    // The device-side inputs of one step, staged through pinned memory.
    struct StepInput {
        int32_t token = 0;
        int32_t pos = 0;
        float u = 0.0f;
        int32_t pad = 0;
    };

    CudaForward(std::shared_ptr<const GpuModel> gm, int64_t n_ctx, int64_t n_batch, DType kv_type,
                bool use_graph);
    Status init();
    KvView kv(int il) const;
    // Rope + KV-store and attention arguments of layer il for n_tok tokens at *pos (decode and
    // prefill share them; callers add what differs: attention workspace).
    RopeStoreArgs rope_args(int il, int n_tok, const int32_t* pos) const;
    AttnArgs attn_args(int il, int n_tok, const int32_t* pos) const;
    Status check_step(int32_t token, int64_t pos) const;
    Status check_sampling(const GpuSampleParams& p, std::span<const int32_t> penalty_ids, float u) const;
    void stage_step(int32_t token, int64_t pos, float u);  // ring slot -> step_in_ (async)
    void stage_penalties(std::span<const int32_t> ids, int* n_out);
    void enqueue_step();  // the decode step's kernels (captured into step_exec_)
    void launch_step();   // graph replay, or enqueue_step when graphs are off
    void enqueue_sample(const GpuSampleParams& p, int n_penalty);
    Expected<int32_t> sample_and_read(const GpuSampleParams& p, int n_penalty);
    void prefill_chunk(int64_t n, int64_t pos0, const int32_t* ids_dev, const int32_t* pos_dev,
                       float* all_logits);
    void prefill_layer(int il, int64_t n, int64_t pos0, const int32_t* pos_dev);

    std::shared_ptr<const GpuModel> gm_;
    const Model& model_;
    const ModelHParams& hp_;
    const int64_t n_ctx_, n_batch_;
    const DType kv_type_;
    const bool want_graph_;
    int64_t qkv_w_ = 0;     // q_dim + 2 * kv_dim
    int64_t n_chunks_ = 0;  // most n_batch chunks of one eval

    cudaStream_t stream_ = nullptr;
    DeviceBuffer kv_k_, kv_v_;  // [n_layer, n_ctx, kv_dim] of kv_type_
    DeviceBuffer scratch_;
    float* x_ = nullptr;              // [n_batch, n_embd] residual stream
    float* xn_ = nullptr;             // [n_batch, n_embd] normed rows
    float* qkv_ = nullptr;            // [n_batch, qkv_w_] q | k | v per token
    float* attn_ = nullptr;           // [n_batch, q_dim]
    float* proj_ = nullptr;           // [n_batch, n_embd] o_proj / down output (prefill)
    float* gu_ = nullptr;             // [n_batch, 2 * n_ff] gate | up per token
    float* act_ = nullptr;            // [n_batch, n_ff] swiglu output
    float* tmp_ = nullptr;            // [n_batch, widest split part] (models with split QKV / gate-up)
    float* logits_ = nullptr;         // [logit_rows, n_vocab]; row 0 = the last token's logits
    float* sample_logits_ = nullptr;  // [n_vocab] the sampler's working copy
    void* attn_ws_ = nullptr;
    void* sample_ws_ = nullptr;
    // Device inputs.
    DeviceBuffer io_;
    StepInput* step_in_ = nullptr;    // the decode step's token, position and uniform
    int32_t* out_tok_ = nullptr;      // sampled token
    int32_t* ids_dev_ = nullptr;      // [n_ctx] prefill tokens
    int32_t* chunk_pos_ = nullptr;    // [n_chunks] position of each prefill chunk's first token
    int32_t* penalty_dev_ = nullptr;  // [n_ctx] penalty window
    float* rope_table_ = nullptr;     // [n_ctx, rope_dim] (cos, sin) * mscale pairs (rope_table_build)
    // Pinned host staging.
    PinnedHost ring_pin_, prefill_pin_, penalty_pin_, out_pin_, logits_pin_;
    cudaEvent_t ring_ev_[kRing] = {};
    cudaEvent_t prefill_ev_ = nullptr, penalty_ev_ = nullptr;
    int ring_next_ = 0;

    PrefillMatmul mm_;
    cudaGraphExec_t step_exec_ = nullptr;
    // Sampling graph, captured once the same (parameters, window size) repeat on two calls.
    cudaGraphExec_t sample_exec_ = nullptr;
    GpuSampleParams sample_key_{}, seen_key_{};
    int sample_key_n_ = -1, seen_key_n_ = -1;

    bool have_logits_ = false;                // an eval/decode step has produced logits
    mutable bool host_logits_valid_ = false;  // logits_pin_ holds them
};

}  // namespace pelican::cuda
