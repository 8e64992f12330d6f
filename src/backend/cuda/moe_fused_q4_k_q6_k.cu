// The one-kernel decode MoE block (moe_fused.cuh) for Q4_K gate/up, Q6_K down expert weights.
#include "backend/cuda/moe_fused.cuh"

namespace pelican::cuda::detail {

int moe_fused_q4_k_q6_k(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream) {
    return moe_fused_entry<TraitQ4_K, TraitQ6_K>(op, a, grid, smem, stream);
}

}  // namespace pelican::cuda::detail
