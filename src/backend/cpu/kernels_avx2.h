// AVX2 kernels (defined in the *_avx2.cpp files). Call only when active_isa() >= kAvx2.
#pragma once

#include "backend/cpu/matmul_kernels.h"

namespace pelican::cpu::detail {

void quantize_act32_avx2(const float* x, int64_t n, int8_t* qs, float* d, float* s);
void quantize_act256_avx2(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsum);

void matmul_q4_0_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void matmul_q8_0_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void matmul_f32_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void matmul_f16_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void matmul_bf16_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void matmul_q4_k_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void matmul_q5_k_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);
void matmul_q6_k_avx2(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

}  // namespace pelican::cpu::detail
