// GEMV kernels for Q4_K weights (int8 activations in 32-blocks, dp4a).
#include "backend/cuda/gemv_impl.cuh"

namespace pelican::cuda::detail {

void gemv_launch_q4_k(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream) {
    gemv_launch_type<TraitQ4_K>(p, nt, variant, smem, stream);
}

void gemv_prepare_q4_k() { gemv_prepare_type<TraitQ4_K>(); }

}  // namespace pelican::cuda::detail
