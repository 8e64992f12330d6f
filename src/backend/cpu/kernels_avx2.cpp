// The AVX2 kernel table (compiled with AVX2 flags; only called when active_isa() >= kAvx2).
#include "backend/cpu/kernels_avx2.h"

namespace pelican::cpu::detail {
namespace {

MatmulKernel find(WType t, WLayout layout) {
    if (layout != WLayout::kRows) return nullptr;  // interleaved layouts: AVX-512 or scalar
    switch (t) {
        case WType::F32:
            return matmul_f32_avx2;
        case WType::F16:
            return matmul_f16_avx2;
        case WType::BF16:
            return matmul_bf16_avx2;
        case WType::Q4_0:
            return matmul_q4_0_avx2;
        case WType::Q8_0:
            return matmul_q8_0_avx2;
        case WType::Q4_K:
            return matmul_q4_k_avx2;
        case WType::Q5_K:
            return matmul_q5_k_avx2;
        case WType::Q6_K:
            return matmul_q6_k_avx2;
    }
    return nullptr;
}

}  // namespace

const KernelTable& avx2_kernels() {
    static const KernelTable table{find, quantize_act32_avx2, quantize_act256_avx2};
    return table;
}

}  // namespace pelican::cpu::detail
