// The AVX2 kernel table (compiled with AVX2 flags; only called when active_isa() >= kAvx2).
#include "backend/cpu/matmul_kernels.h"
#include "ops/act_quant.h"

namespace pelican::cpu::detail {
namespace {

MatmulKernel find(WType, WLayout) { return nullptr; }

}  // namespace

const KernelTable& avx2_kernels() {
    static const KernelTable table{find, ref::quantize_act_q32, ref::quantize_act_q256};
    return table;
}

}  // namespace pelican::cpu::detail
