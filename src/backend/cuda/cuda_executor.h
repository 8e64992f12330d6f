// The CUDA Executor (runtime/executor.h) of the dense Llama-family block on one GPU: a step runs
// rows of many sequences at once, every matmul over all rows (one read of the weights per step),
// K/V rows scattered into the sequences' pages (cuda_memory.h) and attention read through their
// block tables (attention_paged.h). The block, per layer, as the CPU executor's:
//
//   x = embd[tokens] * embd_scale
//   h = rms_norm(x) -> q | k | v (+bias) -> [q/k norm] -> rope -> K/V rows into pages
//   x += residual_scale * o_proj(paged attention(q))
//   x += residual_scale * down(silu(gate(rms_norm(x))) * up(rms_norm(x)))
//   logits[out_rows] = output(rms_norm(x[out_rows])) * logit_scale
//
// Matmuls: a step of at most gemv_rows() rows takes the GEMV with the norm prologue and the bias /
// residual / SwiGLU epilogues fused (gemv.h: weights streamed once for all rows); a larger step runs
// rms_norm + qmatmul (qmatmul.h: tensor cores, the Q4_0 / Q8_0 / Q4_K / Q6_K weights dequantized in
// registers) or cuBLAS for float weights (prefill_matmul.h).
//
// Host side of a step: the batch is checked once (split_batch), every sequence's positions are made
// writable (prepare_write: copy on write through the memory's storage, queued on this executor's
// stream), then token ids, positions, pool rows, block tables and out rows go to the device in one
// copy from pinned memory (double-buffered: the host fills one half while the previous step's copy
// may still read the other). Logits come back only when StepOutputs asks for them; the device
// copy stays in device_logits() either way (a device sampler reads it there).
// CUDA graphs: a step of at most gemv_rows() rows (decode, short verification) is captured once per
// (memory, rows, out rows, KV bucket) and replayed: its block tables are staged at the bucket's width and
// attention is sized for the bucket (the longest sequence rounded up to a power of two, >= 256), so one
// graph serves every step of that shape while the sequences grow inside the bucket. At most kMaxGraphs
// are kept; other steps launch eagerly.
// Nothing is allocated by step() (a graph's first capture aside); the scratch is sized at create() for
// max_batch_tokens rows and the staging for max_seqs sequences of max_seq_tokens (the largest memory
// create_memory may make). Errors: bad batches come back as Status (nothing committed); a failing CUDA call
// aborts (cuda_check.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_memory.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_model.h"
#include "backend/cuda/host_staging.h"
#include "backend/cuda/prefill_matmul.h"
#include "backend/cuda/sampling_batch.h"
#include "model/hparams.h"
#include "runtime/executor.h"

namespace pelican::cuda {

struct CudaExecutorOptions {
    int64_t max_batch_tokens = 512;  // most rows per step
    int32_t max_seqs = 256;          // most sequences of one memory (and of one step)
    int64_t max_seq_tokens = 4096;   // most positions of one sequence (the rope table's length)
    std::optional<DType> kv_type;    // F16 or F32; default: F32 when every matrix is F32, else F16
    bool use_graphs = true;          // false: every step launches its kernels one by one (tests)
};

class CudaExecutor final : public Executor {
public:
    static constexpr int kQuantGemvRows = 4;  // quantized models: steps of more rows take qmatmul
    // Errors: a hybrid model (not yet on this executor), bad sizes, out of GPU memory.
    static Expected<std::unique_ptr<CudaExecutor>> create(std::shared_ptr<const GpuModel> weights,
                                                          const CudaExecutorOptions& opt);
    ~CudaExecutor() override;
    CudaExecutor(const CudaExecutor&) = delete;
    CudaExecutor& operator=(const CudaExecutor&) = delete;

    // Memory in this GPU's memory. Errors: more sequences or longer ones than the executor was
    // made for, bad sizes, out of GPU memory.
    Expected<std::unique_ptr<SequenceMemory>> create_memory(const MemoryOptions& opt) override;
    // Queues the step; returns when its outputs are on the host (or at once when none were asked
    // for: synchronize() then waits). The pool is not used.
    Status step(const Batch& batch, SequenceMemory& mem, const StepOutputs& out, ThreadPool& pool) override;
    // Greedy, or 1 <= top_k <= kMaxGpuTopK (sampling.h: gpu_sampling_exact).
    bool samples_on_device(const StepSampling& p) const override;
    int64_t max_batch_tokens() const override { return max_tokens_; }
    const Model& model() const override { return model_; }
    std::string_view device_name() const override { return "cuda"; }

    // Waits for the queued work.
    Status synchronize() override;
    // Rows up to which a step takes the fused GEMVs.
    int gemv_rows() const { return gemv_rows_; }
    DType kv_type() const { return kv_type_; }
    // [out rows of the last step, n_vocab] fp32 on the device.
    const float* device_logits() const { return logits_; }
    cudaStream_t stream() const { return stream_; }

private:
    CudaExecutor(std::shared_ptr<const GpuModel> gm, const CudaExecutorOptions& opt, DType kv_type);
    Status init();
    // The step's inputs to the device (pinned half `half` -> io_); returns nothing, records stage_ev_.
    void stage(const Batch& b, const SequenceMemory& mem, int64_t table_stride);
    struct GraphKey;
    void forward(int64_t n, int64_t n_out, const CudaMemoryStorage& st, int64_t table_stride, int64_t max_kv);
    void layer_gemv(int il, int n, const KvView& kv, int64_t table_stride, int64_t max_kv);
    void layer_gemm(int il, int64_t n, const KvView& kv, int64_t table_stride, int64_t max_kv);
    void attention(int64_t n, const KvView& kv, int64_t table_stride, int64_t max_kv, const float* q,
                   int64_t q_stride);
    void head(int64_t n_out);
    void matmul(const GpuMatrix& w, const float* x, int64_t n, float* y, int64_t y_stride);
    void matmul_parts(const std::vector<GpuPart>& parts, const float* x, int64_t n, float* y, int64_t width);
    // Replays the graph of this step's shape, capturing it after an eager run the first time.
    void launch_graphed(const GraphKey& key, const CudaMemoryStorage& st, int64_t table_stride);
    // StepOutputs::sample rows the GPU samples exactly (errors name the row).
    Status check_sample_rows(const StepOutputs& out) const;
    // Queues sampling of every out row from logits_ (rewritten in place) and the tokens' copy to tokens_pin_.
    void sample_rows(const StepOutputs& out);

    std::shared_ptr<const GpuModel> gm_;
    const Model& model_;
    const ModelHParams& hp_;
    const int64_t max_tokens_;
    const int32_t max_seqs_;
    const int64_t max_seq_tokens_;
    const DType kv_type_;
    int64_t qkv_w_ = 0;       // q_dim + 2 * kv_dim
    int64_t max_blocks_ = 0;  // block-table entries of one sequence staged (smallest block size: 1)
    int gemv_rows_ = 1;
    int32_t block_tokens_ = 16;  // of the memory the current step runs on
    std::vector<SeqRun> runs_;   // [<= max_tokens] this step's sequences (capacity reserved)
    const bool use_graphs_;
    struct GraphKey {
        const void* kv;  // the memory's KV pages (a graph holds their addresses)
        int32_t n_blocks;
        int64_t n, n_out, max_kv;
        int32_t block_tokens;
        bool fused_head;
        bool operator==(const GraphKey&) const = default;
    };
    static constexpr size_t kMaxGraphs = 64;
    std::vector<std::pair<GraphKey, cudaGraphExec_t>> graphs_;

    cudaStream_t stream_ = nullptr;
    DeviceBuffer scratch_;
    float* x_ = nullptr;       // [T, n_embd] residual stream
    float* xn_ = nullptr;      // [T, n_embd] normed rows
    float* qkv_ = nullptr;     // [T, qkv_w_]
    float* attn_ = nullptr;    // [T, q_dim]
    float* proj_ = nullptr;    // [T, n_embd]
    float* gu_ = nullptr;      // [T, 2 * n_ff]
    float* act_ = nullptr;     // [T, n_ff]
    float* tmp_ = nullptr;     // [T, widest split part]
    float* logits_ = nullptr;  // [T, n_vocab]
    void* attn_ws_ = nullptr;
    size_t attn_ws_bytes_ = 0;
    int64_t max_seq_rows_ = 1;  // most rows of one sequence in the current step
    // The current step's out rows are rows 0 .. n-1, take the GEMV and no hidden rows are wanted: the
    // final norm is the LM-head GEMV's prologue (no gather, no separate norm).
    bool fused_head_ = false;
    float* rope_table_ = nullptr;  // [max_seq_tokens, rope_dim]
    // Device inputs of a step (one copy from pinned memory): ids, pos, slot, row_table [T] int32,
    // out_rows [T], tables [min(T, max_seqs), max_blocks_] (only the rows the step needs are copied).
    DeviceBuffer io_;
    int32_t *ids_ = nullptr, *pos_ = nullptr, *slot_ = nullptr, *row_table_ = nullptr, *out_rows_ = nullptr,
            *tables_ = nullptr;
    size_t io_bytes_ = 0;
    PinnedHost pin_;  // two halves of io_bytes_
    int half_ = 0;
    cudaEvent_t stage_ev_[2] = {};
    PrefillMatmul mm_;
    void* qmm_ws_ = nullptr;  // qmatmul workspace
    size_t qmm_ws_bytes_ = 0;

    // Sampling stage (sampling_batch.h): per out row its SampleRow and penalty window, staged through
    // sample_pin_ in one copy into sample_io_; tokens_dev_ [T] on the device.
    static constexpr int64_t kWindowIdsPerRow = 1024;  // penalty ids one row may carry
    SampleBatchLimits sample_limits_;
    DeviceBuffer sample_io_;
    SampleRow* rows_dev_ = nullptr;  // [T]
    int32_t* off_dev_ = nullptr;     // [T + 1]
    int32_t* win_dev_ = nullptr;     // [T * kWindowIdsPerRow]
    int32_t* tokens_dev_ = nullptr;  // [T]
    void* sample_ws_ = nullptr;
    PinnedHost sample_pin_, tokens_pin_;
    cudaEvent_t sample_ev_ = nullptr;
};

}  // namespace pelican::cuda
