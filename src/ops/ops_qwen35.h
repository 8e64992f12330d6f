// Scalar reference ops of the Qwen3.5 / Qwen3-Next hybrid blocks (conventions as in ops/ops.h):
// the Gated DeltaNet (causal depthwise conv with rolling state, L2 norm, decay/β gates, the
// delta-rule state update token by token and in chunks), RMSNormGated, the gated-attention
// helpers and the MoE router / expert evaluation. Formulas follow transformers'
// modeling_qwen3_5_moe.py (../shared/research/formats-architectures.md §1.3–1.6).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace pelican {

// Head layout of one Gated DeltaNet layer. Value head h reads key head h / (n_v_heads / n_k_heads)
// (transformers' repeat_interleave: value heads grouped by key head), or h % n_k_heads when
// v_tiled (llama.cpp's GGUF order: the converter reorders every per-value-head row and column so
// that ggml's tiled broadcast applies; the function is the same).
struct DeltaNetShape {
    int n_k_heads = 0;     // query/key heads (divides n_v_heads)
    int n_v_heads = 0;     // value heads
    int d_k = 0;           // key/query head width
    int d_v = 0;           // value head width
    bool v_tiled = false;  // value head order: false = grouped by key head (HF), true = tiled (GGUF)

    int key_head(int h) const { return v_tiled ? h % n_k_heads : h / (n_v_heads / n_k_heads); }

    int64_t key_dim() const { return int64_t{n_k_heads} * d_k; }
    int64_t value_dim() const { return int64_t{n_v_heads} * d_v; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // [Q | K | V] channels
    int64_t state_floats() const { return int64_t{n_v_heads} * d_k * d_v; }
};

namespace ref {

// ---- causal depthwise conv ------------------------------------------------------------------------
// x [n_tok, n_ch] (this step's inputs), w [n_ch, kernel] (conv1d.weight [n_ch, 1, kernel]),
// state [kernel-1, n_ch]: the previous kernel-1 inputs, oldest first (zeros for a new sequence).
//   y[t, c] = silu( sum_{j<kernel} w[c, j] * xx[t + j, c] ),  xx = concat(state, x) along time
// Afterwards state holds the last kernel-1 rows of xx. y [n_tok, n_ch]; y must not alias x or state.
void causal_conv1d_silu(const float* x, int64_t n_tok, int64_t n_ch, int kernel, const float* w, float* state,
                        float* y);

// ---- small element-wise pieces ---------------------------------------------------------------------
// Per row of x [n_rows, n], in place: x *= 1 / sqrt(sum(x^2) + eps)  (transformers' l2norm, eps 1e-6).
void l2norm(float* x, int64_t n_rows, int64_t n, float eps = 1e-6f);
// Per token t and value head h (a, b [n_tok, n_heads]; a_log, dt_bias [n_heads]):
//   beta[t, h] = sigmoid(b[t, h]);   g[t, h] = -exp(a_log[h]) * softplus(a[t, h] + dt_bias[h])  (<= 0)
void deltanet_gates(const float* a, const float* b, const float* a_log, const float* dt_bias, int64_t n_tok,
                    int n_heads, float* g, float* beta);
// RMSNormGated per row of x, z [n_rows, n] (one value head per row), w [n]:
//   y = w * x / sqrt(mean(x^2) + eps) * silu(z).  y may equal x.
void rms_norm_gated(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                    float eps);
// x[i] *= sigmoid(gate[i]) for i < n (the gated attention output).
void sigmoid_gate_mul(float* x, const float* gate, int64_t n);
// Splits q_proj's output qg [n_tok, n_head, 2 * head_dim] (per head: head_dim query dims, then
// head_dim gate dims) into q [n_tok, n_head, head_dim] and gate [n_tok, n_head * head_dim].
void split_query_gate(const float* qg, int64_t n_tok, int n_head, int head_dim, float* q, float* gate);

// ---- gated delta rule ------------------------------------------------------------------------------
// q, k [n_tok, n_k_heads, d_k] (already L2-normed; q already scaled by 1/sqrt(d_k)),
// v [n_tok, n_v_heads, d_v], g, beta [n_tok, n_v_heads], state S [n_v_heads, d_k, d_v] fp32 (in/out).
// Per token and value head, with kh = h / (n_v_heads / n_k_heads):
//   S <- S * exp(g);  u = S^T k;  d = beta * (v - u);  S <- S + k d^T;  out = S^T q
// out [n_tok, n_v_heads, d_v]. Sums in double, state stored in fp32 after every token.
void gated_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g,
                                const float* beta, int64_t n_tok, const DeltaNetShape& s, float* state,
                                float* out);
// The same function in chunks of `chunk` tokens (the prefill form; the last chunk may be short).
// Per chunk and value head, with gamma_i = cumsum(g) inside the chunk:
//   A_ij = (beta_i k_i . k_j) exp(gamma_i - gamma_j) for j < i;   (I + A) U = beta v;
//   (I + A) W = beta k exp(gamma);   v' = U - W S;
//   out_i = exp(gamma_i) q_i^T S + sum_{j<=i} (q_i . k_j) exp(gamma_i - gamma_j) v'_j;
//   S <- exp(gamma_last) S + sum_j exp(gamma_last - gamma_j) k_j v'_j^T.
// Equal to gated_delta_rule_recurrent up to rounding; the state is stored in fp32 once per chunk.
void gated_delta_rule_chunked(const float* q, const float* k, const float* v, const float* g,
                              const float* beta, int64_t n_tok, const DeltaNetShape& s, float* state,
                              float* out, int chunk = 64);

// ---- mixture of experts ------------------------------------------------------------------------------
// Router: per token row of logits [n_tok, n_expert], p = softmax in fp32 (exp sums in double, then
// rounded to fp32 as transformers' softmax(dtype=float) gives them); the k largest p (ties: lower
// expert id first), sorted by p descending, renormalised to sum 1 when renormalize (qwen3_5_moe
// always). ids [n_tok, k], weights [n_tok, k].
void moe_route(const float* logits, int64_t n_tok, int n_expert, int k, bool renormalize, int32_t* ids,
               float* weights);

// One expert's SwiGLU MLP as 2-D GGUF tensors (ne = {n_in, n_out}): gate, up [n_ff, n_embd], down [n_embd,
// n_ff].
struct ExpertTensors {
    Tensor gate, up, down;
};
// y[t] = sum_{j<k} weights[t, j] * down_e(silu(gate_e x_t) * up_e x_t) with e = ids[t, j], evaluated
// only for the selected experts. x [n_tok, n_embd], y [n_tok, n_embd] (overwritten).
void moe_experts(const float* x, int64_t n_tok, int64_t n_embd, std::span<const ExpertTensors> experts,
                 const int32_t* ids, const float* weights, int k, float* y);

}  // namespace ref
}  // namespace pelican
