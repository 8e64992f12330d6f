// Scalar reference ops: the ground truth that the fast CPU kernels (backend/cpu/cpu_ops.h) and
// the CUDA kernels are tested against. Straightforward loops, double accumulation where a sum is
// long; no threads, no SIMD. The fast API in backend/cpu/cpu_ops.h has the same semantics.
//
// Conventions (all ops):
//   * Shapes are written slowest dimension first: x [n_tok, n_in] means x[t * n_in + i].
//   * Activations, norms weights, tables and outputs are dense fp32 unless stated.
//   * Element-wise ops allow y == x (in place); other aliasing is not allowed unless stated.
//   * Preconditions are asserted, not reported: the model layer checks shapes once at load time.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"

namespace pelican {

// Which pairs of a head's first n_rot dims rotate together.
enum class RopeLayout : uint8_t {
    kInterleaved,  // GGUF llama "normal" / GPT-J: pair i is (x[2i], x[2i+1]), i < n_rot/2
    kNeox,         // HF rotate_half / NeoX / qwen: pair i is (x[i], x[i + n_rot/2])
};

// How rms_norm applies its weight.
enum class NormWeight : uint8_t {
    kPlain,    // y = x / rms * w
    kOnePlus,  // y = x / rms * (1 + w)   (zero-centred weights: Qwen3.5, gemma)
};

// Multi-head attention over a KV cache with grouped-query heads (GQA).
//   q    [n_tok, n_head, head_dim] fp32 (dense), token t sits at absolute position pos0 + t
//   K, V caches [n_ctx, n_kv_head, head_dim] in kv_type (F32 or F16); element (p, h, d) is at
//        p * pos_stride + h * head_stride + d (strides in ELEMENTS; 0 = the dense default:
//        pos_stride = n_kv_head * head_dim, head_stride = head_dim). Rows 0 .. pos0+n_tok-1 must
//        be filled (the caller writes this step's K/V rows before calling).
//   out  [n_tok, n_head, head_dim] fp32 (dense)
// Query head h uses KV head h / (n_head / n_kv_head). Causal: token t attends to positions
// max(0, pos - window + 1) .. pos where pos = pos0 + t (window 0 = unlimited).
// score = scale * q.k (scale = 1/sqrt(head_dim) normally, granite's attention_multiplier else).
struct AttentionParams {
    int n_head = 0;
    int n_kv_head = 0;  // divides n_head
    int head_dim = 0;
    float scale = 0.0f;
    DType kv_type = DType::F32;  // F32 or F16
    int64_t pos_stride = 0;      // elements between cache positions (0 = n_kv_head * head_dim)
    int64_t head_stride = 0;     // elements between KV heads (0 = head_dim)
    int64_t window = 0;          // sliding window in positions (0 = full causal)

    int64_t pos_stride_or_default() const { return pos_stride ? pos_stride : int64_t{n_kv_head} * head_dim; }
    int64_t head_stride_or_default() const { return head_stride ? head_stride : head_dim; }
};

namespace ref {

// ---- matmul ---------------------------------------------------------------------------------
// y[t, o] = sum_i W[o, i] * x[t, i]
//   w  2-D GGUF tensor ne = {n_in, n_out} (row o = n_in elements of any dtype with a to_float
//      conversion; rows dense, row stride nb[1])
//   x  [n_tok, n_in] fp32, y [n_tok, n_out] fp32. Weight rows are dequantized to fp32 exactly as
//      core/dequantize does; products are summed in double.
void matmul(const Tensor& w, const float* x, int64_t n_tok, float* y);

// The exact-arithmetic twin of the fast integer kernels: as matmul, but x is first rounded the
// way the fast kernels quantize activations (see act_quant.h: 32-blocks for Q4_0/Q8_0 weights,
// 256-blocks for K-quant weights; other weight types use x unchanged). The fast kernels agree
// with this up to fp32 rounding of the scale arithmetic.
void matmul_act_rounded(const Tensor& w, const float* x, int64_t n_tok, float* y);

// ---- normalisation ----------------------------------------------------------------------------
// Per row r of x [n_rows, n]: y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w'  where
// w' = w (kPlain) or 1 + w (kOnePlus); w [n] (nullptr: w' = 1). y may equal x.
void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps,
              NormWeight kind = NormWeight::kPlain);

// ---- rotary position embedding ----------------------------------------------------------------
// Table rows for n_pos positions: for p < n_pos, i < n_rot/2,
//   angle = float(pos[p]) * inv_freq[i]   (fp32 product, as HF computes it)
//   cos_out[p, i] = cos(angle) * mscale,  sin_out[p, i] = sin(angle) * mscale
// inv_freq [n_rot/2] already includes any llama3 / yarn / linear scaling (model layer); mscale is
// yarn's attention factor (1 otherwise). pos [n_pos] absolute positions.
void rope_table(const float* inv_freq, int n_rot, const int64_t* pos, int64_t n_pos, float mscale,
                float* cos_out, float* sin_out);

// Rotates, in place, the first n_rot dims (even, <= head_dim) of every head of
// x [n_tok, n_head, head_dim] (token t starts at x + t * tok_stride; heads dense within a token)
// with the table rows cos/sin [n_tok, n_rot/2] of each token's position:
//   (a, b) <- (a * cos - b * sin, a * sin + b * cos) for each pair (a, b) of the layout.
// Dims n_rot .. head_dim are unchanged (partial rotary).
void rope(float* x, int64_t n_tok, int n_head, int head_dim, int64_t tok_stride, int n_rot, const float* cos,
          const float* sin, RopeLayout layout);

// ---- activations and element-wise ops ----------------------------------------------------------
// Per row of x [n_rows, n], in place: x = exp(x - max) / sum(exp(x - max)). -inf entries give 0
// (a row of all -inf gives all 0).
void softmax(float* x, int64_t n_rows, int64_t n);
void silu(const float* x, float* y, int64_t n);       // y = x / (1 + exp(-x))
void gelu_tanh(const float* x, float* y, int64_t n);  // 0.5x(1+tanh(√(2/π)(x+0.044715x³)))
void gelu_erf(const float* x, float* y, int64_t n);   // 0.5x(1+erf(x/√2))
void swiglu(const float* gate, const float* up, float* y, int64_t n);   // y = silu(gate) * up
void add(const float* a, const float* b, float* y, int64_t n);          // y = a + b
void mul(const float* a, const float* b, float* y, int64_t n);          // y = a * b
void scale(const float* x, float s, float* y, int64_t n);               // y = s * x
void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n);  // y[r, :] += bias[:]

// ---- attention -------------------------------------------------------------------------------
// See AttentionParams. Scores and softmax in double; out [n_tok, n_head, head_dim].
void attention(const float* q, const void* k_cache, const void* v_cache, int64_t pos0, int64_t n_tok,
               const AttentionParams& p, float* out);

}  // namespace ref
}  // namespace pelican
