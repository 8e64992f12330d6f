// Fast CPU ops: multithreaded SIMD kernels (AVX-512 / AVX2 picked at run time, scalar fallback)
// with the same semantics as the references in ops/ops.h (see there for shapes and formulas).
// This is the API the model layer calls on the CPU.
//
//   cpu::Weight wq = cpu::Weight::prepare(tensor).value();  // once, at load (check .ok() first)
//   cpu::matmul(wq, x, n_tok, y, scratch, pool);             // per forward; never allocates
//
// Threads: ops that take a ThreadPool split their work over it (the caller is thread 0). The
// pool must not be busy with another job from this thread (no calls from inside its tasks
// unless serial execution is intended: see core/thread_pool.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/ops.h"

namespace pelican::cpu {

// ---- instruction set ---------------------------------------------------------------------------
enum class Isa : uint8_t { kScalar, kAvx2, kAvx512 };
// kAvx2 needs AVX2+FMA+F16C; kAvx512 needs AVX-512 F/BW/VL/VNNI (+F16C).
Isa detected_isa();
// The ISA kernels use: detected_isa(), lowered by the env var PELICAN_CPU_ISA=scalar|avx2|avx512
// (read once) or by set_isa(). Never above detected_isa().
Isa active_isa();
// For tests and benchmarks: use isa (clamped to detected_isa()). Not thread-safe against running
// ops; call it between ops. Weights prepared under another ISA stay valid (kernels follow the
// Weight's layout).
void set_isa(Isa isa);
const char* isa_name(Isa isa);

// ---- matmul weights ----------------------------------------------------------------------------
// Types the CPU matmul accepts as weights.
bool matmul_supported(DType t);

// A matmul weight W [n_out, n_in] prepared for the CPU kernels. Move-only.
// prepare() either keeps a VIEW of the tensor's memory (which must then outlive the Weight) or
// owns a copy: repacked into a kernel-friendly layout (Q4_0 and Q8_0 on AVX-512 VNNI machines:
// 16 rows interleaved so one vpdpbusd serves 16 outputs; the last group is zero-padded) or, with
// own_copy, the GGUF rows as they are.
class Weight {
public:
    enum class Layout : uint8_t {
        kRows,          // GGUF rows as stored (a view, or an owned copy with own_copy)
        kInterleave16,  // 16-row groups, blocks interleaved in 4-byte words (owned copy)
    };

    Weight() = default;
    Weight(Weight&&) noexcept = default;
    Weight& operator=(Weight&&) noexcept = default;

    // w: a 2-D GGUF tensor ne = {n_in, n_out} (ne[2] = ne[3] = 1) of a matmul_supported type,
    // rows dense (nb[0] = block bytes), any row stride nb[1] >= row bytes.
    // allow_repack = false keeps GGUF rows (no interleaving).
    // own_copy = true copies weights that would otherwise stay a view into memory the Weight owns,
    // advised for transparent huge pages (repacked weights always get that). Decode streams every
    // weight byte once per token: on the Zen 4 dev VM huge pages raised F16 decode from ~27 to
    // ~33 GB/s with 2 threads (4 KiB pages cost TLB walks and restart the prefetchers). The cost
    // is a copy at load time (file-backed mmap pages cannot be huge pages).
    // Errors: unsupported type, bad shape, allocation failure (message names the tensor).
    static Expected<Weight> prepare(const Tensor& w, bool allow_repack = true, bool own_copy = false);

    DType type() const { return type_; }
    int64_t n_in() const { return n_in_; }
    int64_t n_out() const { return n_out_; }
    Layout layout() const { return layout_; }
    const void* data() const { return data_; }
    // True when data() is the Weight's own copy (repacked, or own_copy), not a view of the tensor.
    bool owns_data() const { return !owned_.empty(); }
    // Bytes between rows (kRows) or between 16-row groups (kInterleave16).
    int64_t row_stride() const { return row_stride_; }
    // Weight bytes one matmul streams (n_out rows of n_in elements): for GB/s figures.
    int64_t bytes() const { return n_out_ * static_cast<int64_t>(*dtype_row_bytes(type_, n_in_)); }

private:
    DType type_ = DType::F32;
    Layout layout_ = Layout::kRows;
    int64_t n_in_ = 0;
    int64_t n_out_ = 0;
    int64_t row_stride_ = 0;
    const void* data_ = nullptr;
    Buffer owned_;  // repacked copy (empty for views)
};

// Scratch bytes matmul needs for n_tok tokens of n_in inputs (activation quantization), for any
// weight type. Allocate once for the largest n_in and n_tok and reuse.
size_t matmul_scratch_bytes(int64_t n_in, int64_t n_tok);

// y[t, o] = sum_i W[o, i] * x[t, i];  x [n_tok, n_in] fp32, y [n_tok, n_out] fp32 (no aliasing).
// Quantized weights: x is quantized once per call to 8-bit blocks (ops/act_quant.h) and the dot
// products are integer; results equal ref::matmul_act_rounded up to fp32 rounding.
// F32/F16/BF16 weights: fp32 activations, fp32 accumulation (equals ref::matmul up to rounding).
// scratch: >= matmul_scratch_bytes(n_in, n_tok) bytes, 64-byte aligned.
void matmul(const Weight& w, const float* x, int64_t n_tok, float* y, std::span<std::byte> scratch,
            ThreadPool& pool);
// Same with an internal per-thread scratch that grows on demand (allocates only when a call
// needs more than any earlier call on this thread).
void matmul(const Weight& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool);

// Several weights with the same n_in applied to the same activations in ONE parallel pass (e.g.
// Q, K and V, or gate and up): ys[k] [n_tok, ws[k]->n_out()] = x ws[k]^T. Same results as one
// matmul per weight; the activations are quantized once and the pool synchronises once (when
// the quantized weights need different activation formats, e.g. Q4_0 with Q6_K, it simply runs
// them one by one). At most kMaxMultiWeights weights; scratch as for matmul.
inline constexpr size_t kMaxMultiWeights = 8;
void matmul_multi(std::span<const Weight* const> ws, const float* x, int64_t n_tok,
                  std::span<float* const> ys, std::span<std::byte> scratch, ThreadPool& pool);

// ---- normalisation, rope, activations ------------------------------------------------------------
// As ref::rms_norm; rows are split over the pool when pool != nullptr.
void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps,
              NormWeight kind = NormWeight::kPlain, ThreadPool* pool = nullptr);
// As ref::rope_table / ref::rope.
void rope_table(const float* inv_freq, int n_rot, const int64_t* pos, int64_t n_pos, float mscale,
                float* cos_out, float* sin_out);
void rope(float* x, int64_t n_tok, int n_head, int head_dim, int64_t tok_stride, int n_rot, const float* cos,
          const float* sin, RopeLayout layout);
void softmax(float* x, int64_t n_rows, int64_t n);
void silu(const float* x, float* y, int64_t n);
void gelu_tanh(const float* x, float* y, int64_t n);
void gelu_erf(const float* x, float* y, int64_t n);
void swiglu(const float* gate, const float* up, float* y, int64_t n);
// x[i] *= sigmoid(gate[i]) (as ref::sigmoid_gate_mul, in fp32).
void sigmoid_mul(float* x, const float* gate, int64_t n);
// sum of x[i]^2 in fp32 (16 partial sums).
float sum_squares(const float* x, int64_t n);
void add(const float* a, const float* b, float* y, int64_t n);
void mul(const float* a, const float* b, float* y, int64_t n);
void scale(const float* x, float s, float* y, int64_t n);
void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n);

// ---- attention -----------------------------------------------------------------------------------
// As ref::attention (online softmax in fp32), split over (token, KV head) pairs. No allocation.
// head_dim <= kMaxHeadDim.
inline constexpr int kMaxHeadDim = 512;
void attention(const float* q, const void* k_cache, const void* v_cache, int64_t pos0, int64_t n_tok,
               const AttentionParams& p, float* out, ThreadPool& pool);

// A layer's paged K (or V) pool: block b at base + b * block_stride elements; inside a block,
// position j at + j * p.pos_stride_or_default() and KV head h at + h * p.head_stride_or_default().
struct KvPoolView {
    const void* base = nullptr;
    int64_t block_stride = 0;  // elements
};
// One sequence's rows of a batch: q / out rows row0 .. row0 + n_tok - 1 sit at positions
// pos0 .. pos0 + n_tok - 1; its positions 0 .. pos0 + n_tok - 1 are cached in blocks
// block_table[p / block_tokens].
struct PagedSeq {
    int64_t row0 = 0;
    int64_t n_tok = 0;
    int64_t pos0 = 0;
    const int32_t* block_table = nullptr;
};
// attention() for a batch of sequences whose K/V live in pages: q and out [n_rows, n_head,
// head_dim] fp32; every (token, KV head) pair of every sequence is one task of one parallel_for.
// Causal and windowed as attention(). No allocation.
void attention_paged(const float* q, KvPoolView k, KvPoolView v, int block_tokens,
                     std::span<const PagedSeq> seqs, const AttentionParams& p, float* out, ThreadPool& pool);

}  // namespace pelican::cpu
