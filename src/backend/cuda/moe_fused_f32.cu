// The one-kernel decode MoE block (moe_fused.cuh) for F32 expert weights.
#include "backend/cuda/moe_fused.cuh"

namespace pelican::cuda::detail {

int moe_fused_f32(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream) {
    return moe_fused_entry<TraitF32, TraitF32>(op, a, grid, smem, stream);
}

}  // namespace pelican::cuda::detail
