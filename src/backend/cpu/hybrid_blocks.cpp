// HybridBlocks (backend/cpu/hybrid_blocks.h): the hybrid Qwen3.5 blocks over rows of a step.
#include "backend/cpu/hybrid_blocks.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/deltanet_cpu.h"
#include "backend/cpu/qwen35_ops.h"
#include "ops/ops_qwen35.h"

namespace pelican::cpu {

HybridBlocks::HybridBlocks(const ModelHParams& hp, int64_t max_rows) : hp_(hp) {
    const auto B = static_cast<size_t>(max_rows);
    const auto e = static_cast<size_t>(hp.n_embd), q = static_cast<size_t>(hp.q_dim());
    const DeltaNetShape& s = hp_.deltanet.linear;
    const auto cd = static_cast<size_t>(s.conv_dim()), kd = static_cast<size_t>(s.key_dim()),
               vd = static_cast<size_t>(s.value_dim()), nv = static_cast<size_t>(s.n_v_heads);
    const auto ff = static_cast<size_t>(std::max({hp.n_ff, hp_.moe.n_ff_shared, hp_.moe.n_ff_expert}));
    const auto k = static_cast<size_t>(std::max(hp_.moe.n_expert_used, 1));
    q_.resize(B * q), gate_.resize(B * q), attn_.resize(B * q), qg_.resize(2 * B * q);
    qkv_.resize(B * cd), conv_out_.resize(B * cd), z_.resize(B * vd);
    lq_.resize(B * kd), lk_.resize(B * kd), lv_.resize(B * vd), core_.resize(B * vd);
    a_.resize(B * nv), b_.resize(B * nv), g_.resize(B * nv), beta_.resize(B * nv);
    ff_a_.resize(B * ff), ff_b_.resize(B * ff);
    router_.resize(B * static_cast<size_t>(std::max(hp_.moe.n_expert, 1))), route_w_.resize(B * k);
    route_id_.resize(B * k);
    sel_tok_.resize(B), sel_w_.resize(B), gather_.resize(B * e), sh_gate_.resize(B);
    expert_out_.resize(B * e);
}

void HybridBlocks::deltanet_project(const DeltaNetWeights& W, const float* xn, int64_t n, ThreadPool& pool) {
    const Weight* ws[4] = {&W.in_qkv, &W.in_z, &W.in_b, &W.in_a};
    float* ys[4] = {qkv_.data(), z_.data(), b_.data(), a_.data()};
    for (int i = 0; i < 4; ++i) matmul(*ws[i], xn, n, ys[i], pool);
}

void HybridBlocks::deltanet_core(const DeltaNetWeights& W, int64_t row0, int64_t n, float* conv_state,
                                 float* ssm_state, bool chunked, ThreadPool& pool, const float* ssm_in) {
    const DeltaNetShape& s = hp_.deltanet.linear;
    const int64_t cd = s.conv_dim(), kd = s.key_dim(), vd = s.value_dim(), nv = s.n_v_heads;
    float* co = conv_out_.data() + row0 * cd;
    causal_conv1d_silu(qkv_.data() + row0 * cd, n, cd, hp_.deltanet.conv_kernel, W.conv, conv_state, co);
    float* q = lq_.data() + row0 * kd;
    float* k = lk_.data() + row0 * kd;
    float* v = lv_.data() + row0 * vd;
    for (int64_t t = 0; t < n; ++t) {  // channels [Q | K | V]
        const float* c = co + t * cd;
        std::copy(c, c + kd, q + t * kd);
        std::copy(c + kd, c + 2 * kd, k + t * kd);
        std::copy(c + 2 * kd, c + cd, v + t * vd);
    }
    l2norm(q, n * s.n_k_heads, s.d_k);
    l2norm(k, n * s.n_k_heads, s.d_k);
    scale(q, 1.0f / std::sqrt(static_cast<float>(s.d_k)), q, n * kd);
    float* g = g_.data() + row0 * nv;
    float* beta = beta_.data() + row0 * nv;
    deltanet_gates(a_.data() + row0 * nv, b_.data() + row0 * nv, W.a_log, W.dt_bias, n, static_cast<int>(nv),
                   g, beta);
    float* out = core_.data() + row0 * vd;
    gated_delta_rule(q, k, v, g, beta, n, s, ssm_state, out, chunked, pool, ssm_in);
}

void HybridBlocks::deltanet_finish(const DeltaNetWeights& W, int64_t n, float* out, ThreadPool& pool) {
    const DeltaNetShape& s = hp_.deltanet.linear;
    rms_norm_gated(core_.data(), z_.data(), W.norm, core_.data(), n * s.n_v_heads, s.d_v, hp_.rms_eps);
    matmul(W.out, core_.data(), n, out, pool);
}

void HybridBlocks::attention_project(const AttentionWeights& W, const float* xn, int64_t n, const float* cos,
                                     const float* sin, float* k, float* v, ThreadPool& pool) {
    const int hd = static_cast<int>(hp_.head_dim), nh = static_cast<int>(hp_.n_head);
    const int nkv = static_cast<int>(hp_.n_head_kv), n_rot = static_cast<int>(hp_.rope_dim);
    const int64_t qd = hp_.q_dim(), kvd = hp_.kv_dim();
    matmul(W.wq, xn, n, qg_.data(), pool);
    matmul(W.wk, xn, n, k, pool);
    matmul(W.wv, xn, n, v, pool);
    ref::split_query_gate(qg_.data(), n, nh, hd, q_.data(), gate_.data());
    rms_norm(q_.data(), W.q_norm, q_.data(), n * nh, hd, hp_.rms_eps, NormWeight::kOnePlus, &pool);
    rms_norm(k, W.k_norm, k, n * nkv, hd, hp_.rms_eps, NormWeight::kOnePlus, &pool);
    rope(q_.data(), n, nh, hd, qd, n_rot, cos, sin, RopeLayout::kNeox);
    rope(k, n, nkv, hd, kvd, n_rot, cos, sin, RopeLayout::kNeox);
}

void HybridBlocks::attention_finish(const AttentionWeights& W, int64_t n, float* out, ThreadPool& pool) {
    sigmoid_mul(attn_.data(), gate_.data(), n * hp_.q_dim());
    matmul(W.wo, attn_.data(), n, out, pool);
}

namespace {

// y [n, n_embd] = down(silu(gate x) * up x); a, b: [n, n_ff] scratch.
void swiglu_mlp(const SwigluWeights& W, const float* x, int64_t n, float* a, float* b, float* y,
                ThreadPool& pool) {
    matmul(W.gate, x, n, a, pool);
    matmul(W.up, x, n, b, pool);
    swiglu(a, b, a, n * W.gate.n_out());
    matmul(W.down, a, n, y, pool);
}

}  // namespace

void HybridBlocks::moe(const MoeWeights& W, const float* xn, int64_t n, float* out, ThreadPool& pool) {
    const int64_t e = hp_.n_embd;
    const int E = hp_.moe.n_expert, k = hp_.moe.n_expert_used;
    matmul(W.router, xn, n, router_.data(), pool);
    ref::moe_route(router_.data(), n, E, k, /*renormalize=*/true, route_id_.data(), route_w_.data());

    // Shared expert, scaled by its sigmoid gate, starts the sum.
    swiglu_mlp(W.shared, xn, n, ff_a_.data(), ff_b_.data(), out, pool);
    matmul(W.shared_gate, xn, n, sh_gate_.data(), pool);
    for (int64_t t = 0; t < n; ++t) {
        const float sg = 1.0f / (1.0f + std::exp(-sh_gate_[static_cast<size_t>(t)]));
        scale(out + t * e, sg, out + t * e, e);
    }
    // Routed experts: only the selected ones run, each on the rows of the tokens that chose it.
    float* eo = expert_out_.data();  // [m, n_embd] one expert's outputs
    for (int x = 0; x < E; ++x) {
        int64_t m = 0;
        for (int64_t t = 0; t < n; ++t)
            for (int j = 0; j < k; ++j)
                if (route_id_[static_cast<size_t>(t * k + j)] == x) {
                    sel_tok_[static_cast<size_t>(m)] = static_cast<int32_t>(t);
                    sel_w_[static_cast<size_t>(m)] = route_w_[static_cast<size_t>(t * k + j)];
                    std::copy(xn + t * e, xn + (t + 1) * e, gather_.data() + m * e);
                    ++m;
                }
        if (m == 0) continue;
        swiglu_mlp(W.experts[static_cast<size_t>(x)], gather_.data(), m, ff_a_.data(), ff_b_.data(), eo,
                   pool);
        for (int64_t r = 0; r < m; ++r) {
            float* dst = out + int64_t{sel_tok_[static_cast<size_t>(r)]} * e;
            const float wr = sel_w_[static_cast<size_t>(r)];
            for (int64_t i = 0; i < e; ++i) dst[i] += wr * eo[r * e + i];
        }
    }
}

}  // namespace pelican::cpu
