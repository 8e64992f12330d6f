// The dense block of CudaExecutor (cuda_executor.h) over a step's rows: the fused-GEMV form for
// steps of at most gemv_rows() rows, the cuBLAS form above; paged attention; the output head.
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
    for (int il = 0; il < hp_.n_layer; ++il) {
        if (hybrid_)
            hybrid_layer(il, n, st, table_stride, max_kv);
        else if (n <= gemv_rows_)
            layer_gemv(il, static_cast<int>(n), st.kv(kv_slot_[static_cast<size_t>(il)]), table_stride,
                       max_kv);
        else
            layer_gemm(il, n, st.kv(kv_slot_[static_cast<size_t>(il)]), table_stride, max_kv);
    }
    head(n_out);
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

void CudaExecutor::layer_gemv(int il, int n, const KvView& kv, int64_t table_stride, int64_t max_kv) {
    const GpuLayer& L = gm_->layer(il);
    const int64_t FF = hp_.n_ff;
    const float eps = hp_.rms_eps;
    // q | k | v = W (rms_norm(x)) + b
    for (const GpuPart& p : L.qkv) {
        GemvArgs a;
        a.x = x_;
        a.n_tok = n;
        a.norm_w = L.attn_norm;
        a.norm_eps = eps;
        a.bias = L.b_qkv ? L.b_qkv + p.row0 : nullptr;
        a.y = qkv_ + p.row0;
        a.y_stride = qkv_w_;
        gemv(p.m, a, stream_);
    }
    RopeStoreArgs r = rope_store_args(hp_, *gm_, rope_table_, qkv_, n, nullptr, kv);
    r.q_norm = L.q_norm;
    r.k_norm = L.k_norm;
    r.row_pos = pos_;
    r.row_slot = slot_;
    rope_store_kv(r, stream_);
    attention(n, kv, table_stride, max_kv, qkv_, qkv_w_);

    // x += residual_scale * (W_o attn + b_o)
    GemvArgs o;
    o.x = attn_;
    o.n_tok = n;
    o.bias = L.b_o;
    o.scale = hp_.residual_scale;
    o.residual = x_;
    o.y = x_;
    gemv(L.wo, o, stream_);

    // act = silu(gate) * up of W (rms_norm(x)) + b
    if (L.gate_up.size() == 1) {
        GemvArgs g;
        g.x = x_;
        g.n_tok = n;
        g.norm_w = L.ffn_norm;
        g.norm_eps = eps;
        g.bias = L.b_gate_up;
        g.glu = true;
        g.y = act_;
        gemv(L.gate_up[0].m, g, stream_);
    } else {
        for (const GpuPart& p : L.gate_up) {
            GemvArgs g;
            g.x = x_;
            g.n_tok = n;
            g.norm_w = L.ffn_norm;
            g.norm_eps = eps;
            g.bias = L.b_gate_up ? L.b_gate_up + p.row0 : nullptr;
            g.y = gu_ + p.row0;
            g.y_stride = 2 * FF;
            gemv(p.m, g, stream_);
        }
        swiglu_stacked(gu_, act_, n, FF, stream_);
    }
    // x += residual_scale * (W_down act + b_down)
    GemvArgs d;
    d.x = act_;
    d.n_tok = n;
    d.bias = L.b_down;
    d.scale = hp_.residual_scale;
    d.residual = x_;
    d.y = x_;
    gemv(L.down, d, stream_);
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

void CudaExecutor::layer_gemm(int il, int64_t n, const KvView& kv, int64_t table_stride, int64_t max_kv) {
    const GpuLayer& L = gm_->layer(il);
    const int64_t E = hp_.n_embd, FF = hp_.n_ff;
    const float eps = hp_.rms_eps;

    rms_norm(x_, L.attn_norm, xn_, n, E, eps, false, stream_);
    matmul_parts(L.qkv, xn_, n, qkv_, qkv_w_);
    if (L.b_qkv) add_bias(qkv_, L.b_qkv, n, qkv_w_, stream_);
    RopeStoreArgs r = rope_store_args(hp_, *gm_, rope_table_, qkv_, static_cast<int>(n), nullptr, kv);
    r.q_norm = L.q_norm;
    r.k_norm = L.k_norm;
    r.row_pos = pos_;
    r.row_slot = slot_;
    rope_store_kv(r, stream_);
    attention(n, kv, table_stride, max_kv, qkv_, qkv_w_);

    matmul(L.wo, attn_, n, proj_, E);
    if (L.b_o) add_bias(proj_, L.b_o, n, E, stream_);
    add_scaled(x_, proj_, hp_.residual_scale, x_, n * E, stream_);

    rms_norm(x_, L.ffn_norm, xn_, n, E, eps, false, stream_);
    matmul_parts(L.gate_up, xn_, n, gu_, 2 * FF);
    if (L.b_gate_up) add_bias(gu_, L.b_gate_up, n, 2 * FF, stream_);
    swiglu_stacked(gu_, act_, n, FF, stream_);
    matmul(L.down, act_, n, proj_, E);
    if (L.b_down) add_bias(proj_, L.b_down, n, E, stream_);
    add_scaled(x_, proj_, hp_.residual_scale, x_, n * E, stream_);
}

// logits [n_out, V] = logit_scale * W_out rms_norm(x[out_rows]); the normed rows stay in xn_ (not
// with the fused head: then the norm is the GEMV's prologue and xn_ is not written).
void CudaExecutor::head(int64_t n_out) {
    if (n_out == 0) return;
    const int64_t E = hp_.n_embd, V = hp_.n_vocab;
    const bool zc = hybrid_;  // the hybrid stack's norms are zero-centred (1 + w)
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
