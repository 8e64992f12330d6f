// The one-kernel decode MoE block (moe_fused.cuh) for Q4_0 expert weights.
#include "backend/cuda/moe_fused.cuh"

namespace pelican::cuda::detail {

int moe_fused_q4_0(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream) {
    return moe_fused_entry<TraitQ4_0, TraitQ4_0>(op, a, grid, smem, stream);
}

}  // namespace pelican::cuda::detail
