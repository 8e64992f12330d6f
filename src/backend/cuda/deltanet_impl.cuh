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

}  // namespace pelican::cuda::dn
