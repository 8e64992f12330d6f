// The shared transformer block (one implementation for every Llama-family architecture):
// RMSNorm -> GQA attention with rope over the KV cache -> residual -> RMSNorm -> SwiGLU MLP ->
// residual. Variants come from the weights present (biases, q/k norms) and the hyper-parameters
// (rope layout and frequencies, sliding window, granite multipliers).
#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "model/forward.h"

namespace pelican {
namespace {

// Element-wise work on [n_rows, width] split into row chunks over the pool when it is large
// (prefill); small inputs (decode) run on the calling thread. fn(row0, n_rows).
template <typename F>
void over_rows(ThreadPool& pool, int64_t n_rows, int64_t width, F&& fn) {
    constexpr int64_t kMinChunk = 1 << 15;  // floats per task
    const int64_t rows_per = std::max<int64_t>(1, kMinChunk / std::max<int64_t>(width, 1));
    const int64_t n_tasks = (n_rows + rows_per - 1) / rows_per;
    if (n_tasks <= 1 || pool.size() == 1) return fn(int64_t{0}, n_rows);
    pool.parallel_for(n_tasks, [&](int64_t task, int) {
        const int64_t r0 = task * rows_per;
        fn(r0, std::min(rows_per, n_rows - r0));
    });
}

// x += s * y over [n_rows, width] (y is scaled in place when s != 1).
void residual_add(ThreadPool& pool, float* x, float* y, float s, int64_t n_rows, int64_t width) {
    over_rows(pool, n_rows, width, [&](int64_t r0, int64_t nr) {
        float* xr = x + r0 * width;
        float* yr = y + r0 * width;
        if (s != 1.0f) cpu::scale(yr, s, yr, nr * width);
        cpu::add(xr, yr, xr, nr * width);
    });
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
    {  // one pass: the activations are quantized once, one thread barrier instead of three
        const cpu::Weight* ws[3] = {&L.wq, &L.wk, &L.wv};
        float* ys[3] = {q_, k, v};
        cpu::matmul_multi(ws, xn_, n, ys, mm, pool);
    }
    if (L.bq) cpu::add_bias(q_, L.bq, n, qd);
    if (L.bk) cpu::add_bias(k, L.bk, n, kvd);
    if (L.bv) cpu::add_bias(v, L.bv, n, kvd);
    if (L.q_norm) {  // per-head RMSNorm over head_dim (qwen3)
        cpu::rms_norm(q_, L.q_norm, q_, n * nh, hd, hp_.rms_eps, NormWeight::kPlain, &pool);
        cpu::rms_norm(k, L.k_norm, k, n * nkv, hd, hp_.rms_eps, NormWeight::kPlain, &pool);
    }
    const int64_t half = n_rot / 2;
    over_rows(pool, n, qd + kvd, [&](int64_t t0, int64_t nt) {
        const float* c = cos_ + t0 * half;
        const float* sn = sin_ + t0 * half;
        cpu::rope(q_ + t0 * qd, nt, nh, hd, qd, n_rot, c, sn, hp_.rope_layout);
        cpu::rope(k + t0 * kvd, nt, nkv, hd, kvd, n_rot, c, sn, hp_.rope_layout);
    });
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
    residual_add(pool, x_, proj_, hp_.residual_scale, n, e);
    tap("ffn_inp", il, pos0, n, e, x_);

    // ---- SwiGLU MLP ----
    cpu::rms_norm(x_, L.ffn_norm, xn_, n, e, hp_.rms_eps, NormWeight::kPlain, &pool);
    tap("ffn_norm", il, pos0, n, e, xn_);
    {
        const cpu::Weight* ws[2] = {&L.w_gate, &L.w_up};
        float* ys[2] = {gate_, up_};
        cpu::matmul_multi(ws, xn_, n, ys, mm, pool);
    }
    if (L.b_gate) cpu::add_bias(gate_, L.b_gate, n, ff);
    if (L.b_up) cpu::add_bias(up_, L.b_up, n, ff);
    over_rows(pool, n, ff, [&](int64_t r0, int64_t nr) {
        cpu::swiglu(gate_ + r0 * ff, up_ + r0 * ff, gate_ + r0 * ff, nr * ff);
    });
    tap("ffn_act", il, pos0, n, ff, gate_);
    cpu::matmul(L.w_down, gate_, n, proj_, mm, pool);
    if (L.b_down) cpu::add_bias(proj_, L.b_down, n, e);
    tap("ffn_out", il, pos0, n, e, proj_);
    residual_add(pool, x_, proj_, hp_.residual_scale, n, e);
    tap("l_out", il, pos0, n, e, x_);
}

}  // namespace pelican
