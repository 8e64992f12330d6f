// One value head of the CPU delta rule (deltanet_cpu.h) as the kernels of deltanet_kernels.h see it.
// Plain types only: included by the AVX-512 translation unit, which must not instantiate shared
// templates (the linker could keep its copy for the portable build).
#pragma once

#include <cstdint>

namespace pelican::cpu::detail {

// Token t's q / k at q + t * qk_stride (the head's key head), v / out rows v_stride / out_stride apart,
// g / beta gb_stride apart; S [d_k, d_v] (out; the input state from S_in when set).
struct DnHead {
    const float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
    int64_t qk_stride = 0, v_stride = 0, gb_stride = 0, out_stride = 0;
    float* out = nullptr;
    float* S = nullptr;
    const float* S_in = nullptr;  // the state before the first token when not S (token-by-token form only)
    int dk = 0, dv = 0;
    int64_t n_tok = 0;
};
inline constexpr int kDnChunk = 64;
// Floats of one thread's scratch for heads of d_k, d_v.
constexpr int64_t dn_scratch_floats(int dk, int dv) {
    const int64_t C = kDnChunk;
    return C * dk + 2 * C * C + C * dv * 2 + C * dk + dv + 64;
}

}  // namespace pelican::cpu::detail
