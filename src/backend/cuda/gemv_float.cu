// GEMV kernels for F32, F16 and BF16 weights (fp32 activations and accumulation).
#include "backend/cuda/gemv_impl.cuh"

namespace pelican::cuda::detail {

void gemv_launch_float(DType t, const GemvParams& p, int nt, size_t smem, cudaStream_t stream) {
    switch (t) {
        case DType::F32:
            gemv_launch_type<TraitF32>(p, nt, smem, stream);
            break;
        case DType::F16:
            gemv_launch_type<TraitHalf<false>>(p, nt, smem, stream);
            break;
        default:
            gemv_launch_type<TraitHalf<true>>(p, nt, smem, stream);
            break;
    }
}

void gemv_prepare_float(DType t) {
    switch (t) {
        case DType::F32:
            gemv_prepare_type<TraitF32>();
            break;
        case DType::F16:
            gemv_prepare_type<TraitHalf<false>>();
            break;
        default:
            gemv_prepare_type<TraitHalf<true>>();
            break;
    }
}

}  // namespace pelican::cuda::detail
