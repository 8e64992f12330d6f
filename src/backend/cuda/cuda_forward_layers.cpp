// The {attention, SwiGLU} block on the GPU, mirroring backend/cpu/cpu_executor_layer.cpp: the decode step
// (GEMVs with fused norm / bias / residual / glu, captured in a graph) and the prefill chunk (cuBLAS).
#include <algorithm>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/layer_args.h"
#include "model/model.h"

namespace pelican::cuda {

// ---- shared per-layer arguments ---------------------------------------------------------------

RopeStoreArgs CudaForward::rope_args(int il, int n_tok, const int32_t* pos) const {
    const GpuLayer& L = gm_->layer(il);
    RopeStoreArgs r = rope_store_args(hp_, *gm_, rope_table_, qkv_, n_tok, pos, kv(il));
    r.q_norm = L.attn.q_norm;
    r.k_norm = L.attn.k_norm;
    return r;
}

AttnArgs CudaForward::attn_args(int il, int n_tok, const int32_t* pos) const {
    return decode_attn_args(hp_, qkv_, qkv_w_, n_tok, pos, kv(il), attn_);
}

// ---- decode step (graph-capturable: no host interaction, inputs read from step_in_) -------------

void CudaForward::enqueue_step() {
    const int64_t E = hp_.n_embd, FF = hp_.n_ff;
    const float eps = hp_.rms_eps;
    const int32_t* tok = &step_in_->token;
    const int32_t* pos = &step_in_->pos;
    get_rows(gm_->tok_embd(), gm_->tok_embd_type(), E, gm_->tok_embd_row_bytes(), tok, 1, hp_.embd_scale, x_,
             stream_);
    for (int il = 0; il < hp_.n_layer; ++il) {
        const GpuLayer& L = gm_->layer(il);
        // q | k | v = W (rms_norm(x)) + b
        for (const GpuPart& p : L.attn.qkv) {
            GemvArgs a;
            a.x = x_;
            a.norm_w = L.attn_norm;
            a.norm_eps = eps;
            a.bias = L.attn.b_qkv ? L.attn.b_qkv + p.row0 : nullptr;
            a.y = qkv_ + p.row0;
            a.y_stride = qkv_w_;
            gemv(p.m, a, stream_);
        }
        rope_store_kv(rope_args(il, 1, pos), stream_);
        AttnArgs at = attn_args(il, 1, pos);
        at.workspace = attn_ws_;
        attention_decode(at, stream_);

        // x += residual_scale * (W_o attn + b_o)
        GemvArgs o;
        o.x = attn_;
        o.bias = L.attn.b_o;
        o.scale = hp_.residual_scale;
        o.residual = x_;
        o.y = x_;
        gemv(L.attn.wo, o, stream_);

        // act = silu(gate) * up of W (rms_norm(x)) + b
        if (L.mlp.gate_up.size() == 1) {
            GemvArgs g;
            g.x = x_;
            g.norm_w = L.ffn_norm;
            g.norm_eps = eps;
            g.bias = L.mlp.b_gate_up;
            g.glu = true;
            g.y = act_;
            gemv(L.mlp.gate_up[0].m, g, stream_);
        } else {
            for (const GpuPart& p : L.mlp.gate_up) {
                GemvArgs g;
                g.x = x_;
                g.norm_w = L.ffn_norm;
                g.norm_eps = eps;
                g.bias = L.mlp.b_gate_up ? L.mlp.b_gate_up + p.row0 : nullptr;
                g.y = gu_ + p.row0;
                g.y_stride = 2 * FF;
                gemv(p.m, g, stream_);
            }
            swiglu_stacked(gu_, act_, 1, FF, stream_);
        }
        // x += residual_scale * (W_down act + b_down)
        GemvArgs d;
        d.x = act_;
        d.bias = L.mlp.b_down;
        d.scale = hp_.residual_scale;
        d.residual = x_;
        d.y = x_;
        gemv(L.mlp.down, d, stream_);
    }
    // logits = logit_scale * W_out rms_norm(x)
    GemvArgs h;
    h.x = x_;
    h.norm_w = gm_->output_norm();
    h.norm_eps = eps;
    h.scale = hp_.logit_scale;
    h.y = logits_;
    gemv(gm_->output(), h, stream_);
}

// ---- prefill ------------------------------------------------------------------------------------

void CudaForward::prefill_layer(int il, int64_t n, int64_t pos0, const int32_t* pos_dev) {
    const GpuLayer& L = gm_->layer(il);
    const int64_t E = hp_.n_embd, FF = hp_.n_ff;
    const float eps = hp_.rms_eps;

    rms_norm(x_, L.attn_norm, xn_, n, E, eps, false, stream_);
    prefill_parts(mm_, L.attn.qkv, xn_, n, qkv_, qkv_w_, tmp_, stream_);
    if (L.attn.b_qkv) add_bias(qkv_, L.attn.b_qkv, n, qkv_w_, stream_);
    rope_store_kv(rope_args(il, static_cast<int>(n), pos_dev), stream_);
    const AttnArgs at = attn_args(il, static_cast<int>(n), pos_dev);
    attention_prefill(at, pos0, stream_);

    mm_.run(L.attn.wo, attn_, n, proj_, stream_);
    if (L.attn.b_o) add_bias(proj_, L.attn.b_o, n, E, stream_);
    add_scaled(x_, proj_, hp_.residual_scale, x_, n * E, stream_);

    rms_norm(x_, L.ffn_norm, xn_, n, E, eps, false, stream_);
    prefill_parts(mm_, L.mlp.gate_up, xn_, n, gu_, 2 * FF, tmp_, stream_);
    if (L.mlp.b_gate_up) add_bias(gu_, L.mlp.b_gate_up, n, 2 * FF, stream_);
    swiglu_stacked(gu_, act_, n, FF, stream_);
    mm_.run(L.mlp.down, act_, n, proj_, stream_);
    if (L.mlp.b_down) add_bias(proj_, L.mlp.b_down, n, E, stream_);
    add_scaled(x_, proj_, hp_.residual_scale, x_, n * E, stream_);
}

void CudaForward::prefill_chunk(int64_t n, int64_t pos0, const int32_t* ids_dev, const int32_t* pos_dev,
                                float* all_logits) {
    const int64_t E = hp_.n_embd, V = hp_.n_vocab;
    const float eps = hp_.rms_eps;
    get_rows(gm_->tok_embd(), gm_->tok_embd_type(), E, gm_->tok_embd_row_bytes(), ids_dev,
             static_cast<int>(n), hp_.embd_scale, x_, stream_);
    for (int il = 0; il < hp_.n_layer; ++il) prefill_layer(il, n, pos0, pos_dev);

    if (!all_logits) {
        rms_norm(x_ + (n - 1) * E, gm_->output_norm(), xn_, 1, E, eps, false, stream_);
        mm_.run(gm_->output(), xn_, 1, logits_, stream_);
        if (hp_.logit_scale != 1.0f) scale(logits_, hp_.logit_scale, logits_, V, stream_);
        return;
    }
    // Every row: groups of kLogitRows through logits_, each copied out to the host.
    const int64_t R = std::min<int64_t>(n_batch_, kLogitRows);
    for (int64_t r0 = 0; r0 < n; r0 += R) {
        const int64_t rows = std::min(R, n - r0);
        rms_norm(x_ + r0 * E, gm_->output_norm(), xn_, rows, E, eps, false, stream_);
        mm_.run(gm_->output(), xn_, rows, logits_, stream_);
        if (hp_.logit_scale != 1.0f) scale(logits_, hp_.logit_scale, logits_, rows * V, stream_);
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(all_logits + r0 * V, logits_,
                                           static_cast<size_t>(rows * V) * sizeof(float),
                                           cudaMemcpyDeviceToHost, stream_));
        if (r0 + rows == n && rows > 1)  // the last token's logits stay in row 0
            PELICAN_CUDA_CHECK(cudaMemcpyAsync(logits_, logits_ + (rows - 1) * V,
                                               static_cast<size_t>(V) * sizeof(float),
                                               cudaMemcpyDeviceToDevice, stream_));
    }
}

}  // namespace pelican::cuda
