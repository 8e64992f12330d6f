// Decode matmul on the GPU: y = W x for a few tokens (batch 1 decode, later speculative
// verification), bound by the bandwidth of streaming W once. Fused prologue (RMSNorm of x) and
// epilogues (bias, residual add with scale, SwiGLU over stacked gate/up rows) save passes.
// Host-includable, fmt-free.
//
// Numerics: F32/F16/BF16 weights use fp32 activations and fp32 accumulation. Quantized weights
// (Q8_0, Q4_0, Q4_K, Q6_K) quantize the (normed) activations to int8 blocks of 32 with an fp32
// scale per block (symmetric, d = amax / 127, q = round(x / d)) and use integer dot products
// (dp4a); the result equals the exact product with those rounded activations up to fp32 rounding.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/gpu_matrix.h"

namespace pelican::cuda {

inline constexpr int kMaxGemvTokens = 8;

struct GemvArgs {
    const float* x = nullptr;  // [n_tok, n_in] fp32 (device); rows x_stride floats apart
    int64_t x_stride = 0;      // 0 = n_in
    int n_tok = 1;             // 1 .. kMaxGemvTokens

    // Prologue: when norm_w != nullptr each row of x is RMS-normalised first:
    //   x' = x / sqrt(mean(x^2) + norm_eps) * (norm_one_plus ? 1 + w : w)
    const float* norm_w = nullptr;  // [n_in] fp32 device
    float norm_eps = 1e-6f;
    bool norm_one_plus = false;

    // Epilogue, per output o (before glu):  v = scale * ((W x')[o] + bias[o])
    const float* bias = nullptr;  // [n_out] or nullptr
    float scale = 1.0f;
    // glu: W holds [gate; up] stacked (n_out = 2 * n_half): y[t, i] = silu(v_i) * v_{i + n_half},
    // i < n_half. bias/scale apply before the silu. Output width is n_half.
    bool glu = false;
    // residual: y[t, o] = residual[t, o] + v (after glu when set). May alias y.
    const float* residual = nullptr;

    float* y = nullptr;    // [n_tok, n_out or n_out/2] fp32 device, rows y_stride floats apart
    int64_t y_stride = 0;  // 0 = output width

    // Expert slots (MoE; off while n_expert_slots == 0). W holds n_expert = n_out / expert_rows
    // experts stacked: expert e's rows at e * expert_rows .. (e + 1) * expert_rows - 1 (with glu,
    // each expert's block is [gate; up], n_half = expert_rows / 2 inside the block). For every
    // slot s < n_expert_slots the call computes, with the options above (norm, scale, glu,
    // residual; no bias), y_s = W_{expert_ids[s]} x_s for one token (n_tok 1; or 8, below), where
    //   x_s = x + (s / x_slot_div) * x_slot_stride       (x_slot_stride 0: every slot reads x),
    //   y_s = y + s * y_slot_stride, residual_s = residual + s * y_slot_stride.
    // Decode gate/up (k experts of one token): x_slot_stride 0, y_slot_stride n_ff; down:
    // x_slot_stride n_ff, y_slot_stride n_embd. Prefill (slot = t * k + j): x_slot_div k. The
    // ids are read on the GPU after the PDL wait (the router kernel may write them just before);
    // an id outside [0, n_expert) reads expert 0 instead (no access outside W).

    const int32_t* expert_ids = nullptr;  // [n_expert_slots] device
    int n_expert_slots = 0;               // 0 (off) or 1 .. 65535
    int64_t expert_rows = 0;              // weight rows per expert (glu: gate + up rows)
    int64_t x_slot_stride = 0;            // floats
    int x_slot_div = 1;                   // slots per x row (>= 1)
    int64_t y_slot_stride = 0;            // floats; 0 = output width (dense slots)
    // Grouped experts (prompts): n_tok 8 with expert slots: each slot is a group of 8 token rows of
    // one expert (x_s rows x_stride apart, y_s rows y_stride apart). skip_negative_ids: a slot whose
    // id is negative computes nothing (unused groups of a device-side grouping).
    bool skip_negative_ids = false;
    // Fused moe_combine (decode down projection: one token, expert slots, no glu, no residual): after
    // the slots' outputs y_s are written, comb_y[o] = comb_res[o] + sum_s comb_w[s] y_s[o] for every
    // output o (slot order, fmaf from 0: bitwise moe_combine without a shared expert). comb_ctr: one
    // zeroed counter per row group (n_out of them always suffice; reset by the kernel), device.
    // comb_res may equal comb_y. Off while comb_ctr is nullptr.
    unsigned* comb_ctr = nullptr;
    const float* comb_w = nullptr;  // [n_expert_slots]
    const float* comb_res = nullptr;
    float* comb_y = nullptr;
};

// Tokens (rows of x) one launch of this matrix can take, at most kMaxGemvTokens (the shared-memory
// activations of a token grow with n_in: fp32 for float weights, int8 + scales for quantized ones).
int gemv_max_tokens(const GpuMatrix& m);

// Launches the GEMV (graph-capturable: no allocation, no host synchronisation): the register-streaming
// kernels with the matrix's tuned variant (or the forced one). x, norm_w, bias and
// residual are read through the read-only cache: they must not alias y, except residual, which may
// equal y exactly (same rows, residual rows y_stride apart). Any alignment of x is accepted
// (16-byte aligned rows take the vector path).
void gemv(const GpuMatrix& w, const GemvArgs& a, cudaStream_t stream);

// For benchmarks and tuning: size the grid for ctas_per_sm CTAs per SM, each looping over its
// share of the rows (0, the default: as many CTAs as fit on the GPU at once). A large value
// gives one CTA per row group (no loop).
void gemv_set_grid_policy(int ctas_per_sm);

// Kernel variants (decode kernel configuration x grid policy; the configuration applies to
// n_tok = 1, the grid policy to every n_tok). Names like "r1u8k2/occ": rows per warp, 16-byte
// units in flight per row and lane, split-K warps per row, CTAs per SM (occ = occupancy).
int gemv_variant_count();
const char* gemv_variant_name(int variant);
// The variant gemv() uses for this matrix and call: the forced one, else m.gemv_variant, else a
// guess from the shape.
int gemv_variant_for(const GpuMatrix& m, const GemvArgs& a);
// Forces every later gemv() onto one variant (tests, benchmarks); -1 restores the normal choice.
void gemv_force_variant(int variant);

// Expert-slot calls (GemvArgs::n_expert_slots > 0) are tuned on their slot count, expert_rows and
// activation rows (x_slot_stride 0: one shared x row); the timed calls rotate through the experts.
// Times every variant on this matrix (cudaEvents: a few warm-up and timed calls each, a few ms)
// for the call shape of shape_example and stores the fastest in m.gemv_variant. Only the shape
// flags of shape_example are used (n_tok, glu, whether norm_w / bias / residual are set, scale,
// norm_eps, norm_one_plus); its pointers are never dereferenced: the timing runs on scratch
// buffers. Results are cached per (type, n_in, n_out, glu, n_tok, norm, residual), so identical
// layers tune once. Does nothing while the stream is capturing, or with PELICAN_GEMV_AUTOTUNE=0
// in the environment. Synchronises the stream. If times is non-null, it receives
// gemv_variant_count() microseconds per call (negative: not timed).
void gemv_autotune(GpuMatrix& m, const GemvArgs& shape_example, cudaStream_t stream, float* times = nullptr);

}  // namespace pelican::cuda
