// qmatmul (qmatmul.h) kernels for Q6_K weights: the four tile configurations of qmatmul_impl.cuh.
#include "backend/cuda/qmatmul_impl.cuh"

namespace pelican::cuda::qmm {

void launch_q6_k(const Params& p, int cfg, dim3 grid, cudaStream_t stream) {
    launch_type<TQ6_K>(p, cfg, grid, stream);
}

}  // namespace pelican::cuda::qmm
