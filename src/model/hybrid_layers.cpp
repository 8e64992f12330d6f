// The blocks of the hybrid Qwen3.5 forward pass (model/hybrid_forward.h): Gated DeltaNet, gated full
// attention, MoE and dense MLP. Each reads the normed input xn_ [n, n_embd] and writes proj_ [n, n_embd].
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "model/hybrid_forward.h"
#include "ops/ops_qwen35.h"

namespace pelican {

void HybridForward::deltanet(int il, int64_t n, ThreadPool& pool) {
    const DeltaNetWeights& W = w_.layers[static_cast<size_t>(il)].linear;
    const DeltaNetShape& s = hy_.linear;
    const int64_t cd = s.conv_dim(), kd = s.key_dim(), vd = s.value_dim(), nv = s.n_v_heads;
    {
        const cpu::Weight* ws[4] = {&W.in_qkv, &W.in_z, &W.in_b, &W.in_a};
        float* ys[4] = {qkv_.data(), z_.data(), b_.data(), a_.data()};
        for (int i = 0; i < 4; ++i) cpu::matmul(*ws[i], xn_.data(), n, ys[i], pool);
    }
    const int slot = rec_index_[static_cast<size_t>(il)];
    ref::causal_conv1d_silu(qkv_.data(), n, cd, hy_.conv_kernel, W.conv, state_.conv(slot), conv_out_.data());
    for (int64_t t = 0; t < n; ++t) {  // channels [Q | K | V]
        const float* c = conv_out_.data() + t * cd;
        std::copy(c, c + kd, lq_.data() + t * kd);
        std::copy(c + kd, c + 2 * kd, lk_.data() + t * kd);
        std::copy(c + 2 * kd, c + cd, lv_.data() + t * vd);
    }
    ref::l2norm(lq_.data(), n * s.n_k_heads, s.d_k);
    ref::l2norm(lk_.data(), n * s.n_k_heads, s.d_k);
    cpu::scale(lq_.data(), 1.0f / std::sqrt(static_cast<float>(s.d_k)), lq_.data(), n * kd);
    ref::deltanet_gates(a_.data(), b_.data(), W.a_log, W.dt_bias, n, static_cast<int>(nv), g_.data(),
                        beta_.data());
    if (n == 1)
        ref::gated_delta_rule_recurrent(lq_.data(), lk_.data(), lv_.data(), g_.data(), beta_.data(), n, s,
                                        state_.ssm(slot), core_.data());
    else
        ref::gated_delta_rule_chunked(lq_.data(), lk_.data(), lv_.data(), g_.data(), beta_.data(), n, s,
                                      state_.ssm(slot), core_.data(), 64);
    ref::rms_norm_gated(core_.data(), z_.data(), W.norm, core_.data(), n * nv, s.d_v, hp_.rms_eps);
    cpu::matmul(W.out, core_.data(), n, proj_.data(), pool);
}

void HybridForward::attention_layer(const HybridLayerWeights& L, float* kc, float* vc, int64_t n,
                                    int64_t pos0, ThreadPool& pool) {
    const int64_t e = hp_.n_embd;
    cpu::rms_norm(x_.data(), L.attn_norm, xn_.data(), n, e, hp_.rms_eps, NormWeight::kOnePlus, &pool);
    attention(L.attn, kc, vc, n, pos0, pool);
    cpu::add(x_.data(), proj_.data(), x_.data(), n * e);
    cpu::rms_norm(x_.data(), L.ffn_norm, xn_.data(), n, e, hp_.rms_eps, NormWeight::kOnePlus, &pool);
    if (hy_.moe)
        moe(L.moe, n, pool);
    else
        mlp(L.mlp, n, pool);
    cpu::add(x_.data(), proj_.data(), x_.data(), n * e);
}

void HybridForward::attention(const GatedAttentionWeights& W, float* kc, float* vc, int64_t n, int64_t pos0,
                              ThreadPool& pool) {
    const int hd = static_cast<int>(hp_.head_dim), nh = static_cast<int>(hp_.n_head);
    const int nkv = static_cast<int>(hp_.n_head_kv), n_rot = static_cast<int>(hp_.rope_dim);
    const int64_t qd = hp_.q_dim(), kvd = hp_.kv_dim();
    float* k = kc + pos0 * kvd;  // this chunk's K/V rows go straight into the cache
    float* v = vc + pos0 * kvd;
    cpu::matmul(W.wq, xn_.data(), n, qg_.data(), pool);
    cpu::matmul(W.wk, xn_.data(), n, k, pool);
    cpu::matmul(W.wv, xn_.data(), n, v, pool);
    ref::split_query_gate(qg_.data(), n, nh, hd, q_.data(), gate_.data());
    cpu::rms_norm(q_.data(), W.q_norm, q_.data(), n * nh, hd, hp_.rms_eps, NormWeight::kOnePlus, &pool);
    cpu::rms_norm(k, W.k_norm, k, n * nkv, hd, hp_.rms_eps, NormWeight::kOnePlus, &pool);
    cpu::rope(q_.data(), n, nh, hd, qd, n_rot, cos_.data(), sin_.data(), RopeLayout::kNeox);
    cpu::rope(k, n, nkv, hd, kvd, n_rot, cos_.data(), sin_.data(), RopeLayout::kNeox);
    AttentionParams ap;
    ap.n_head = nh;
    ap.n_kv_head = nkv;
    ap.head_dim = hd;
    ap.scale = hp_.attn_scale;
    ap.kv_type = DType::F32;
    cpu::attention(q_.data(), kc, vc, pos0, n, ap, attn_.data(), pool);
    ref::sigmoid_gate_mul(attn_.data(), gate_.data(), n * qd);
    cpu::matmul(W.wo, attn_.data(), n, proj_.data(), pool);
}

namespace {

// y [n, n_embd] = down(silu(gate x) * up x); a, b: [n, n_ff] scratch.
void swiglu_mlp(const SwigluWeights& W, const float* x, int64_t n, float* a, float* b, float* y,
                ThreadPool& pool) {
    cpu::matmul(W.gate, x, n, a, pool);
    cpu::matmul(W.up, x, n, b, pool);
    cpu::swiglu(a, b, a, n * W.gate.n_out());
    cpu::matmul(W.down, a, n, y, pool);
}

}  // namespace

void HybridForward::mlp(const SwigluWeights& W, int64_t n, ThreadPool& pool) {
    swiglu_mlp(W, xn_.data(), n, ff_a_.data(), ff_b_.data(), proj_.data(), pool);
}

void HybridForward::moe(const MoeWeights& W, int64_t n, ThreadPool& pool) {
    const int64_t e = hp_.n_embd;
    const int E = hy_.n_expert, k = hy_.n_expert_used;
    cpu::matmul(W.router, xn_.data(), n, router_.data(), pool);
    ref::moe_route(router_.data(), n, E, k, /*renormalize=*/true, route_id_.data(), route_w_.data());

    // Shared expert, scaled by its sigmoid gate, starts the sum.
    swiglu_mlp(W.shared, xn_.data(), n, ff_a_.data(), ff_b_.data(), proj_.data(), pool);
    cpu::matmul(W.shared_gate, xn_.data(), n, sh_gate_.data(), pool);
    for (int64_t t = 0; t < n; ++t) {
        const float sg = 1.0f / (1.0f + std::exp(-sh_gate_[static_cast<size_t>(t)]));
        cpu::scale(proj_.data() + t * e, sg, proj_.data() + t * e, e);
    }
    // Routed experts: only the selected ones run, each on the rows of the tokens that chose it.
    float* out = expert_out_.data();  // [m, n_embd] one expert's outputs
    for (int x = 0; x < E; ++x) {
        int64_t m = 0;
        for (int64_t t = 0; t < n; ++t)
            for (int j = 0; j < k; ++j)
                if (route_id_[static_cast<size_t>(t * k + j)] == x) {
                    sel_tok_[static_cast<size_t>(m)] = static_cast<int32_t>(t);
                    sel_w_[static_cast<size_t>(m)] = route_w_[static_cast<size_t>(t * k + j)];
                    std::copy(xn_.data() + t * e, xn_.data() + (t + 1) * e, gather_.data() + m * e);
                    ++m;
                }
        if (m == 0) continue;
        swiglu_mlp(W.experts[static_cast<size_t>(x)], gather_.data(), m, ff_a_.data(), ff_b_.data(), out,
                   pool);
        for (int64_t r = 0; r < m; ++r) {
            float* dst = proj_.data() + int64_t{sel_tok_[static_cast<size_t>(r)]} * e;
            const float wr = sel_w_[static_cast<size_t>(r)];
            for (int64_t i = 0; i < e; ++i) dst[i] += wr * out[r * e + i];
        }
    }
}

}  // namespace pelican
