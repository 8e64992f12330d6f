// The bulk-copy decode GEMV (gemv_bulk.cuh) for Q6_K weights.
#include "backend/cuda/gemv_bulk.cuh"

namespace pelican::cuda::detail {

void gemv_bulk_launch_q6_k(const GemvParams& p, const GemvBulkParams& b, int ul, int grid, size_t smem,
                           cudaStream_t stream) {
    gemv_bulk_launch_type<TraitQ6_K>(p, b, ul, grid, smem, stream);
}

void gemv_bulk_prepare_q6_k() { gemv_bulk_prepare_type<TraitQ6_K>(); }

}  // namespace pelican::cuda::detail
