// The blocks of CudaHybridForward (cuda_hybrid_forward.h) for one micro-batch of n <= kMicro tokens:
// Gated DeltaNet, gated attention, MoE, dense MLP; mirrors backend/cpu/hybrid_blocks.cpp. Everything is
// graph-capturable (the one-token step is captured): no allocation, no host synchronisation.
#include <algorithm>
#include <cstdlib>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_hybrid_forward.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/layer_args.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_fused.h"
#include "backend/cuda/tuning.h"
#include "model/model.h"

namespace pelican::cuda {

void CudaHybridForward::gemv_parts(const std::vector<GpuPart>& parts, const float* norm, int n, float* y,
                                   int64_t width, bool glu_single) {
    for (const GpuPart& p : parts) {
        GemvArgs a;
        a.x = x_;
        a.n_tok = n;
        a.norm_w = norm;
        a.norm_eps = hp_.rms_eps;
        a.norm_one_plus = true;  // every norm is zero-centred (create() takes no other model)
        a.glu = glu_single;
        a.y = y + p.row0;
        a.y_stride = width;
        gemv(p.m, a, stream_);
    }
}

// The DeltaNet step over n tokens of proj_ (z, b, a columns) and conv_ (Q|K|V after the conv) into
// core_, for the state of recurrent slot `slot`.
DeltaNetStepArgs CudaHybridForward::deltanet_args(const GpuLayer& L, int slot, int n) const {
    DeltaNetStepArgs d = deltanet_layer_args(hp_, L.linear, proj_, w_dn_, conv_, core_, n);
    d.state = ssm_state(slot);
    return d;
}

// Tuning fused_combine off: the decode step's MoE closes with moe_combine instead of the down GEMV's tail.
static bool fused_combine_enabled() { return cuda_tuning().fused_combine; }

void CudaHybridForward::deltanet_layer(const GpuLayer& L, int slot, int n) {
    const int64_t cd = hp_.deltanet.linear.conv_dim();
    // proj_ rows [w_dn_]: [Q|K|V (cd) | z (vd) | b (nv) | a (nv)] = W rms_norm_zc(x); conv_ = the
    // conv + SiLU of the Q|K|V columns (or the conv inside deltanet_step, reading proj_).
    gemv_parts(L.linear.in_proj, L.attn_norm, n, proj_, w_dn_, false);
    DeltaNetStepArgs d = deltanet_args(L, slot, n);
    if (conv_fold_) {  // decided once at creation (init)
        d.conv_out = nullptr;
        d.conv_in = proj_;
        d.conv_in_stride = w_dn_;
        d.conv_w = L.linear.conv;
        d.conv_state = conv_state(slot);
        d.conv_kernel = hp_.deltanet.conv_kernel;
    } else {
        conv1d_silu(proj_, w_dn_, n, cd, hp_.deltanet.conv_kernel, L.linear.conv, conv_state(slot), conv_,
                    stream_);
    }
    deltanet_step(d, stream_);
    // x += W_out core
    GemvArgs o;
    o.x = core_;
    o.n_tok = n;
    o.residual = x_;
    o.y = x_;
    gemv(L.linear.out, o, stream_);
}

void CudaHybridForward::attention_layer(const GpuLayer& L, int slot, int n, const int32_t* pos) {
    const int64_t Q = hp_.q_dim(), KV = hp_.kv_dim();
    // proj_ rows [w_at_]: [q | k | v | gate] = W rms_norm_zc(x)
    gemv_parts(L.attn.qkv, L.attn_norm, n, proj_, w_at_, false);
    RopeStoreArgs r = rope_store_args(hp_, *gm_, rope_table_, proj_, n, pos, kv(slot));
    r.row_stride = w_at_;  // rows [q | k | v | gate]
    r.q_norm = L.attn.q_norm;
    r.k_norm = L.attn.k_norm;
    r.norm_one_plus = true;
    rope_store_kv(r, stream_);
    AttnArgs at = decode_attn_args(hp_, proj_, w_at_, n, pos, kv(slot), core_);
    at.workspace = attn_ws_;
    attention_decode(at, stream_);
    sigmoid_gate_mul(core_, Q, proj_ + Q + 2 * KV, w_at_, n, Q, stream_);
    GemvArgs o;
    o.x = core_;
    o.n_tok = n;
    o.residual = x_;
    o.y = x_;
    gemv(L.attn.wo, o, stream_);
}

// Rows of stacked parts.
static int64_t parts_rows(const std::vector<GpuPart>& parts) {
    int64_t r = 0;
    for (const GpuPart& p : parts) r += p.m.n_out;
    return r;
}

void CudaHybridForward::swiglu_mlp(const std::vector<GpuPart>& gate_up, const GpuMatrix& down,
                                   const float* norm, int n, float* y, const float* residual) {
    const int64_t ff = parts_rows(gate_up) / 2;
    if (gate_up.size() == 1) {  // act_ = silu(gate) * up in the GEMV epilogue
        gemv_parts(gate_up, norm, n, act_, ff, true);
    } else {
        gemv_parts(gate_up, norm, n, gu_, 2 * ff, false);
        swiglu_stacked(gu_, act_, n, ff, stream_);
    }
    GemvArgs d;
    d.x = act_;
    d.n_tok = n;
    d.residual = residual;
    d.y = y;
    gemv(down, d, stream_);
}

void CudaHybridForward::mlp_block(const GpuLayer& L, int n, bool chunk) {
    if (chunk) {
        rms_norm(x_, L.ffn_norm, xn_, n, hp_.n_embd, hp_.rms_eps, /*one_plus=*/true, stream_);
        mm_swiglu(L.mlp.gate_up, L.mlp.down, n, x_, true);
    } else {
        swiglu_mlp(L.mlp.gate_up, L.mlp.down, L.ffn_norm, n, x_, x_);
    }
}

// The fused decode router (moe_router_route) takes one stacked F32 router of n_expert + 1 rows (the
// shared gate's last) with 16-byte aligned rows and x; PELICAN_FUSED_ROUTER=0 turns it off.
bool CudaHybridForward::fused_router_ok(const GpuLayer& L) const {
    if (!moe_router_fused_enabled() || L.moe.router.size() != 1) return false;
    const GpuMatrix& r = L.moe.router[0].m;
    return r.type == DType::F32 && r.n_out == hp_.moe.n_expert + 1 && r.n_in == hp_.n_embd &&
           hp_.n_embd % 4 == 0 && hp_.n_embd <= kMoeRouterMaxEmbd && gpu_matrix_f32_row_floats(r) % 4 == 0 &&
           reinterpret_cast<uintptr_t>(gpu_matrix_f32_rows(r)) % 16 == 0;
}

bool CudaHybridForward::fused_moe_ok(const GpuLayer& L) const {
    return std::find(fused_moe_layers_.begin(), fused_moe_layers_.end(), &L) != fused_moe_layers_.end();
}

bool CudaHybridForward::fused_moe_check(const GpuLayer& L) const {
    return L.moe.shared_in_experts && fused_router_ok(L) &&
           moe_fused_use(L.moe.experts_gate_up, L.moe.experts_down, hp_.n_embd, hp_.moe.n_ff_expert,
                         hp_.moe.n_expert, hp_.moe.n_expert_used);
}

// One token: router, top-k, the chosen and the shared experts' gate/up and down rows and the combine,
// x += MoE(rms_norm_zc(x)), in one kernel.
void CudaHybridForward::moe_fused_block(const GpuLayer& L) {
    const GpuMatrix& r = L.moe.router[0].m;
    MoeFusedArgs a;
    a.x = x_;
    a.n_embd = hp_.n_embd;
    a.norm_w = L.ffn_norm;
    a.eps = hp_.rms_eps;
    a.norm_one_plus = true;
    a.router_w = gpu_matrix_f32_rows(r);
    a.router_stride = gpu_matrix_f32_row_floats(r);
    a.n_expert = hp_.moe.n_expert;
    a.k = hp_.moe.n_expert_used;
    a.renormalize = true;
    a.gate_up = L.moe.experts_gate_up;
    a.down = L.moe.experts_down;
    a.n_ff = hp_.moe.n_ff_expert;
    a.logits = router_;
    a.ids = ids_;
    a.weights = wts_;
    a.act = eact_;
    a.barrier = moe_bar_;
    moe_fused_decode(a, stream_);
}

void CudaHybridForward::moe_block(const GpuLayer& L, int n, bool chunk) {
    if (n == 1 && !chunk && fused_moe_ok(L)) {
        moe_fused_block(L);
        return;
    }
    const int64_t E = hp_.n_embd;
    const int n_exp = hp_.moe.n_expert, k = hp_.moe.n_expert_used;
    // router_ rows [n_exp + 1]: expert logits, then the shared expert's gate logit.
    // With the shared expert stacked as expert n_exp it is slot k of every token (weight sigmoid(g)).
    const bool shared_slot = L.moe.shared_in_experts;
    const int ko = shared_slot ? k + 1 : k;  // slots per token
    if (chunk) {                             // prompt chunk: xn_ = rms_norm_zc(x), the router as a GEMM
        rms_norm(x_, L.ffn_norm, xn_, n, E, hp_.rms_eps, /*one_plus=*/true, stream_);
        prefill_parts(mm_, L.moe.router, xn_, n, router_, n_exp + 1, tmp_, stream_);
        moe_route(router_, n_exp + 1, n, n_exp, k, /*renormalize=*/true, ids_, wts_, stream_, shared_slot);
    } else if (n == 1 && fused_router_ok(L)) {  // decode: router GEMV + top-k in one kernel
        const GpuMatrix& r = L.moe.router[0].m;
        MoeRouterArgs a;
        a.x = x_;
        a.n_embd = E;
        a.norm_w = L.ffn_norm;
        a.eps = hp_.rms_eps;
        a.norm_one_plus = true;
        a.w = gpu_matrix_f32_rows(r);
        a.w_stride = gpu_matrix_f32_row_floats(r);
        a.n_rows = static_cast<int>(r.n_out);
        a.logits = router_;
        a.n_expert = n_exp;
        a.k = k;
        a.renormalize = true;
        a.shared_slot = shared_slot;
        a.ids = ids_;
        a.weights = wts_;
        a.counter = router_ctr_;
        moe_router_route(a, stream_);
    } else {
        gemv_parts(L.moe.router, L.ffn_norm, n, router_, n_exp + 1, false);
        moe_route(router_, n_exp + 1, n, n_exp, k, /*renormalize=*/true, ids_, wts_, stream_, shared_slot);
    }
    // Expert slots: slot t * ko + j is token t's j-th expert (x of token t = slot / ko): their SwiGLU.
    MoeCombineArgs c;
    if (chunk && grouped_) {
        moe_grouped_experts(L, n, ko);
        c.expert_out = eoutg_;
        c.slot_row = slot_row_;
    } else if (n == 1 && !chunk && shared_slot && fused_combine_enabled()) {
        // Decode: the down GEMV's last CTA per row group writes x += sum_j w_j y_j (no moe_combine).
        moe_slot_experts(L, n, ko, chunk, /*fused_combine=*/true);
        return;
    } else {
        moe_slot_experts(L, n, ko, chunk);
        c.expert_out = eout_;
    }
    // x += sum_j w_j y_j over the slots [+ sigmoid(shared gate) * shared expert, run on its own].
    c.n_tok = n;
    c.n_embd = E;
    c.k = ko;
    c.weights = wts_;
    c.residual = x_;
    c.y = x_;
    if (!shared_slot) {
        if (chunk)
            mm_swiglu(L.moe.shared_gate_up, L.moe.shared_down, n, sout_, false);
        else
            swiglu_mlp(L.moe.shared_gate_up, L.moe.shared_down, L.ffn_norm, n, sout_, nullptr);
        c.shared_out = sout_;
        c.shared_gate_logit = router_ + n_exp;
        c.shared_gate_stride = n_exp + 1;
    }
    moe_combine(c, stream_);
}

// One expert-slot GEMV pair over n tokens x ko slots (eact_, eout_ rows = slots).
void CudaHybridForward::moe_slot_experts(const GpuLayer& L, int n, int ko, bool chunk, bool fused_combine) {
    const int64_t E = hp_.n_embd, ff_e = hp_.moe.n_ff_expert;
    ExpertSlotCombine comb;
    if (fused_combine) comb = {comb_ctr_, wts_, x_, x_};  // one token: x += sum_j w_j y_j in the GEMV's tail
    // Prompt chunks: xn_ holds rms_norm_zc(x) already; else the norm is the GEMV's prologue.
    expert_slot_gemvs(L.moe, chunk ? xn_ : x_, chunk ? nullptr : L.ffn_norm, hp_.rms_eps,
                      /*norm_one_plus=*/true, ids_, n * ko, ko, E, ff_e, eact_, eout_, stream_, comb);
}

// Tuning moe_mma off: grouped experts of prompt chunks through the GEMVs, not the tensor-core kernel.
static bool moe_mma_enabled() { return cuda_tuning().moe_mma; }

// Prompt chunks: the n x ko slots grouped by expert (moe_group_slots), the normed rows gathered per
// group (xg_), then the expert GEMVs with 8 token rows per group, each chosen expert read once per
// group: eactg_, eoutg_ rows = groups x 8 (slot s at row slot_row_[s]).
void CudaHybridForward::moe_grouped_experts(const GpuLayer& L, int n, int ko) {
    const int64_t E = hp_.n_embd, ff_e = hp_.moe.n_ff_expert;
    const int slots = n * ko, n_ids = hp_.moe.n_expert + (L.moe.shared_in_experts ? 1 : 0);
    const int groups = moe_group_max_groups(slots, n_ids);
    const int64_t rows = static_cast<int64_t>(groups) * kMoeGroupRows;
    MoeGroupArgs ga;
    ga.ids = ids_;
    ga.n_slots = slots;
    ga.n_experts = n_ids;
    ga.max_groups = groups;
    ga.group_expert = group_expert_;
    ga.slot_row = slot_row_;
    ga.row_slot = row_slot_;
    moe_group_slots(ga, stream_);
    moe_gather_rows(xn_, E, ko, row_slot_, group_expert_, rows, xg_, stream_);
    // One expert stack over the groups: on tensor cores when the kernel takes its type (Q4_0, Q4_K), else
    // through the grouped GEMVs; both write rows g * 8 + i of y, n_out floats apart (so a Q4_K_M model's
    // Q6_K down stack can take the GEMVs while its gate/up stack takes the tensor cores).
    const bool mma = moe_mma_enabled();
    grouped_expert_stack(L.moe.experts_gate_up, true, 2 * ff_e, E, ff_e, group_expert_, groups, xg_, eactg_,
                         stream_, mma);
    grouped_expert_stack(L.moe.experts_down, false, E, ff_e, E, group_expert_, groups, eactg_, eoutg_,
                         stream_, mma);
}

// MTP rows (cuda_hybrid_forward.h mtp_eval): x = fc([norm_embd(embd[ids]) | norm_hidden(mtp_hidden_)]),
// the MTP decoder layer over its own KV slot (n_full_), logits = LM head(norm(x)) into mtp_logits_ (the
// last row in row 0, or every row).
void CudaHybridForward::enqueue_mtp(int n, const int32_t* ids, const int32_t* pos, bool all_rows) {
    const GpuMtp& M = gm_->mtp();
    const int64_t E = hp_.n_embd;
    const size_t row = static_cast<size_t>(E) * sizeof(float);
    get_rows(gm_->tok_embd(), gm_->tok_embd_type(), E, gm_->tok_embd_row_bytes(), ids, n, hp_.embd_scale, x_,
             stream_);
    rms_norm(x_, M.norm_embd, core_, n, E, hp_.rms_eps, /*one_plus=*/true, stream_);
    PELICAN_CUDA_CHECK(cudaMemcpy2DAsync(mtp_cat_, 2 * row, core_, row, row, static_cast<size_t>(n),
                                         cudaMemcpyDeviceToDevice, stream_));
    rms_norm(mtp_hidden_, M.norm_hidden, core_, n, E, hp_.rms_eps, /*one_plus=*/true, stream_);
    PELICAN_CUDA_CHECK(cudaMemcpy2DAsync(mtp_cat_ + E, 2 * row, core_, row, row, static_cast<size_t>(n),
                                         cudaMemcpyDeviceToDevice, stream_));
    GemvArgs fc;
    fc.x = mtp_cat_;
    fc.n_tok = n;
    fc.y = x_;
    gemv(M.fc, fc, stream_);
    attention_layer(M.layer, n_full_, n, pos);
    if (M.layer.kind.ffn == Ffn::kMoe)
        moe_block(M.layer, n);
    else
        mlp_block(M.layer, n);
    if (all_rows)
        lm_head(x_, n, M.norm, mtp_logits_);
    else
        lm_head(x_ + static_cast<int64_t>(n - 1) * E, 1, M.norm, mtp_logits_);
}

void CudaHybridForward::enqueue_micro(int n, const int32_t* ids, const int32_t* pos, bool all_rows,
                                      bool logits) {
    const int64_t E = hp_.n_embd;
    get_rows(gm_->tok_embd(), gm_->tok_embd_type(), E, gm_->tok_embd_row_bytes(), ids, n, hp_.embd_scale, x_,
             stream_);
    for (int il = 0; il < hp_.n_layer; ++il) {
        const GpuLayer& L = gm_->layer(il);
        if (L.kind.mixer == Mixer::kGatedAttention)
            attention_layer(L, kv_slot_[static_cast<size_t>(il)], n, pos);
        else
            deltanet_layer(L, rec_slot_[static_cast<size_t>(il)], n);
        if (L.kind.ffn == Ffn::kMoe)
            moe_block(L, n);
        else
            mlp_block(L, n);
    }
    if (!logits) return;  // a prompt micro-batch before the last: nobody reads its logits
    // logits = W_out rms_norm_zc(x): the last row into logits_ row 0, or every row.
    if (all_rows)
        lm_head(x_, n);
    else
        lm_head(x_ + static_cast<int64_t>(n - 1) * E, 1);
}

void CudaHybridForward::lm_head(const float* x, int n, const float* norm, float* y) {
    GemvArgs h;
    h.x = x;
    h.n_tok = n;
    h.norm_w = norm ? norm : gm_->output_norm();
    h.norm_eps = hp_.rms_eps;
    h.norm_one_plus = true;
    h.scale = hp_.logit_scale;
    h.y = y ? y : logits_;
    gemv(gm_->output(), h, stream_);
}

}  // namespace pelican::cuda
