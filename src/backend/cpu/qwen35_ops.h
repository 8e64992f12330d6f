// The small Qwen3.5 hybrid pieces on the CPU hot path, in fp32 with vectorised loops (the SIMD
// element-wise kernels of cpu_ops.h), same semantics as the references in ops/ops_qwen35.h (which sum in
// double): the causal conv + SiLU with its rolling state, the L2 norm of q / k heads, the decay / beta
// gates, the gated RMSNorm. The router (ref::moe_route) stays the reference: its double-precision
// softmax decides near-ties exactly as the GPU and transformers do, and it costs a few microseconds.
#pragma once

#include <cstdint>

namespace pelican::cpu {

// As ref::causal_conv1d_silu: x [n_tok, n_ch], w [n_ch, kernel], state [kernel - 1, n_ch] (in/out),
// y [n_tok, n_ch]. kernel in 1..8.
void causal_conv1d_silu(const float* x, int64_t n_tok, int64_t n_ch, int kernel, const float* w, float* state,
                        float* y);
// As ref::l2norm: per row x /= sqrt(sum(x^2) + eps).
void l2norm(float* x, int64_t n_rows, int64_t n, float eps = 1e-6f);
// As ref::deltanet_gates.
void deltanet_gates(const float* a, const float* b, const float* a_log, const float* dt_bias, int64_t n_tok,
                    int n_heads, float* g, float* beta);
// As ref::rms_norm_gated: y = w * x / sqrt(mean(x^2) + eps) * silu(z) per row of n (y may equal x).
void rms_norm_gated(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                    float eps);

}  // namespace pelican::cpu
