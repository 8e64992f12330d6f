// The shared transformer block (one implementation for every Llama-family architecture):
// RMSNorm -> GQA attention with rope over the KV cache -> residual -> RMSNorm -> SwiGLU MLP ->
// residual. Variants come from the weights present (biases, q/k norms) and the hyper-parameters
// (rope layout and frequencies, sliding window, granite multipliers).
#include "backend/cpu/cpu_ops.h"
#include "model/forward.h"

namespace pelican {
namespace {

// x += s * y over n floats (y is scaled in place when s != 1).
void residual_add(float* x, float* y, float s, int64_t n) {
    if (s != 1.0f) cpu::scale(y, s, y, n);
    cpu::add(x, y, x, n);
}

}  // namespace

void Forward::layer(int il, int64_t n, int64_t pos0, ThreadPool& pool) {
    const LayerWeights& L = model_.weights().layers[static_cast<size_t>(il)];
    const int64_t e = hp_.n_embd, qd = hp_.q_dim(), kvd = hp_.kv_dim(), ff = hp_.n_ff;
    const int hd = static_cast<int>(hp_.head_dim), nh = static_cast<int>(hp_.n_head);
    const int nkv = static_cast<int>(hp_.n_head_kv), n_rot = static_cast<int>(hp_.rope_dim);
    std::span<std::byte> mm = mm_scratch_;

    // ---- attention ----
    cpu::rms_norm(x_, L.attn_norm, xn_, n, e, hp_.rms_eps, NormWeight::kPlain, &pool);
    tap("attn_norm", il, pos0, n, e, xn_);
    // K and V rows go straight into the cache at positions pos0 .. pos0 + n - 1.
    float* k = kv_.k(il) + pos0 * kvd;  // [n, n_head_kv, head_dim]
    float* v = kv_.v(il) + pos0 * kvd;
    cpu::matmul(L.wq, xn_, n, q_, mm, pool);
    cpu::matmul(L.wk, xn_, n, k, mm, pool);
    cpu::matmul(L.wv, xn_, n, v, mm, pool);
    if (L.bq) cpu::add_bias(q_, L.bq, n, qd);
    if (L.bk) cpu::add_bias(k, L.bk, n, kvd);
    if (L.bv) cpu::add_bias(v, L.bv, n, kvd);
    if (L.q_norm) {  // per-head RMSNorm over head_dim (qwen3)
        cpu::rms_norm(q_, L.q_norm, q_, n * nh, hd, hp_.rms_eps, NormWeight::kPlain, &pool);
        cpu::rms_norm(k, L.k_norm, k, n * nkv, hd, hp_.rms_eps, NormWeight::kPlain, &pool);
    }
    cpu::rope(q_, n, nh, hd, qd, n_rot, cos_, sin_, hp_.rope_layout);
    cpu::rope(k, n, nkv, hd, kvd, n_rot, cos_, sin_, hp_.rope_layout);
    tap("q", il, pos0, n, qd, q_);
    tap("k", il, pos0, n, kvd, k);
    tap("v", il, pos0, n, kvd, v);

    AttentionParams ap;
    ap.n_head = nh;
    ap.n_kv_head = nkv;
    ap.head_dim = hd;
    ap.scale = hp_.attn_scale;
    ap.kv_type = DType::F32;
    ap.window = hp_.sliding_window;
    cpu::attention(q_, kv_.k(il), kv_.v(il), pos0, n, ap, attn_, pool);
    tap("attn", il, pos0, n, qd, attn_);

    cpu::matmul(L.wo, attn_, n, proj_, mm, pool);
    if (L.bo) cpu::add_bias(proj_, L.bo, n, e);
    tap("attn_out", il, pos0, n, e, proj_);
    residual_add(x_, proj_, hp_.residual_scale, n * e);
    tap("ffn_inp", il, pos0, n, e, x_);

    // ---- SwiGLU MLP ----
    cpu::rms_norm(x_, L.ffn_norm, xn_, n, e, hp_.rms_eps, NormWeight::kPlain, &pool);
    tap("ffn_norm", il, pos0, n, e, xn_);
    cpu::matmul(L.w_gate, xn_, n, gate_, mm, pool);
    cpu::matmul(L.w_up, xn_, n, up_, mm, pool);
    if (L.b_gate) cpu::add_bias(gate_, L.b_gate, n, ff);
    if (L.b_up) cpu::add_bias(up_, L.b_up, n, ff);
    cpu::swiglu(gate_, up_, gate_, n * ff);
    tap("ffn_act", il, pos0, n, ff, gate_);
    cpu::matmul(L.w_down, gate_, n, proj_, mm, pool);
    if (L.b_down) cpu::add_bias(proj_, L.b_down, n, e);
    tap("ffn_out", il, pos0, n, e, proj_);
    residual_add(x_, proj_, hp_.residual_scale, n * e);
    tap("l_out", il, pos0, n, e, x_);
}

}  // namespace pelican
