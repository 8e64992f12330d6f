// The bulk-copy decode GEMV (gemv_bulk.cuh) for Q4_0 weights.
#include "backend/cuda/gemv_bulk.cuh"

namespace pelican::cuda::detail {

void gemv_bulk_launch_q4_0(const GemvParams& p, const GemvBulkParams& b, int ul, int grid, size_t smem,
                           cudaStream_t stream) {
    gemv_bulk_launch_type<TraitQ4_0>(p, b, ul, grid, smem, stream);
}

void gemv_bulk_prepare_q4_0() { gemv_bulk_prepare_type<TraitQ4_0>(); }

}  // namespace pelican::cuda::detail
