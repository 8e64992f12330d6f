// Private to the GEMV translation units (gemv*.cu, gpu_matrix.cu): the kernel launchers, the decode
// variant table and the per-family entry points. The pieces: gemv_params.cuh (the device layout of a
// GpuMatrix, the activation areas, GemvParams), gemv_traits.cuh (per-type unit load/unpack/dot),
// gemv_kernel.cuh (prologue, L2 prefetch, the kernel template). Not for other callers.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_params.cuh"

#ifdef __CUDACC__
#include "backend/cuda/gemv_kernel.cuh"
#endif

namespace pelican::cuda::detail {

#ifdef __CUDACC__

// ---- launcher ----------------------------------------------------------------------------------

// CTAs per SM the grid is sized for: 0 = as many as fit (occupancy); see gemv_set_grid_policy.
int gemv_grid_ctas_per_sm();
// SMs of the current device (cached per device).
int gemv_sm_count();
// CTAs of kGemvThreads threads that fit on one SM of the current device, computed from the
// device limits (cached; no CUDA call, so it is safe inside a graph capture).
int gemv_occupancy(int regs_per_thread, int static_smem, size_t dyn_smem);

// Decode kernel configurations (n_tok = 1): rows per warp R, units in flight per row U4 (for
// kBatch = 4 types), split-K warps KS. A variant (gemv.h) is a configuration and a grid policy:
// variant = configuration * kGemvPolicies + policy.
// Row packing P (gemv_kernel): P rows side by side per warp, 32 / P lanes each, for rows shorter
// than a warp's 32 units (MoE experts: Q4_0 n_in 512 = 16 units, Q4_K 512 = 8).
struct GemvConfig {
    int r, u4, ks, p;
};
inline constexpr int kGemvConfigs = 14;
inline constexpr GemvConfig kGemvConfigTable[kGemvConfigs] = {
    {1, 4, 1, 1}, {1, 8, 1, 1}, {2, 4, 1, 1}, {1, 4, 2, 1}, {1, 8, 2, 1}, {2, 2, 4, 1}, {4, 1, 4, 1},
    {2, 4, 2, 1}, {2, 2, 1, 1}, {4, 1, 1, 1}, {2, 1, 1, 2}, {4, 1, 1, 2}, {2, 1, 1, 4}, {4, 1, 1, 4},
};
// First packed configurations (gemv_default_variant): P = 2 (rows of 9 .. 16 units), P = 4 (<= 8).
inline constexpr int kGemvConfigP2 = 11, kGemvConfigP4 = 13;
inline constexpr int kGemvPolicies = 3;  // CTAs per SM: 0 (occupancy), 1, 2
inline constexpr int kGemvPolicyTable[kGemvPolicies] = {0, 1, 2};
inline constexpr int kGemvVariants = kGemvConfigs * kGemvPolicies;

// Register count and static shared memory of one kernel instantiation.
template <class T, int NT, int R, int U, int KS, bool E, int P>
struct GemvKernelInfo {
    static inline int regs = 0, static_smem = 0;
};

// Raises the kernel's dynamic shared-memory limit on the current device (once per device; a race
// only repeats the idempotent call) and records its resource use. upload_matrix calls it through
// gemv_prepare_*, so that gemv inside a graph capture makes no attribute call.
template <class T, int NT, int R, int U, int KS, bool E, int P = 1>
void gemv_kernel_attr(int dev) {
    static uint64_t done = 0;  // bit per device
    if (dev >= 64 || !(__atomic_load_n(&done, __ATOMIC_ACQUIRE) >> dev & 1u)) {
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<T, NT, R, U, KS, E, P>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, kGemvMaxSmem));
        cudaFuncAttributes fa{};
        PELICAN_CUDA_CHECK(cudaFuncGetAttributes(&fa, gemv_kernel<T, NT, R, U, KS, E, P>));
        __atomic_store_n(&GemvKernelInfo<T, NT, R, U, KS, E, P>::static_smem,
                         static_cast<int>(fa.sharedSizeBytes), __ATOMIC_RELAXED);
        __atomic_store_n(&GemvKernelInfo<T, NT, R, U, KS, E, P>::regs, fa.numRegs, __ATOMIC_RELEASE);
        if (dev < 64) __atomic_fetch_or(&done, uint64_t{1} << dev, __ATOMIC_RELEASE);
    }
}

// rows_per_warp: output rows (glu: gate rows) per warp; policy: CTAs per SM (0 = occupancy),
// overridden by gemv_set_grid_policy when that is set. Expert slots: gridDim.y = the slots, and
// gridDim.x = min(the slot's row groups, max(1, floor(resident CTAs / slots))).
template <class T, int NT, int R, int U, int KS, bool E = false, int P = 1>
void gemv_launch(GemvParams p, int out_rows_per_warp, int policy, size_t smem, cudaStream_t stream) {
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    gemv_kernel_attr<T, NT, R, U, KS, E, P>(dev);
    const int rows_per_group = (kGemvWarps / KS) * out_rows_per_warp * P;
    p.n_groups = (p.n_slots + rows_per_group - 1) / rows_per_group;
    const int forced = gemv_grid_ctas_per_sm();
    const int pol = forced > 0 ? forced : policy;
    const int64_t per_sm =
        pol > 0 ? pol
                : gemv_occupancy(
                      __atomic_load_n(&GemvKernelInfo<T, NT, R, U, KS, E, P>::regs, __ATOMIC_ACQUIRE),
                      __atomic_load_n(&GemvKernelInfo<T, NT, R, U, KS, E, P>::static_smem, __ATOMIC_RELAXED),
                      smem);
    const int n_y = E ? p.n_expert_slots : 1;
    // Expert slots: the slots share the resident CTAs (rounded down, so that the whole grid is
    // resident at once: a second wave of a few CTAs would double the time of their groups).
    int64_t cap = per_sm * gemv_sm_count() / n_y;
    if (cap < 1) cap = 1;
    const int grid = static_cast<int>(p.n_groups < cap ? p.n_groups : cap);
    launch_pdl(gemv_kernel<T, NT, R, U, KS, E, P>, dim3(grid, n_y), dim3(kGemvThreads), smem, stream, p);
}

// Rows per warp for a token capacity > 1: enough rows to amortise the shared-memory reads of x.
constexpr int gemv_rows_per_warp(int nt, bool glu) {
    const int r = nt <= 2 ? 1 : 2;
    return glu && r < 2 ? 2 : r;
}

template <class T, int NT>
void gemv_launch_nt(const GemvParams& p, int policy, size_t smem, cudaStream_t stream) {
    constexpr int R1 = gemv_rows_per_warp(NT, false), R2 = gemv_rows_per_warp(NT, true);
    constexpr int U1 = T::kBatch / R1 > 0 ? T::kBatch / R1 : 1, U2 = T::kBatch / R2 > 0 ? T::kBatch / R2 : 1;
    if constexpr (NT == 8) {  // grouped experts: 8 token rows per expert slot
        if (p.n_expert_slots > 0) {
            if (p.glu)
                gemv_launch<T, NT, R2, U2, 1, true>(p, R2 / 2, policy, smem, stream);
            else
                gemv_launch<T, NT, R1, U1, 1, true>(p, R1, policy, smem, stream);
            return;
        }
    }
    if (p.glu)
        gemv_launch<T, NT, R2, U2, 1>(p, R2 / 2, policy, smem, stream);
    else
        gemv_launch<T, NT, R1, U1, 1>(p, R1, policy, smem, stream);
}

template <class T, int C>
void gemv_launch_cfg(const GemvParams& p, int policy, size_t smem, cudaStream_t stream) {
    constexpr GemvConfig c = kGemvConfigTable[C];
    constexpr int U = GemvUnits<T, c.u4>::v;
    if (p.n_expert_slots > 0) {
        if (p.glu)
            gemv_launch<T, 1, 2 * c.r, U, c.ks, true, c.p>(p, c.r, policy, smem, stream);
        else
            gemv_launch<T, 1, c.r, U, c.ks, true, c.p>(p, c.r, policy, smem, stream);
    } else if (p.glu) {
        gemv_launch<T, 1, 2 * c.r, U, c.ks, false, c.p>(p, c.r, policy, smem, stream);
    } else {
        gemv_launch<T, 1, c.r, U, c.ks, false, c.p>(p, c.r, policy, smem, stream);
    }
}

template <class T, int C>
void gemv_prepare_cfg(int dev) {
    constexpr GemvConfig c = kGemvConfigTable[C];
    constexpr int U = GemvUnits<T, c.u4>::v;
    gemv_kernel_attr<T, 1, c.r, U, c.ks, false, c.p>(dev);
    gemv_kernel_attr<T, 1, 2 * c.r, U, c.ks, false, c.p>(dev);
    gemv_kernel_attr<T, 1, c.r, U, c.ks, true, c.p>(dev);
    gemv_kernel_attr<T, 1, 2 * c.r, U, c.ks, true, c.p>(dev);
}

template <class T, int NT>
void gemv_prepare_nt(int dev) {
    constexpr int R1 = gemv_rows_per_warp(NT, false), R2 = gemv_rows_per_warp(NT, true);
    constexpr int U1 = T::kBatch / R1 > 0 ? T::kBatch / R1 : 1, U2 = T::kBatch / R2 > 0 ? T::kBatch / R2 : 1;
    gemv_kernel_attr<T, NT, R1, U1, 1, false>(dev);
    gemv_kernel_attr<T, NT, R2, U2, 1, false>(dev);
    if constexpr (NT == 8) {
        gemv_kernel_attr<T, NT, R1, U1, 1, true>(dev);
        gemv_kernel_attr<T, NT, R2, U2, 1, true>(dev);
    }
}

// Sets the attributes of every kernel of the type on the current device.
template <class T>
void gemv_prepare_type() {
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    gemv_prepare_cfg<T, 0>(dev);
    gemv_prepare_cfg<T, 1>(dev);
    gemv_prepare_cfg<T, 2>(dev);
    gemv_prepare_cfg<T, 3>(dev);
    gemv_prepare_cfg<T, 4>(dev);
    gemv_prepare_cfg<T, 5>(dev);
    gemv_prepare_cfg<T, 6>(dev);
    gemv_prepare_cfg<T, 7>(dev);
    gemv_prepare_cfg<T, 8>(dev);
    gemv_prepare_cfg<T, 9>(dev);
    gemv_prepare_cfg<T, 10>(dev);
    gemv_prepare_cfg<T, 11>(dev);
    gemv_prepare_cfg<T, 12>(dev);
    gemv_prepare_cfg<T, 13>(dev);
    gemv_prepare_nt<T, 2>(dev);
    gemv_prepare_nt<T, 3>(dev);
    gemv_prepare_nt<T, 4>(dev);
    gemv_prepare_nt<T, 8>(dev);
}

// nt: the kernel's token capacity, one of 1, 2, 3, 4, 8. variant: 0 .. kGemvVariants - 1 (its
// configuration applies to nt = 1; its grid policy to all).
template <class T>
void gemv_launch_type(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream) {
    const int policy = kGemvPolicyTable[variant % kGemvPolicies];
    switch (nt) {
        case 1:
            switch (variant / kGemvPolicies % kGemvConfigs) {
                case 0:
                    gemv_launch_cfg<T, 0>(p, policy, smem, stream);
                    break;
                case 1:
                    gemv_launch_cfg<T, 1>(p, policy, smem, stream);
                    break;
                case 2:
                    gemv_launch_cfg<T, 2>(p, policy, smem, stream);
                    break;
                case 3:
                    gemv_launch_cfg<T, 3>(p, policy, smem, stream);
                    break;
                case 4:
                    gemv_launch_cfg<T, 4>(p, policy, smem, stream);
                    break;
                case 5:
                    gemv_launch_cfg<T, 5>(p, policy, smem, stream);
                    break;
                case 6:
                    gemv_launch_cfg<T, 6>(p, policy, smem, stream);
                    break;
                case 7:
                    gemv_launch_cfg<T, 7>(p, policy, smem, stream);
                    break;
                case 8:
                    gemv_launch_cfg<T, 8>(p, policy, smem, stream);
                    break;
                case 9:
                    gemv_launch_cfg<T, 9>(p, policy, smem, stream);
                    break;
                case 10:
                    gemv_launch_cfg<T, 10>(p, policy, smem, stream);
                    break;
                case 11:
                    gemv_launch_cfg<T, 11>(p, policy, smem, stream);
                    break;
                case 12:
                    gemv_launch_cfg<T, 12>(p, policy, smem, stream);
                    break;
                default:
                    gemv_launch_cfg<T, 13>(p, policy, smem, stream);
                    break;
            }
            break;
        case 2:
            gemv_launch_nt<T, 2>(p, policy, smem, stream);
            break;
        case 3:
            gemv_launch_nt<T, 3>(p, policy, smem, stream);
            break;
        case 4:
            gemv_launch_nt<T, 4>(p, policy, smem, stream);
            break;
        default:
            gemv_launch_nt<T, 8>(p, policy, smem, stream);
            break;
    }
}

#endif  // __CUDACC__

// One per family translation unit. gemv_prepare: kernel attributes for the type on the current
// device (called by upload_matrix).
void gemv_launch_float(DType t, const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_q4_0(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_q8_0(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_q4_k(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_q6_k(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_f32(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_f16(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_launch_bf16(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream);
void gemv_prepare_float(DType t);
void gemv_prepare_f32();
void gemv_prepare_f16();
void gemv_prepare_bf16();
void gemv_prepare_q4_0();
void gemv_prepare_q8_0();
void gemv_prepare_q4_k();
void gemv_prepare_q6_k();
void gemv_prepare(DType t);  // dispatches to the above (gemv.cu)

// Checks a call and fills p (gemv.cu; aborts with a message on a bad call).
void gemv_make_params(const GpuMatrix& m, const GemvArgs& a, GemvParams& p);

}  // namespace pelican::cuda::detail
