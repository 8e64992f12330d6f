// The prompt path of CudaHybridForward (cuda_hybrid_forward.h): every layer over a chunk of up to
// chunk_ tokens at once instead of micro-batches of kMicro. The projections run as cuBLAS GEMMs
// (PrefillMatmul) on rms_norm_zc(x); the causal conv runs over the whole chunk in one launch and the
// DeltaNet recurrence in its chunked form (deltanet_chunked, chunks of 64; PELICAN_DN_CHUNKED=0:
// deltanet_step, token by token inside one kernel); the gated
// attention writes its K/V rows and runs flash attention over the cache (attention_prefill), so the
// cache is read once per chunk instead of once per 8 tokens; the routed experts still run in
// expert-slot GEMVs (one slot per token and choice). Not graph-captured.
#include <algorithm>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_hybrid_forward.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/layer_args.h"
#include "model/model.h"

namespace pelican::cuda {

void CudaHybridForward::mm_residual(const GpuMatrix& w, const float* x, int n) {
    mm_.run(w, x, n, tmp_, stream_);
    add_scaled(x_, tmp_, 1.0f, x_, static_cast<int64_t>(n) * hp_.n_embd, stream_);
}

void CudaHybridForward::mm_swiglu(const std::vector<GpuPart>& gate_up, const GpuMatrix& down, int n, float* y,
                                  bool residual) {
    int64_t rows = 0;
    for (const GpuPart& p : gate_up) rows += p.m.n_out;
    const int64_t ff = rows / 2;
    prefill_parts(mm_, gate_up, xn_, n, gu_, 2 * ff, tmp_, stream_);  // [gate | up] per token
    swiglu_stacked(gu_, act_, n, ff, stream_);
    if (residual)
        mm_residual(down, act_, n);
    else
        mm_.run(down, act_, n, y, stream_);
}

void CudaHybridForward::chunk_deltanet(const GpuLayer& L, int slot, int n) {
    const int64_t cd = hp_.deltanet.linear.conv_dim();
    rms_norm(x_, L.attn_norm, xn_, n, hp_.n_embd, hp_.rms_eps, /*one_plus=*/true, stream_);
    prefill_parts(mm_, L.linear.in_proj, xn_, n, proj_, w_dn_, tmp_,
                  stream_);  // [Q|K|V | z | b | a] rows of w_dn_
    conv1d_silu(proj_, w_dn_, n, cd, hp_.deltanet.conv_kernel, L.linear.conv, conv_state(slot), conv_,
                stream_);
    if (dn_scratch_)
        deltanet_chunked(deltanet_args(L, slot, n), dn_scratch_, stream_);
    else
        deltanet_step(deltanet_args(L, slot, n), stream_);
    mm_residual(L.linear.out, core_, n);
}

void CudaHybridForward::chunk_attention(const GpuLayer& L, int slot, int n, const int32_t* pos,
                                        int64_t pos0) {
    const int64_t Q = hp_.q_dim(), KV = hp_.kv_dim();
    rms_norm(x_, L.attn_norm, xn_, n, hp_.n_embd, hp_.rms_eps, /*one_plus=*/true, stream_);
    prefill_parts(mm_, L.attn.qkv, xn_, n, proj_, w_at_, tmp_, stream_);  // [q | k | v | gate] rows of w_at_
    RopeStoreArgs r = rope_store_args(hp_, *gm_, rope_table_, proj_, n, pos, kv(slot));
    r.row_stride = w_at_;
    r.q_norm = L.attn.q_norm;
    r.k_norm = L.attn.k_norm;
    r.norm_one_plus = true;
    rope_store_kv(r, stream_);
    const AttnArgs at = decode_attn_args(hp_, proj_, w_at_, n, pos, kv(slot), core_);
    attention_prefill(at, pos0, stream_);
    sigmoid_gate_mul(core_, Q, proj_ + Q + 2 * KV, w_at_, n, Q, stream_);
    mm_residual(L.attn.wo, core_, n);
}

void CudaHybridForward::enqueue_chunk(int n, const int32_t* ids, const int32_t* pos, int64_t pos0) {
    get_rows(gm_->tok_embd(), gm_->tok_embd_type(), hp_.n_embd, gm_->tok_embd_row_bytes(), ids, n,
             hp_.embd_scale, x_, stream_);
    for (int il = 0; il < hp_.n_layer; ++il) {
        const GpuLayer& L = gm_->layer(il);
        if (L.kind.mixer == Mixer::kGatedAttention)
            chunk_attention(L, kv_slot_[static_cast<size_t>(il)], n, pos, pos0);
        else
            chunk_deltanet(L, rec_slot_[static_cast<size_t>(il)], n);
        if (L.kind.ffn == Ffn::kMoe)
            moe_block(L, n, /*chunk=*/true);
        else
            mlp_block(L, n, /*chunk=*/true);
    }
}

}  // namespace pelican::cuda
