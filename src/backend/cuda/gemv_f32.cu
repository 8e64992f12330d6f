// GEMV kernels for F32 weights (fp32 activations and accumulation).
#include "backend/cuda/gemv_impl.cuh"

namespace pelican::cuda::detail {

void gemv_launch_f32(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream) {
    gemv_launch_type<TraitF32>(p, nt, variant, smem, stream);
}

void gemv_prepare_f32() { gemv_prepare_type<TraitF32>(); }

}  // namespace pelican::cuda::detail
