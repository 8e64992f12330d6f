// Device helpers shared by the Gated DeltaNet kernels (deltanet.cu: the recurrent step,
// deltanet_chunk.cu: the chunked form). Private to those .cu files. Same formulas as
// ref::deltanet_gates and ref::l2norm, in fp32 with the accurate expf / log1pf.
#pragma once

#include "backend/cuda/deltanet.h"

namespace pelican::cuda::dn {

// Aborts with a message naming op unless the arguments are valid for deltanet_step (head widths,
// pointers, strides). Host; defined in deltanet.cu.
void check_step_args(const DeltaNetStepArgs& a, const char* op);

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// beta = sigmoid(b)
__device__ __forceinline__ float gate_beta(float b) { return 1.0f / (1.0f + expf(-b)); }

// g = -exp(a_log) * softplus(a + dt_bias) = neg_a * softplus(a + dt_bias); softplus(x) = x above 20.
__device__ __forceinline__ float gate_g(float a, float neg_a, float dt_bias) {
    const float sp_in = a + dt_bias;
    return neg_a * (sp_in > 20.0f ? sp_in : log1pf(expf(sp_in)));
}

// 1 / sqrt(sum of squares + 1e-6): the L2 norm's scale of q and k.
__device__ __forceinline__ float l2_inv(float sum_sq) { return 1.0f / sqrtf(sum_sq + 1e-6f); }

// The delta rule over one thread's RPT state rows of one column j (S[i] = S[row0 + i][j]; kr, qr:
// k and q of those rows, 16-byte aligned). Pass 1: the partial (S^T k)_j, four accumulators.
template <int RPT>
__device__ __forceinline__ float partial_stk(const float (&S)[RPT], const float* kr) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < RPT; i += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(kr + i);
        acc[0] = fmaf(S[i], k4.x, acc[0]);
        acc[1] = fmaf(S[i + 1], k4.y, acc[1]);
        acc[2] = fmaf(S[i + 2], k4.z, acc[2]);
        acc[3] = fmaf(S[i + 3], k4.w, acc[3]);
    }
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// Pass 2: S <- S decay + k delta; returns the partial (S_new^T q)_j (four accumulators).
template <int RPT>
__device__ __forceinline__ float update_partial_o(float (&S)[RPT], const float* kr, const float* qr,
                                                  float delta, float decay) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < RPT; i += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(kr + i);
        const float4 q4 = *reinterpret_cast<const float4*>(qr + i);
        S[i] = fmaf(k4.x, delta, S[i] * decay);
        S[i + 1] = fmaf(k4.y, delta, S[i + 1] * decay);
        S[i + 2] = fmaf(k4.z, delta, S[i + 2] * decay);
        S[i + 3] = fmaf(k4.w, delta, S[i + 3] * decay);
        acc[0] = fmaf(S[i], q4.x, acc[0]);
        acc[1] = fmaf(S[i + 1], q4.y, acc[1]);
        acc[2] = fmaf(S[i + 2], q4.z, acc[2]);
        acc[3] = fmaf(S[i + 3], q4.w, acc[3]);
    }
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// The gated RMSNorm's output: w * (o / sqrt(sum_sq / d + eps)) * silu(z).
__device__ __forceinline__ float gated_out(float w, float o, float sum_sq, int d, float eps, float z) {
    const float inv = 1.0f / sqrtf(sum_sq / static_cast<float>(d) + eps);
    const float silu_z = z / (1.0f + expf(-z));
    return w * (o * inv) * silu_z;
}

}  // namespace pelican::cuda::dn
