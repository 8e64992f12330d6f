// The layers of CudaExecutor (cuda_executor.h) over a step's rows, each by its kinds: the per-layer
// dispatch, attention (plain and gated) through the pages, the SwiGLU MLP, the projections (the
// fused-GEMV form for steps of at most gemv_rows() rows, qmatmul / cuBLAS above) and the output head.
// Gated DeltaNet and MoE are in cuda_executor_hybrid.cpp.
#include <algorithm>

#include <cuda_runtime.h>

#include "backend/cuda/attention_paged.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/layer_args.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/qmatmul.h"
#include "model/model.h"

namespace pelican::cuda {

void CudaExecutor::forward(int64_t n, int64_t n_out, const CudaMemoryStorage& st, int64_t table_stride,
                           int64_t max_kv) {
    get_rows(gm_->tok_embd(), gm_->tok_embd_type(), hp_.n_embd, gm_->tok_embd_row_bytes(), ids_,
             static_cast<int>(n), hp_.embd_scale, x_, stream_);
    for (int il = 0; il < hp_.n_layer; ++il) layer(il, n, st, table_stride, max_kv);
    head(n_out);
}

void CudaExecutor::layer(int il, int64_t n, const CudaMemoryStorage& st, int64_t table_stride,
                         int64_t max_kv) {
    const GpuLayer& L = gm_->layer(il);
    const LayerKind& k = hp_.layer[static_cast<size_t>(il)];
    const int64_t E = hp_.n_embd;
    const bool gemm = n > gemv_rows_;
    if (gemm) rms_norm(x_, L.attn_norm, xn_, n, E, hp_.rms_eps, norm_one_plus_, stream_);
    switch (k.mixer) {
        case Mixer::kAttention:
        case Mixer::kGatedAttention:
            attention_block(L, n, st.kv(kv_slot_[static_cast<size_t>(il)]), table_stride, max_kv);
            break;
        case Mixer::kDeltaNet:
            deltanet_block(L, rec_slot_[static_cast<size_t>(il)], n, st);
            break;
    }
    if (gemm) rms_norm(x_, L.ffn_norm, xn_, n, E, hp_.rms_eps, norm_one_plus_, stream_);
    switch (k.ffn) {
        case Ffn::kSwiglu:
            swiglu_block(L.mlp.gate_up, L.mlp.down, L.ffn_norm, L.mlp.b_gate_up, L.mlp.b_down, n, x_,
                         /*residual=*/true);
            break;
        case Ffn::kMoe:
            moe_block(L, n);
            break;
    }
}

// q rows (rope applied) -> attn_ through the pages; K/V rows were stored by rope_store_kv.
void CudaExecutor::attention(int64_t n, const KvView& kv, int64_t table_stride, int64_t max_kv,
                             const float* q, int64_t q_stride) {
    PagedAttnArgs a;
    a.q = q;
    a.q_stride = q_stride;
    a.n_rows = static_cast<int>(n);
    a.n_head = static_cast<int>(hp_.n_head);
    a.n_kv_head = static_cast<int>(hp_.n_head_kv);
    a.head_dim = static_cast<int>(hp_.head_dim);
    a.scale = hp_.attn_scale;
    a.window = hp_.sliding_window;
    a.row_pos = pos_;
    a.row_table = row_table_;
    a.tables = tables_;
    a.max_blocks = static_cast<int>(table_stride);
    a.k_pool = kv.k;
    a.v_pool = kv.v;
    a.type = kv.type;
    a.out = attn_;
    a.workspace = attn_ws_;
    a.workspace_bytes = attn_ws_bytes_;
    a.max_kv = max_kv;
    a.max_seq_rows = static_cast<int>(max_seq_rows_);
    a.block_tokens = block_tokens_;
    attention_paged(a, stream_);
}

void CudaExecutor::attention_block(const GpuLayer& L, int64_t n, const KvView& kv, int64_t table_stride,
                                   int64_t max_kv) {
    const int64_t Q = hp_.q_dim(), KV = hp_.kv_dim();
    const bool gated = L.kind.mixer == Mixer::kGatedAttention;
    // qkv_ rows [w]: [q | k | v] (+ b_qkv), gated: [q | k | v | gate]
    const int64_t w = Q + 2 * KV + (gated ? Q : 0);
    project(L.attn.qkv, L.attn_norm, n, qkv_, w, L.attn.b_qkv);
    RopeStoreArgs r = rope_store_args(hp_, *gm_, rope_table_, qkv_, static_cast<int>(n), nullptr, kv);
    if (gated) r.row_stride = w;  // the gate columns after v are left alone
    r.q_norm = L.attn.q_norm;
    r.k_norm = L.attn.k_norm;
    r.norm_one_plus = norm_one_plus_;
    r.row_pos = pos_;
    r.row_slot = slot_;
    rope_store_kv(r, stream_);
    attention(n, kv, table_stride, max_kv, qkv_, w);
    if (gated) sigmoid_gate_mul(attn_, Q, qkv_ + Q + 2 * KV, w, n, Q, stream_);
    // x += residual_scale * (W_o attn + b_o)
    out_residual(L.attn.wo, attn_, n, L.attn.b_o);
}

void CudaExecutor::project(const std::vector<GpuPart>& parts, const float* norm, int64_t n, float* y,
                           int64_t width, const float* bias) {
    if (n > gemv_rows_) {
        matmul_parts(parts, xn_, n, y, width);
        if (bias) add_bias(y, bias, n, width, stream_);
        return;
    }
    for (const GpuPart& p : parts) {  // y = W (rms_norm(x)) + b
        GemvArgs a;
        a.x = x_;
        a.n_tok = static_cast<int>(n);
        a.norm_w = norm;
        a.norm_eps = hp_.rms_eps;
        a.norm_one_plus = norm_one_plus_;
        a.bias = bias ? bias + p.row0 : nullptr;
        a.y = y + p.row0;
        a.y_stride = width;
        gemv(p.m, a, stream_);
    }
}

void CudaExecutor::out_residual(const GpuMatrix& w, const float* in, int64_t n, const float* bias) {
    const int64_t E = hp_.n_embd;
    if (n > gemv_rows_) {
        matmul(w, in, n, proj_, E);
        if (bias) add_bias(proj_, bias, n, E, stream_);
        add_scaled(x_, proj_, hp_.residual_scale, x_, n * E, stream_);
        return;
    }
    GemvArgs o;
    o.x = in;
    o.n_tok = static_cast<int>(n);
    o.bias = bias;
    o.scale = hp_.residual_scale;
    o.residual = x_;
    o.y = x_;
    gemv(w, o, stream_);
}

void CudaExecutor::swiglu_block(const std::vector<GpuPart>& gate_up, const GpuMatrix& down, const float* norm,
                                const float* b_gate_up, const float* b_down, int64_t n, float* y,
                                bool residual) {
    int64_t ff = 0;
    for (const GpuPart& p : gate_up) ff += p.m.n_out;
    ff /= 2;
    if (n <= gemv_rows_ && gate_up.size() == 1) {  // act_ = silu(gate) * up in the GEMV's epilogue
        GemvArgs g;
        g.x = x_;
        g.n_tok = static_cast<int>(n);
        g.norm_w = norm;
        g.norm_eps = hp_.rms_eps;
        g.norm_one_plus = norm_one_plus_;
        g.bias = b_gate_up;
        g.glu = true;
        g.y = act_;
        gemv(gate_up[0].m, g, stream_);
    } else {
        project(gate_up, norm, n, gu_, 2 * ff, b_gate_up);
        swiglu_stacked(gu_, act_, n, ff, stream_);
    }
    // x += residual_scale * (W_down act + b_down), or y = W_down act + b_down
    if (residual) {
        out_residual(down, act_, n, b_down);
        return;
    }
    if (n > gemv_rows_) {
        matmul(down, act_, n, y, hp_.n_embd);
        if (b_down) add_bias(y, b_down, n, hp_.n_embd, stream_);
        return;
    }
    GemvArgs d;
    d.x = act_;
    d.n_tok = static_cast<int>(n);
    d.bias = b_down;
    d.y = y;
    gemv(down, d, stream_);
}

// y [n, width] (row stride y_stride) = x W^T: the tensor-core kernel with dequantization in registers
// where it takes the matrix (qmatmul.h), else cuBLAS (quantized types through f16 tiles).
void CudaExecutor::matmul(const GpuMatrix& w, const float* x, int64_t n, float* y, int64_t y_stride) {
    if (qmatmul_supported(w)) {
        qmatmul(w, x, w.n_in, static_cast<int>(n), y, y_stride, qmm_ws_, qmm_ws_bytes_, stream_);
        return;
    }
    if (y_stride == w.n_out) {
        mm_.run(w, x, n, y, stream_);
        return;
    }
    mm_.run(w, x, n, tmp_, stream_);
    const size_t row_bytes = static_cast<size_t>(w.n_out) * sizeof(float);
    PELICAN_CUDA_CHECK(cudaMemcpy2DAsync(y, static_cast<size_t>(y_stride) * sizeof(float), tmp_, row_bytes,
                                         row_bytes, static_cast<size_t>(n), cudaMemcpyDeviceToDevice,
                                         stream_));
}

void CudaExecutor::matmul_parts(const std::vector<GpuPart>& parts, const float* x, int64_t n, float* y,
                                int64_t width) {
    for (const GpuPart& p : parts) matmul(p.m, x, n, y + p.row0, width);
}

// logits [n_out, V] = logit_scale * W_out rms_norm(x[out_rows]); the normed rows stay in xn_ (not
// with the fused head: then the norm is the GEMV's prologue and xn_ is not written).
void CudaExecutor::head(int64_t n_out) {
    if (n_out == 0) return;
    const int64_t E = hp_.n_embd, V = hp_.n_vocab;
    const bool zc = norm_one_plus_;
    if (fused_head_) {
        GemvArgs h;
        h.x = x_;
        h.n_tok = static_cast<int>(n_out);
        h.norm_w = gm_->output_norm();
        h.norm_eps = hp_.rms_eps;
        h.norm_one_plus = zc;
        h.scale = hp_.logit_scale;
        h.y = logits_;
        gemv(gm_->output(), h, stream_);
        return;
    }
    moe_gather_rows(x_, E, 1, out_rows_, nullptr, n_out, proj_, stream_);
    rms_norm(proj_, gm_->output_norm(), xn_, n_out, E, hp_.rms_eps, zc, stream_);
    if (n_out <= gemv_rows_) {
        GemvArgs h;
        h.x = xn_;
        h.n_tok = static_cast<int>(n_out);
        h.scale = hp_.logit_scale;
        h.y = logits_;
        gemv(gm_->output(), h, stream_);
        return;
    }
    matmul(gm_->output(), xn_, n_out, logits_, V);
    if (hp_.logit_scale != 1.0f) scale(logits_, hp_.logit_scale, logits_, n_out * V, stream_);
}

}  // namespace pelican::cuda
