// The CUDA Executor (runtime/executor.h) on one GPU: a step runs rows of many sequences at once, every
// matmul over all rows (one read of the weights per step), K/V rows scattered into the sequences' pages
// (cuda_memory.h) and attention read through their block tables (attention_paged.h). Each layer runs by
// its kinds (hp.layer[il], model/layer_kind.h), as the CPU executor's:
//
//   x = embd[tokens] * embd_scale
//   per layer (RMSNorms of weight w, or 1 + w when hp.norm_weight is kOnePlus):
//   h = rms_norm(x) -> mixer -> x += residual_scale * mixer out
//   h = rms_norm(x) -> FFN -> x += residual_scale * FFN out (MoE: x += FFN out)
//   logits[out_rows] = output(rms_norm(x[out_rows])) * logit_scale
//
//   mixers (cuda_executor_layers.cpp: attention; cuda_executor_hybrid.cpp: Gated DeltaNet):
//   attention: q | k | v (+bias) -> [q/k norm] -> rope -> K/V rows into pages -> paged attention ->
//     o_proj (+bias)
//   gated attention: the same with [q | k | v | gate] and the attention output
//     * sigmoid(gate) before o_proj
//   Gated DeltaNet: in_proj [Q|K|V | z | b | a] -> conv1d_silu_runs (each sequence's conv state from
//     its memory entry) -> deltanet_step in runs mode (one launch for every sequence's rows; the state
//     after each of a short run's tokens into the ring's entries, so truncate within the checkpoints
//     is exact) or, for a prompt run beyond the checkpoints and of kDnChunkRows+ rows, deltanet_chunked on
//     that sequence alone (its state after the run only) -> out_proj
//   FFNs:
//   SwiGLU: down(silu(gate(h)) * up(h)) (+biases)
//   MoE (cuda_executor_hybrid.cpp): router -> top-k (renormalised) -> routed experts (+ the shared
//     expert, a stacked slot or its own SwiGLU weighted by sigmoid(gate)): expert-slot GEMVs for GEMV
//     steps, else the slots grouped by expert across the whole step (each chosen expert's weights read
//     once per group of 8 rows); x += the weighted sum
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
    // A run of more rows than the memory's checkpoints and at least this many takes the chunked DeltaNet
    // form (its state after the run only); every other run the token-by-token kernel, keeping each
    // token's state when the run is within the checkpoints (as the CPU executor), else the last one.
    static constexpr int64_t kDnChunkRows = 32;
    // Errors: bad sizes (models with Gated DeltaNet layers: at most 65535 rows and sequences per step),
    // out of GPU memory.
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
    // Layer il over the step's n rows by its kinds: norm -> mixer -> residual -> norm -> FFN -> residual
    // (a GEMM step norms into xn_ first; a GEMV step takes the norm as the projections' prologue).
    void layer(int il, int64_t n, const CudaMemoryStorage& st, int64_t table_stride, int64_t max_kv);
    // Mixer::kAttention / kGatedAttention: x_ += residual_scale * (o_proj(attention [* sigmoid(gate)]) +
    // b_o).
    void attention_block(const GpuLayer& L, int64_t n, const KvView& kv, int64_t table_stride,
                         int64_t max_kv);
    // Mixer::kDeltaNet over recurrent slot r: x_ += residual_scale * out_proj(DeltaNet).
    void deltanet_block(const GpuLayer& L, int r, int64_t n, const CudaMemoryStorage& st);
    // Ffn::kMoe: x_ += the routed experts' weighted sum (+ the gated shared expert).
    void moe_block(const GpuLayer& L, int64_t n);
    // y = [gate | up] parts (+ b_gate_up) -> silu(gate) * up -> down (+ b_down) of the layer input (x_ with
    // the norm prologue in a GEMV step, else xn_); when residual, x_ += residual_scale * that instead.
    void swiglu_block(const std::vector<GpuPart>& gate_up, const GpuMatrix& down, const float* norm,
                      const float* b_gate_up, const float* b_down, int64_t n, float* y, bool residual);
    // y [n, width] = parts of the layer input (+ bias [width]): GEMVs of x_ with the norm prologue
    // (n <= gemv_rows_), else matmuls of xn_ (the caller normed it).
    void project(const std::vector<GpuPart>& parts, const float* norm, int64_t n, float* y, int64_t width,
                 const float* bias = nullptr);
    // x_ += residual_scale * (in W^T + bias).
    void out_residual(const GpuMatrix& w, const float* in, int64_t n, const float* bias = nullptr);
    // The step's recurrent bookkeeping (recurrent_): per run its input entry, per row its output entry
    // (staged with the inputs), and the runs the chunked form serves.
    void plan_states(const SequenceMemory& mem, int32_t* run_row0, int32_t* run_conv_in, int32_t* run_rec_in,
                     int32_t* row_state_out);
    // The step's inputs to the device (pinned half `half` -> io_); returns nothing, records stage_ev_.
    void stage(const Batch& b, const SequenceMemory& mem, int64_t table_stride);
    struct GraphKey;
    void forward(int64_t n, int64_t n_out, const CudaMemoryStorage& st, int64_t table_stride, int64_t max_kv);
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
    int64_t qkv_w_ = 0;       // the widest mixer input projection of the layers (q | k | v [| gate], in_proj)
    int64_t ff_ = 0;          // n_ff, or the MoE shared expert's when wider
    int64_t max_blocks_ = 0;  // block-table entries of one sequence staged (smallest block size: 1)
    int gemv_rows_ = 1;
    int32_t block_tokens_ = 16;  // of the memory the current step runs on
    std::vector<SeqRun> runs_;   // [<= max_tokens] this step's sequences (capacity reserved)
    // Per layer: its KV slot (attention layers) and recurrent slot (DeltaNet layers), -1 for neither.
    std::vector<int> kv_slot_, rec_slot_;
    bool recurrent_ = false;      // some layer is Gated DeltaNet: steps plan and commit recurrent states
    bool norm_one_plus_ = false;  // hp.norm_weight is kOnePlus: every RMSNorm weight is 1 + w
    // The per-layer part of the shape of every memory this executor makes (create_memory adds the pool
    // size and the state entries); step() refuses a memory whose shape differs.
    CudaMemoryShape layer_shape_;
    // Recurrent steps: per run the state entries the chunked form copies from / into (-1: not chunked),
    // and how many states each run commits.
    std::vector<int32_t> chunk_in_, chunk_out_, n_states_;
    bool any_rec_run_ = false;  // some run of the step takes the token-by-token DeltaNet kernel
    const bool use_graphs_;
    struct GraphKey {
        uint64_t memory;  // CudaMemoryStorage::id() (fixes its pages, block size and state entries)
        int64_t n, n_out, max_kv;
        bool fused_head;
        int64_t n_runs;  // the runs-mode DeltaNet grid (0 for models without DeltaNet layers)
        bool operator==(const GraphKey&) const = default;
    };
    static constexpr size_t kMaxGraphs = 64;
    std::vector<std::pair<GraphKey, cudaGraphExec_t>> graphs_;

    cudaStream_t stream_ = nullptr;
    DeviceBuffer scratch_;
    float* x_ = nullptr;       // [T, n_embd] residual stream
    float* xn_ = nullptr;      // [T, n_embd] normed rows
    float* qkv_ = nullptr;     // [T, qkv_w_] the mixer's input projections
    float* attn_ = nullptr;    // [T, q_dim]
    float* proj_ = nullptr;    // [T, n_embd]
    float* gu_ = nullptr;      // [T, 2 * ff_] split gate | up
    float* act_ = nullptr;     // [T, ff_]
    float* tmp_ = nullptr;     // [T, widest split part]
    float* logits_ = nullptr;  // [T, n_vocab]
    // DeltaNet and MoE scratch (init, when a layer has the kind), T = max_batch_tokens, ko = experts per
    // token incl. a stacked shared one.
    int64_t w_dn_ = 0;         // in_proj output width
    float* conv_ = nullptr;    // [T, conv_dim]
    float* core_ = nullptr;    // [T, value_dim]
    float* router_ = nullptr;  // [T, n_expert + 1]
    int32_t* eids_ = nullptr;  // [T, ko] expert ids
    float* ewts_ = nullptr;    // [T, ko] expert weights
    float* eact_ = nullptr;    // [T * ko, n_ff_expert] (GEMV steps)
    float* eout_ = nullptr;    // [T * ko, n_embd]
    float* sout_ = nullptr;    // [T, n_embd] shared expert output (not stacked)
    int32_t *group_expert_ = nullptr, *slot_row_ = nullptr, *row_slot_ = nullptr;  // moe_group_slots
    float *xg_ = nullptr, *eactg_ = nullptr, *eoutg_ = nullptr;                    // grouped rows
    void* dn_ws_ = nullptr;                                                        // deltanet_chunked scratch
    void* attn_ws_ = nullptr;
    size_t attn_ws_bytes_ = 0;
    int64_t max_seq_rows_ = 1;  // most rows of one sequence in the current step
    // The current step's out rows are rows 0 .. n-1, take the GEMV and no hidden rows are wanted: the
    // final norm is the LM-head GEMV's prologue (no gather, no separate norm).
    bool fused_head_ = false;
    float* rope_table_ = nullptr;  // [max_seq_tokens, rope_dim]
    // Device inputs of a step (one copy from pinned memory): ids, pos, slot, row_table [T] int32,
    // out_rows [T], the recurrent plan (run_row0 [T + 1], run_conv_in [T], run_rec_in [T],
    // row_state_out [T]; recurrent models), tables [min(T, max_seqs), max_blocks_] (only the rows the
    // step needs are copied).
    static constexpr size_t kIoArrays = 9;  // [T] arrays before the tables (run_row0's extra one aside)
    DeviceBuffer io_;
    int32_t *ids_ = nullptr, *pos_ = nullptr, *slot_ = nullptr, *row_table_ = nullptr, *out_rows_ = nullptr,
            *tables_ = nullptr;
    int32_t *run_row0_ = nullptr, *run_conv_in_ = nullptr, *run_rec_in_ = nullptr, *row_state_out_ = nullptr;
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
