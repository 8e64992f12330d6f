// Private to the GEMV translation units (through gemv_impl.cuh): the device layout of a GpuMatrix,
// the shared-memory activation areas, the kernel constants and GemvParams. Not for other callers.
//
// Device layout (all planes start 256-byte aligned inside GpuMatrix::data; off[k] = plane k's
// byte offset, stride[k] = its bytes per row). A "unit" is what one lane handles per step.
//   F32        plane 0: rows of n_in_pad = roundup(n_in, 4) floats (zero padded); unit = 4 elements
//   F16, BF16  plane 0: rows of n_in_pad = roundup(n_in, 8) halves (zero padded); unit = 8 elements
//   Q4_0       plane 0: 16 nibble bytes per 32-block exactly as GGUF (byte j: lo = element j,
//              hi = element j + 16); plane 1: fp16 d per block.                  unit = 1 block
//   Q8_0       plane 0: int8 elements 0..15 of each block; plane 1: elements 16..31; plane 2: d
//   Q4_K       plane 0: qs bytes 0..15 of each 64-element chunk c (GGUF qs[32c .. 32c+16));
//              plane 1: qs bytes 16..31; plane 2: the 16-byte super-block header (d, dmin,
//              packed 6-bit scales/mins, as GGUF).                       unit = 1 chunk (64)
//   Q6_K       plane 0: per 32-block 16 nibble bytes (byte j: lo = low 4 bits of element j,
//              hi = of element j + 16); plane 1: per 32-block two u32 of high 2-bit pairs
//              (word h covers elements 16h .. 16h+15: byte i, bits 2g..2g+1 = element
//              16h + 4g + i); plane 2: the 16 int8 sub-block scales per super-block (element e
//              uses scale e / 16); plane 3: fp16 d per super-block.          unit = 1 block
// Every plane's row stride is a multiple of 16 bytes where the unit load is 16 bytes, so each
// lane issues aligned 128-bit loads and a warp reads 512 contiguous bytes per plane-0 load.
//
// Activations (shared memory, one area per token, tok_bytes apart):
//   quantized weights: int8 blocks of 32 (act_quant.h's 32-block rule: d = amax / 127,
//     q = rint(x * (127 / amax))), split into planes of 16-byte halves so that lane-consecutive
//     units read consecutive 16 bytes (no bank conflicts): kNP = 2 planes (half h of block b at
//     plane h, offset 16 b) or, for Q4_K, kNP = 4 (plane (b & 1) + 2 h, offset 16 (b >> 1)).
//     Then per block 8 bytes of meta at meta_off + 8 b: fp32 d, int16 sum of the first 16 q,
//     int16 sum of the last 16 q.
//   float weights: fp32 x' (normed), zero padded to n_in_pad; F16/BF16 split into two planes of
//     4-float halves of each 8-element unit (again conflict-free 128-bit reads).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "core/dtype.h"

namespace pelican::cuda::detail {

// Threads per CTA. Every CTA reads the whole input vector (and the norm weights) from L2 in its
// prologue, so the prologue's L2 traffic is CTAs x input bytes: 512-thread CTAs (one per SM at
// ~100 registers per thread, 16 warps) read it half as often as 256-thread ones (two per SM).
// Measured on the H200 (docs/performance.md): the prologue was ~6 of 15 us of the 4096x14336
// Q4_0 call with 256 threads. PELICAN_GEMV_THREADS overrides it at build time for comparisons.
#ifndef PELICAN_GEMV_THREADS
#define PELICAN_GEMV_THREADS 512
#endif
inline constexpr int kGemvThreads = PELICAN_GEMV_THREADS;
inline constexpr int kGemvWarps = kGemvThreads / 32;
// Dynamic shared memory one GEMV CTA may use (activations of its token group).
inline constexpr int kGemvMaxSmem = 200 * 1024;

// ---- layout (host and device) -------------------------------------------------------------------

struct GemvLayout {
    int n_planes = 0;
    int64_t stride[4] = {0, 0, 0, 0};  // bytes per row of each plane
    int64_t n_in_pad = 0;              // elements per row the kernels iterate over
    int unit_elems = 0;                // elements per lane unit
    int block_elems = 1;               // n_in must be a multiple of this
};

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// False for unsupported types. Shape validity (n_in % block_elems) is checked by the caller.
inline bool gemv_layout(DType t, int64_t n_in, GemvLayout* l) {
    *l = GemvLayout{};
    switch (t) {
        case DType::F32:
            l->n_planes = 1;
            l->n_in_pad = round_up(n_in, 4);
            l->stride[0] = l->n_in_pad * 4;
            l->unit_elems = 4;
            return true;
        case DType::F16:
        case DType::BF16:
            l->n_planes = 1;
            l->n_in_pad = round_up(n_in, 8);
            l->stride[0] = l->n_in_pad * 2;
            l->unit_elems = 8;
            return true;
        case DType::Q4_0:
            l->n_planes = 2;
            l->stride[0] = n_in / 2;
            l->stride[1] = n_in / 32 * 2;
            l->unit_elems = 32;
            l->block_elems = 32;
            break;
        case DType::Q8_0:
            l->n_planes = 3;
            l->stride[0] = n_in / 2;
            l->stride[1] = n_in / 2;
            l->stride[2] = n_in / 32 * 2;
            l->unit_elems = 32;
            l->block_elems = 32;
            break;
        case DType::Q4_K:
            l->n_planes = 3;
            l->stride[0] = n_in / 4;
            l->stride[1] = n_in / 4;
            l->stride[2] = n_in / 256 * 16;
            l->unit_elems = 64;
            l->block_elems = 256;
            break;
        case DType::Q6_K:
            l->n_planes = 4;
            l->stride[0] = n_in / 2;
            l->stride[1] = n_in / 4;
            l->stride[2] = n_in / 16;
            l->stride[3] = n_in / 256 * 2;
            l->unit_elems = 32;
            l->block_elems = 256;
            break;
        default:
            return false;
    }
    l->n_in_pad = n_in;
    return true;
}

inline bool gemv_quantized(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

// Shared-memory bytes of one token's activations (see the header comment).
inline int64_t gemv_token_smem(DType t, int64_t n_in) {
    if (gemv_quantized(t)) return round_up(n_in + n_in / 4, 16);
    GemvLayout l;
    gemv_layout(t, n_in, &l);
    return l.n_in_pad * 4;
}

// ---- kernel parameters --------------------------------------------------------------------------

struct GemvParams {
    const uint8_t* w = nullptr;  // GpuMatrix::data
    size_t off[4] = {0, 0, 0, 0};
    int64_t stride[4] = {0, 0, 0, 0};
    int n_in = 0;      // real elements per row
    int n_in_pad = 0;  // elements the prologue writes (float: padded; zeros past n_in)
    int n_units = 0;   // lane units per row
    int n_slots = 0;   // output rows (n_out) or gate rows (n_half) with glu
    int n_half = 0;    // glu: offset of the up rows; 0 otherwise
    bool glu = false;
    int n_groups = 0;  // CTA work groups (kGemvWarps warps x rows per warp)
    int n_tok = 1;     // tokens of this launch (<= the kernel's NT)
    const float* x = nullptr;
    int64_t x_stride = 0;
    bool x_vec = false;  // x and x_stride allow float4 loads
    const float* norm_w = nullptr;
    bool norm_vec = false;
    float norm_eps = 0.0f;
    bool norm_one_plus = false;
    const float* bias = nullptr;
    float scale = 1.0f;
    const float* residual = nullptr;
    float* y = nullptr;
    int64_t y_stride = 0;  // also the residual's row stride
    int tok_bytes = 0;     // shared-memory bytes per token
    int plane_bytes = 0;   // bytes per activation plane
    int meta_off = 0;      // quantized: byte offset of the block meta inside a token area
    // Expert slots (GemvArgs::n_expert_slots; 0 = off). The CTAs of blockIdx.y = slot compute
    // slot's rows: weight rows from expert_ids[slot] * expert_rows (the ids are read after the
    // PDL wait; ids outside [0, n_experts) read expert 0), activations from
    // x + (slot / x_slot_div) * x_slot_stride, outputs (and residual) at + slot * y_slot_stride.
    // n_slots / n_half above are per expert.
    const int32_t* expert_ids = nullptr;
    int n_expert_slots = 0;
    int n_experts = 0;
    int64_t expert_rows = 0;
    int64_t x_slot_stride = 0;
    int x_slot_div = 1;
    int64_t y_slot_stride = 0;
    bool skip_negative_ids = false;  // a negative id: the CTA does nothing (grouped experts)
    // Fused moe_combine (GemvArgs::comb_*; one-token expert slots without glu; comb_ctr nullptr: off).
    unsigned* comb_ctr = nullptr;
    const float* comb_w = nullptr;
    const float* comb_res = nullptr;
    float* comb_y = nullptr;
};

}  // namespace pelican::cuda::detail
