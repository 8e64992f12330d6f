// GEMV kernels for F16 weights (fp32 activations and accumulation).
#include "backend/cuda/gemv_impl.cuh"

namespace pelican::cuda::detail {

void gemv_launch_f16(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream) {
    gemv_launch_type<TraitHalf<false>>(p, nt, variant, smem, stream);
}

void gemv_prepare_f16() { gemv_prepare_type<TraitHalf<false>>(); }

}  // namespace pelican::cuda::detail
