// The AVX-512 kernel table. (Compiled with AVX-512 flags like the kernels: only called when
// active_isa() is kAvx512.)
#include "backend/cpu/kernels_avx512.h"

namespace pelican::cpu::detail {
namespace {

MatmulKernel find(WType t, WLayout layout) {
    if (layout == WLayout::kInterleave16) {
        if (t == WType::Q4_0) return matmul_q4_0_ilv_avx512;
        if (t == WType::Q8_0) return matmul_q8_0_ilv_avx512;
        return nullptr;
    }
    switch (t) {
        case WType::F32:
            return matmul_f32_avx512;
        case WType::F16:
            return matmul_f16_avx512;
        case WType::BF16:
            return matmul_bf16_avx512;
        case WType::Q4_K:
            return matmul_q4_k_avx512;
        case WType::Q5_K:
            return matmul_q5_k_avx512;
        case WType::Q6_K:
            return matmul_q6_k_avx512;
        default:
            return nullptr;  // Q4_0 / Q8_0 rows: next table down
    }
}

}  // namespace

const KernelTable& avx512_kernels() {
    static const KernelTable table{find, quantize_act32_avx512, quantize_act256_avx512};
    return table;
}

}  // namespace pelican::cpu::detail
