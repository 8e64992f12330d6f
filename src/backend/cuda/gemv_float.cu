// GEMV dispatch for F32, F16 and BF16 weights (fp32 activations and accumulation); the kernels
// live in gemv_f32.cu, gemv_f16.cu and gemv_bf16.cu (one translation unit each).
#include "backend/cuda/gemv_impl.cuh"

namespace pelican::cuda::detail {

void gemv_launch_float(DType t, const GemvParams& p, int nt, int variant, size_t smem, cudaStream_t stream) {
    switch (t) {
        case DType::F32:
            gemv_launch_f32(p, nt, variant, smem, stream);
            break;
        case DType::F16:
            gemv_launch_f16(p, nt, variant, smem, stream);
            break;
        default:
            gemv_launch_bf16(p, nt, variant, smem, stream);
            break;
    }
}

void gemv_prepare_float(DType t) {
    switch (t) {
        case DType::F32:
            gemv_prepare_f32();
            break;
        case DType::F16:
            gemv_prepare_f16();
            break;
        default:
            gemv_prepare_bf16();
            break;
    }
}

}  // namespace pelican::cuda::detail
