// GEMV kernels for Q4_0 weights (int8 activations, dp4a).
#include "backend/cuda/gemv_impl.cuh"

namespace pelican::cuda::detail {

void gemv_launch_q4_0(const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream) {
    gemv_launch_type<TraitQ4_0>(p, nt, variant, smem, stream);
}

void gemv_prepare_q4_0() { gemv_prepare_type<TraitQ4_0>(); }

}  // namespace pelican::cuda::detail
