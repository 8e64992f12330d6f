// GEMV kernels for BF16 weights (fp32 activations and accumulation).
#include "backend/cuda/gemv_impl.cuh"

namespace pelican::cuda::detail {

void gemv_launch_bf16(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream) {
    gemv_launch_type<TraitHalf<true>>(p, nt, variant, smem, stream);
}

void gemv_prepare_bf16() { gemv_prepare_type<TraitHalf<true>>(); }

}  // namespace pelican::cuda::detail
