// qmatmul (qmatmul.h) kernels for Q8_0 weights: the four tile configurations of qmatmul_impl.cuh.
#include "backend/cuda/qmatmul_impl.cuh"

namespace pelican::cuda::qmm {

void launch_q8_0(const Params& p, int cfg, dim3 grid, cudaStream_t stream) {
    launch_type<TQ8_0>(p, cfg, grid, stream);
}

}  // namespace pelican::cuda::qmm
