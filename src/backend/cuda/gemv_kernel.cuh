// Private to the GEMV translation units (through gemv_impl.cuh): the activation prologue (RMSNorm,
// int8 quantization or fp32 staging into shared memory) and the GEMV kernel template itself. CUDA only.
#pragma once

#include "backend/cuda/gemv_traits.cuh"
#include "backend/cuda/pdl.cuh"

namespace pelican::cuda::detail {

// ---- prologue ----------------------------------------------------------------------------------

// 1 / sqrt(sum / n + eps) (sum: a row's sum of squares), rounded as every prologue does.
__device__ __forceinline__ float rstd_of(float sum, int n, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum, static_cast<float>(n)), eps)));
}

// rstd[t] = 1 / sqrt(mean(x_t^2) + eps) for t < n_tok (1 when there is no norm). x: the CTA's
// activations (p.x, or its expert slot's rows).
template <int NT>
__device__ void gemv_rstd(const GemvParams& p, const float* x, float (&rstd)[NT]) {
    __shared__ float part[kGemvWarps][NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) rstd[t] = 1.0f;
    if (p.norm_w == nullptr) return;
    const int nf = (p.n_in + 3) / 4;
    float ss[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        ss[t] = 0.0f;
        if (t < p.n_tok) {
            const float* row = x + t * p.x_stride;
            for (int f0 = threadIdx.x; f0 < nf; f0 += 4 * kGemvThreads) {
                float4 v[4];  // four loads in flight per thread
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int f = f0 + k * kGemvThreads;
                    v[k] = f < nf ? load_x4(row, f, p.n_in, p.x_vec) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    ss[t] = fmaf(v[k].x, v[k].x,
                                 fmaf(v[k].y, v[k].y, fmaf(v[k].z, v[k].z, fmaf(v[k].w, v[k].w, ss[t]))));
            }
        }
        ss[t] = warp_sum(ss[t]);
    }
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
        for (int t = 0; t < NT; ++t) part[threadIdx.x >> 5][t] = ss[t];
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kGemvWarps; ++k) s += part[k][t];
        rstd[t] = rstd_of(s, p.n_in, p.norm_eps);
    }
}

// v * r * (norm_one_plus ? 1 + w : w) per element, rounded as every prologue does (w: the norm
// weights of v's four elements, r: the row's 1 / rms).
__device__ __forceinline__ float4 norm_scale4(const GemvParams& p, float4 v, float4 w, float r) {
    if (p.norm_one_plus) {
        w.x = __fadd_rn(1.0f, w.x);
        w.y = __fadd_rn(1.0f, w.y);
        w.z = __fadd_rn(1.0f, w.z);
        w.w = __fadd_rn(1.0f, w.w);
    }
    v.x = __fmul_rn(__fmul_rn(v.x, r), w.x);
    v.y = __fmul_rn(__fmul_rn(v.y, r), w.y);
    v.z = __fmul_rn(__fmul_rn(v.z, r), w.z);
    v.w = __fmul_rn(__fmul_rn(v.w, r), w.w);
    return v;
}

// x'[t][4f .. 4f+3] (normed), zeros past n_in and for t >= n_tok.
template <int NT>
__device__ __forceinline__ float4 gemv_x4(const GemvParams& p, const float* x, const float (&rstd)[NT], int t,
                                          int f) {
    if (t >= p.n_tok) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 v = load_x4(x + t * p.x_stride, f, p.n_in, p.x_vec);
    return p.norm_w != nullptr ? norm_scale4(p, v, load_x4(p.norm_w, f, p.n_in, p.norm_vec), rstd[t]) : v;
}

// Byte offset of float4 f of one token's fp32 activations (float weights: one plane, or two planes of
// 4-float halves of each 8-element unit for F16/BF16; the header comment).
template <int kNP>
__device__ __forceinline__ int float_x4_offset(const GemvParams& p, int f) {
    return kNP == 1 ? 16 * f : (f & 1) * p.plane_bytes + 16 * (f >> 1);
}

// Float weights: fp32 x' into shared memory (planes per the header comment).
template <int NT, int kNP>
__device__ void gemv_prologue_float(const GemvParams& p, const float* x, uint8_t* smem) {
    float rstd[NT];
    gemv_rstd<NT>(p, x, rstd);
    const int nf = p.n_in_pad / 4;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        uint8_t* xt = smem + t * p.tok_bytes;
        for (int f0 = threadIdx.x; f0 < nf; f0 += 4 * kGemvThreads) {
            float4 v[4];  // four loads in flight per thread
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int f = f0 + k * kGemvThreads;
                v[k] = f < nf ? gemv_x4<NT>(p, x, rstd, t, f) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int f = f0 + k * kGemvThreads;
                if (f < nf) *reinterpret_cast<float4*>(xt + float_x4_offset<kNP>(p, f)) = v[k];
            }
        }
    }
}

// Quantizes x[4f .. 4f+3] (one lane's quarter of a half-block) with the other 7 lanes of its
// 32-block (consecutive lanes; all 32 lanes of the warp must call it) into the token area xt.
template <int kNP>
__device__ __forceinline__ void quantize4(const GemvParams& p, uint8_t* xt, float4 v, int f, bool active) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
    const float d = __fdiv_rn(amax, 127.0f);
    const float is = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    const int q0 = __float2int_rn(__fmul_rn(v.x, is));
    const int q1 = __float2int_rn(__fmul_rn(v.y, is));
    const int q2 = __float2int_rn(__fmul_rn(v.z, is));
    const int q3 = __float2int_rn(__fmul_rn(v.w, is));
    const uint32_t word = (static_cast<uint32_t>(q0) & 0xffu) | (static_cast<uint32_t>(q1) & 0xffu) << 8 |
                          (static_cast<uint32_t>(q2) & 0xffu) << 16 | (static_cast<uint32_t>(q3) << 24);
    int s = q0 + q1 + q2 + q3;
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    const int s_hi = __shfl_xor_sync(0xffffffffu, s, 4);
    if (active) {
        const int blk = f >> 3, sub = f & 7, half = sub >> 2;
        const int plane = kNP == 2 ? half : (blk & 1) + 2 * half;
        const int idx = kNP == 2 ? blk : blk >> 1;
        *reinterpret_cast<uint32_t*>(xt + plane * p.plane_bytes + 16 * idx + 4 * (sub & 3)) = word;
        if (sub == 0) {
            const uint32_t sums = (static_cast<uint32_t>(s) & 0xffffu) | (static_cast<uint32_t>(s_hi) << 16);
            *reinterpret_cast<uint2*>(xt + p.meta_off + 8 * blk) = make_uint2(__float_as_uint(d), sums);
        }
    }
}

// One token whose row fits in 4 float4 per thread (n_in <= 16 kGemvThreads): v[k] = x'[4f .. 4f+3]
// for f = k * kGemvThreads + threadIdx.x (zeros past n_in), x and the norm weights loaded once into
// registers, the sum of squares reduced over the CTA (a barrier inside: every thread must call it),
// then normalised in the registers (one global round trip instead of two). Same arithmetic as gemv_rstd
// + gemv_x4. Also the fused MoE kernel's prologue (moe_fused.cuh).
__device__ __forceinline__ void gemv_norm_short(const GemvParams& p, const float* x, float4 (&v)[4]) {
    __shared__ float part[kGemvWarps];
    const int nf = p.n_in / 4;
    float4 nw[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int f = k * kGemvThreads + static_cast<int>(threadIdx.x);
        const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        v[k] = f < nf ? load_x4(x, f, p.n_in, p.x_vec) : z;
        nw[k] = (p.norm_w != nullptr && f < nf) ? load_x4(p.norm_w, f, p.n_in, p.norm_vec) : z;
    }
    if (p.norm_w != nullptr) {
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k)
            ss = fmaf(v[k].x, v[k].x, fmaf(v[k].y, v[k].y, fmaf(v[k].z, v[k].z, fmaf(v[k].w, v[k].w, ss))));
        ss = warp_sum(ss);
        if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
        __syncthreads();
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kGemvWarps; ++k) s += part[k];
        const float r = rstd_of(s, p.n_in, p.norm_eps);
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = norm_scale4(p, v[k], nw[k], r);
    }
}

// Quantized weights: int8 32-blocks (act_quant.h rule) + meta into shared memory. Each block is
// handled by 8 consecutive lanes (4 elements each). One short token: gemv_norm_short, then quantized
// from the registers.
template <int kNP>
__device__ void gemv_prologue_quant_short(const GemvParams& p, const float* x, uint8_t* smem) {
    const int nf = p.n_in / 4;
    float4 v[4];
    gemv_norm_short(p, x, v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int f = k * kGemvThreads + static_cast<int>(threadIdx.x);
        quantize4<kNP>(p, smem, v[k], f, f < nf);  // whole 8-lane groups are active or not
    }
}

template <int NT, int kNP>
__device__ void gemv_prologue_quant(const GemvParams& p, const float* x, uint8_t* smem) {
    const int nf = p.n_in / 4;  // a multiple of 8
    if constexpr (NT == 1) {
        if (nf <= 4 * kGemvThreads) {
            gemv_prologue_quant_short<kNP>(p, x, smem);
            return;
        }
    }
    float rstd[NT];
    gemv_rstd<NT>(p, x, rstd);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        uint8_t* xt = smem + t * p.tok_bytes;
        for (int f0 = 0; f0 < nf; f0 += 8 * kGemvThreads) {
            float4 v[8];  // eight loads in flight per thread
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int f = f0 + k * kGemvThreads + static_cast<int>(threadIdx.x);
                v[k] = f < nf ? gemv_x4<NT>(p, x, rstd, t, f) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int f = f0 + k * kGemvThreads + static_cast<int>(threadIdx.x);
                quantize4<kNP>(p, xt, v[k], f, f < nf);  // whole 8-lane groups are active or not
            }
        }
    }
}

// ---- kernel ------------------------------------------------------------------------------------
// Decode variants (n_tok = 1 kernels; larger token counts use NT > 1 kernels with KS = 1):
//   R  output rows per warp (glu: R gate rows and their R up rows, 2R weight rows),
//   U  units per row per lane per batch, counted for 16-byte units of kBatch = 4 types (halved
//      for kBatch = 2 types: Q8_0, Q4_K read 2-3 x 16 bytes per unit) -> R * U loads in flight,
//   KS warps of a CTA splitting each row (split-K, reduced through shared memory).
// A warp's batch b covers 32-unit chunks c = (b * U + j) * KS + ks, j < U (ks: its split index),
// so the KS warps of a row interleave at 512-byte granularity and share the tail evenly.

// The fused moe_combine of an expert-slot GEMV (GemvParams::comb_*, one token, no glu): once every
// slot's CTA has written its rows of row group `group` (an arrival counter per group, counted in after
// the CTA's whole loop; the last CTA resets it), the last one writes comb_y[o] = comb_res[o] + sum_s
// comb_w[s] y_s[o] over the group's rows, the sum in slot order with fmaf from 0 (exactly moe_combine without
// a shared expert). Called by the whole CTA (barriers inside).
__device__ __forceinline__ void gemv_combine_group(const GemvParams& p, int group, int rows_per_group) {
    __shared__ bool s_last;
    __threadfence();  // this CTA's rows of y, before its arrival
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned slots = gridDim.y;
        s_last = atomicAdd(p.comb_ctr + group, 1u) == slots - 1;
        if (s_last) p.comb_ctr[group] = 0;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    const int64_t r0 = static_cast<int64_t>(group) * rows_per_group;
    const int64_t r1 = r0 + rows_per_group < p.n_slots ? r0 + rows_per_group : p.n_slots;
    const int slots = static_cast<int>(gridDim.y);
    for (int64_t o = r0 + threadIdx.x; o < r1; o += kGemvThreads) {
        float acc = 0.0f;
        for (int j = 0; j < slots; ++j)
            acc = fmaf(__ldg(p.comb_w + j), __ldcg(p.y + j * p.y_slot_stride + o), acc);
        p.comb_y[o] = p.comb_res[o] + acc;
    }
}

template <class T, int U4>
struct GemvUnits {
    static constexpr int v = U4 * T::kBatch / 4 > 0 ? U4* T::kBatch / 4 : 1;
};

// R: weight rows per warp (glu: R/2 gate + R/2 up). NT: token capacity (>= p.n_tok). E: the
// expert-slot kernel (NT = 1; p.n_expert_slots > 0), a separate instantiation so that the plain
// kernels carry none of its state. P: rows packed side by side in a warp for short rows (fewer
// units than lanes): the warp's lanes form P segments of L = 32 / P lanes, segment sg computes its
// own R rows (a warp covers R * P rows), chunks are L units wide and the lane sums are segmented.
template <class T, int NT, int R, int U, int KS, bool E, int P>
__global__ void __launch_bounds__(kGemvThreads, kGemvThreads <= 256 && NT * R * U <= 4 ? 2 : 1)
    gemv_kernel(const GemvParams p) {
    extern __shared__ __align__(16) uint8_t smem[];
    static_assert(kGemvWarps % KS == 0, "KS must divide the warps of a CTA");
    static_assert((P == 1 || P == 2 || P == 4 || P == 8) && (P == 1 || KS == 1),
                  "row packing: P in {1, 2, 4, 8}, without split-K");
    constexpr int kRowWarps = kGemvWarps / KS;
    constexpr int H = R / 2;   // glu: gate rows per warp
    constexpr int L = 32 / P;  // lanes per row
    __shared__ float red[KS > 1 ? kGemvWarps : 1][R][NT];
    const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
    const int rw = warp / KS, ks = warp % KS;
    const int sg = lane / L, sl = lane % L;  // row segment, lane inside it (P = 1: 0, lane)
    const int n_chunks = (p.n_units + L - 1) / L;
    const int n_batches = (n_chunks + U * KS - 1) / (U * KS);

    // Expert slots (E): the weight rows of this CTA's expert start at row_base (set after the PDL
    // wait); x_e, y_e and res_e are this slot's x, y and residual. Otherwise row_base = 0 and the
    // kernel uses p's pointers.
    static_assert(!E || NT == 1 || NT == 8, "expert slots take one token, or groups of 8 (grouped experts)");
    int64_t row_base = 0;
    const float* x_e = nullptr;
    float* y_e = nullptr;
    const float* res_e = nullptr;
    int64_t rows[R];  // weight rows (row_base included)
    bool valid[R];
    auto set_rows = [&](int group) {
        const int wg = group * kRowWarps + rw;
#pragma unroll
        for (int s = 0; s < R; ++s) {
            int i = (wg * R + s) * P + sg;
            int64_t row = i;
            if constexpr (H > 0) {
                if (p.glu) {
                    i = (wg * H + s % H) * P + sg;
                    row = static_cast<int64_t>(i) + (s / H) * static_cast<int64_t>(p.n_half);
                }
            }
            valid[s] = i < p.n_slots;
            rows[s] = row + row_base;
        }
    };
    auto unit_of = [&](int batch, int j) { return ((batch * U + j) * KS + ks) * L + sl; };
    typename T::W w[U][R];
    auto load_batch = [&](int batch) {
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int u = unit_of(batch, j);
#pragma unroll
            for (int s = 0; s < R; ++s) {
                if (valid[s] && u < p.n_units)
                    T::load(w[j][s], p, rows[s], u);
                else
                    w[j][s] = typename T::W{};
            }
        }
    };

    int group = static_cast<int>(blockIdx.x), batch = 0;
    if constexpr (E) {
        // The expert ids come from the router kernel: wait before reading them, so here the
        // weight rows (and their loads) follow the wait.
        pdl_wait();
        const int slot = static_cast<int>(blockIdx.y);
        int e = p.expert_ids[slot];
        if (e < 0 && p.skip_negative_ids) return;  // an unused group (uniform over the CTA)
        if (e < 0 || e >= p.n_experts) e = 0;
        row_base = static_cast<int64_t>(e) * p.expert_rows;
        x_e = p.x + static_cast<int64_t>(slot / p.x_slot_div) * p.x_slot_stride;
        y_e = p.y + static_cast<int64_t>(slot) * p.y_slot_stride;
        res_e = p.residual ? p.residual + static_cast<int64_t>(slot) * p.y_slot_stride : nullptr;
    }
    set_rows(group);
    load_batch(0);  // weights never depend on earlier kernels: in flight before the PDL wait (not
                    // in expert mode, where the rows depend on the ids)
    if constexpr (!E) {
        pdl_wait();  // x, norm inputs, residual and y are written/read by neighbouring kernels
    }
    if constexpr (T::kQuant)
        gemv_prologue_quant<NT, T::kNP>(p, E ? x_e : p.x, smem);
    else
        gemv_prologue_float<NT, T::kNP>(p, E ? x_e : p.x, smem);
    __syncthreads();
    pdl_trigger();  // this CTA has read x: the next kernel's CTAs may be scheduled

    float acc[R][NT];
#pragma unroll
    for (int s = 0; s < R; ++s)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[s][t] = 0.0f;

    for (;;) {
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int u = unit_of(batch, j);
            if (u < p.n_units) {
                typename T::Up up[R];
#pragma unroll
                for (int s = 0; s < R; ++s) up[s] = T::unpack(w[j][s], u);
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    const typename T::X x = T::load_x(smem + t * p.tok_bytes, p, u);
#pragma unroll
                    for (int s = 0; s < R; ++s) acc[s][t] = T::dot(up[s], x, acc[s][t]);
                }
            }
        }
        // Next batch: issue its loads before this group's reduction and epilogue.
        int next_batch = batch + 1, next_group = group;
        if (next_batch == n_batches) {
            next_batch = 0;
            next_group += static_cast<int>(gridDim.x);
        }
        const bool more = next_group < p.n_groups;  // uniform over the CTA
        int64_t keep_rows[R];
        bool keep_valid[R];
#pragma unroll
        for (int s = 0; s < R; ++s) {
            keep_rows[s] = rows[s];
            keep_valid[s] = valid[s];
        }
        if (more) {
            if (next_group != group) set_rows(next_group);
            load_batch(next_batch);
        }
        if (next_batch == 0) {  // the group is complete: reduce over lanes (and warps), epilogue
#pragma unroll
            for (int s = 0; s < R; ++s)
#pragma unroll
                for (int t = 0; t < NT; ++t) acc[s][t] = seg_sum<L>(acc[s][t]);
            bool out_warp = true;
            if constexpr (KS > 1) {
                if (lane == 0) {
#pragma unroll
                    for (int s = 0; s < R; ++s)
#pragma unroll
                        for (int t = 0; t < NT; ++t) red[warp][s][t] = acc[s][t];
                }
                __syncthreads();
                out_warp = ks == 0;
                if (out_warp) {
#pragma unroll
                    for (int s = 0; s < R; ++s)
#pragma unroll
                        for (int t = 0; t < NT; ++t) {
                            float v = red[warp][s][t];
#pragma unroll
                            for (int k = 1; k < KS; ++k) v += red[warp + k][s][t];
                            acc[s][t] = v;
                        }
                }
            }
            if (out_warp && !p.glu) {
#pragma unroll
                for (int s = 0; s < R; ++s)
#pragma unroll
                    for (int t = 0; t < NT; ++t) {
                        if (sl == (s * NT + t) % L && keep_valid[s] && t < p.n_tok) {
                            float* const y = E ? y_e : p.y;
                            const float* const residual = E ? res_e : p.residual;
                            const int64_t o = keep_rows[s] - row_base;
                            float v = acc[s][t];
                            if (p.bias) v += __ldg(p.bias + o);
                            v *= p.scale;
                            if (residual) v += residual[t * p.y_stride + o];
                            y[t * p.y_stride + o] = v;
                        }
                    }
            } else if constexpr (H > 0) {
                if (out_warp) {
#pragma unroll
                    for (int s = 0; s < H; ++s)
#pragma unroll
                        for (int t = 0; t < NT; ++t) {
                            if (sl == (s * NT + t) % L && keep_valid[s] && t < p.n_tok) {
                                float* const y = E ? y_e : p.y;
                                const float* const residual = E ? res_e : p.residual;
                                const int64_t og = keep_rows[s] - row_base, ou = keep_rows[s + H] - row_base;
                                float g = acc[s][t], v = acc[s + H][t];
                                if (p.bias) {
                                    g += __ldg(p.bias + og);
                                    v += __ldg(p.bias + ou);
                                }
                                g *= p.scale;
                                v *= p.scale;
                                float out = silu_mul(g, v);
                                if (residual) out += residual[t * p.y_stride + og];
                                y[t * p.y_stride + og] = out;
                            }
                        }
                }
            }
            if constexpr (KS > 1) __syncthreads();  // red is reused by the next group
#pragma unroll
            for (int s = 0; s < R; ++s)
#pragma unroll
                for (int t = 0; t < NT; ++t) acc[s][t] = 0.0f;
        }
        if (!more) break;
        group = next_group;
        batch = next_batch;
    }
    // Fused moe_combine: this CTA's groups are written; count them in (after the loop, so that the
    // combine adds no register pressure to it). Debug modes 2 and 3 (benchmarks) return earlier: no
    // combine then (every CTA exits, so the counters stay consistent).
    if constexpr (E && NT == 1) {
        if (p.comb_ctr != nullptr && !p.glu)
            for (int g = static_cast<int>(blockIdx.x); g < p.n_groups; g += static_cast<int>(gridDim.x))
                gemv_combine_group(p, g, kRowWarps * R * P);
    }
}

}  // namespace pelican::cuda::detail
