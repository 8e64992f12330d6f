// The hybrid Qwen3.5 blocks of CudaExecutor (cuda_executor.h) over a step's rows: Gated DeltaNet with
// every sequence's state in its memory entries, gated attention through the pages, MoE with the shared
// expert, the dense MLP. A step of at most gemv_rows() rows takes the GEMVs (the layer norm as their
// prologue, the residual as their epilogue); a larger one norms once into xn_ and takes qmatmul /
// cuBLAS, with the routed experts grouped by expert across all of the step's rows.
#include <algorithm>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/layer_args.h"
#include "backend/cuda/moe.h"
#include "model/hybrid_hparams.h"
#include "model/model.h"

namespace pelican::cuda {

// Graphed steps (at most the GEMV rows) must never take the chunked form: their launches are replayed.
static_assert(kMaxGemvTokens < CudaExecutor::kDnChunkRows,
              "a GEMV step could take the chunked DeltaNet form");

void CudaExecutor::plan_states(const SequenceMemory& mem, int32_t* run_row0, int32_t* run_conv_in,
                               int32_t* run_rec_in, int32_t* row_state_out) {
    chunk_in_.clear();
    chunk_out_.clear();
    n_states_.clear();
    any_rec_run_ = false;
    const int32_t K = mem.checkpoints();
    int64_t rows = 0;
    for (size_t i = 0; i < runs_.size(); ++i) {
        const SeqRun& r = runs_[i];
        const int32_t in = mem.state_read_entry(r.seq);
        run_row0[i] = static_cast<int32_t>(r.row0);
        run_conv_in[i] = in;
        const bool chunked = r.n >= kDnChunkRows && r.n > K;
        any_rec_run_ = any_rec_run_ || !chunked;
        // States kept: one per token of a run within the checkpoints, else the last one.
        const int64_t ns = !chunked && r.n <= K ? r.n : 1;
        run_rec_in[i] = chunked ? -1 : in;
        chunk_in_.push_back(chunked ? in : -1);
        chunk_out_.push_back(chunked ? mem.state_write_entry(r.seq, 0) : -1);
        n_states_.push_back(static_cast<int32_t>(ns));
        for (int64_t j = 0; j < r.n; ++j)
            row_state_out[r.row0 + j] =
                j >= r.n - ns ? mem.state_write_entry(r.seq, static_cast<int32_t>(j - (r.n - ns))) : -1;
        rows = std::max(rows, r.row0 + r.n);
    }
    run_row0[runs_.size()] = static_cast<int32_t>(rows);
}

void CudaExecutor::hybrid_layer(int il, int64_t n, const CudaMemoryStorage& st, int64_t table_stride,
                                int64_t max_kv) {
    const GpuHybridLayer& L = gm_->hybrid_layer(il);
    const int64_t E = hp_.n_embd;
    const bool gemm = n > gemv_rows_;
    if (gemm) rms_norm(x_, L.attn_norm, xn_, n, E, hp_.rms_eps, /*one_plus=*/true, stream_);
    if (L.full_attention)
        gated_attention_block(L, n, st.kv(kv_slot_[static_cast<size_t>(il)]), table_stride, max_kv);
    else
        deltanet_block(L, rec_slot_[static_cast<size_t>(il)], n, st);
    if (gemm) rms_norm(x_, L.ffn_norm, xn_, n, E, hp_.rms_eps, /*one_plus=*/true, stream_);
    if (hp_.hybrid->moe)
        moe_block(L, n);
    else
        swiglu_block(L.mlp.gate_up, L.mlp.down, L.ffn_norm, n, x_, /*residual=*/true);
}

void CudaExecutor::project(const std::vector<GpuPart>& parts, const float* norm, int64_t n, float* y,
                           int64_t width) {
    if (n > gemv_rows_) {
        matmul_parts(parts, xn_, n, y, width);
        return;
    }
    for (const GpuPart& p : parts) {
        GemvArgs a;
        a.x = x_;
        a.n_tok = static_cast<int>(n);
        a.norm_w = norm;
        a.norm_eps = hp_.rms_eps;
        a.norm_one_plus = true;
        a.y = y + p.row0;
        a.y_stride = width;
        gemv(p.m, a, stream_);
    }
}

void CudaExecutor::out_residual(const GpuMatrix& w, const float* in, int64_t n) {
    if (n > gemv_rows_) {
        matmul(w, in, n, proj_, hp_.n_embd);
        add_scaled(x_, proj_, 1.0f, x_, n * hp_.n_embd, stream_);
        return;
    }
    GemvArgs o;
    o.x = in;
    o.n_tok = static_cast<int>(n);
    o.residual = x_;
    o.y = x_;
    gemv(w, o, stream_);
}

void CudaExecutor::swiglu_block(const std::vector<GpuPart>& gate_up, const GpuMatrix& down, const float* norm,
                                int64_t n, float* y, bool residual) {
    int64_t ff = 0;
    for (const GpuPart& p : gate_up) ff += p.m.n_out;
    ff /= 2;
    if (n <= gemv_rows_ && gate_up.size() == 1) {  // act_ = silu(gate) * up in the GEMV's epilogue
        GemvArgs g;
        g.x = x_;
        g.n_tok = static_cast<int>(n);
        g.norm_w = norm;
        g.norm_eps = hp_.rms_eps;
        g.norm_one_plus = true;
        g.glu = true;
        g.y = act_;
        gemv(gate_up[0].m, g, stream_);
    } else {
        project(gate_up, norm, n, gu_, 2 * ff);
        swiglu_stacked(gu_, act_, n, ff, stream_);
    }
    if (residual) {
        out_residual(down, act_, n);
        return;
    }
    if (n > gemv_rows_) {
        matmul(down, act_, n, y, hp_.n_embd);
        return;
    }
    GemvArgs d;
    d.x = act_;
    d.n_tok = static_cast<int>(n);
    d.y = y;
    gemv(down, d, stream_);
}

void CudaExecutor::deltanet_block(const GpuHybridLayer& L, int r, int64_t n, const CudaMemoryStorage& st) {
    const HybridHParams& hy = *hp_.hybrid;
    const DeltaNetShape& s = hy.linear;
    const int64_t cd = s.conv_dim(), vd = s.value_dim();
    // qkv_ rows [w_dn_]: [Q|K|V (cd) | z (vd) | b (nv) | a (nv)]
    project(L.linear.in_proj, L.attn_norm, n, qkv_, w_dn_);
    ConvRunsArgs c;
    c.x = qkv_;
    c.x_stride = w_dn_;
    c.n_rows = static_cast<int>(n);
    c.n_ch = cd;
    c.kernel = hy.conv_kernel;
    c.w = L.linear.conv;
    c.row_run = row_table_;
    c.run_row0 = run_row0_;
    c.run_state_in = run_conv_in_;
    c.row_state_out = row_state_out_;
    c.state = st.conv(r, 0);
    c.state_stride = st.entry_floats();
    c.y = conv_;
    conv1d_silu_runs(c, stream_);

    DeltaNetStepArgs d = deltanet_layer_args(hp_, L.linear, qkv_, w_dn_, conv_, core_, static_cast<int>(n));
    // Token by token: every run whose run_rec_in entry is set, in one launch.
    DeltaNetStepArgs rec = d;
    rec.state = st.ssm(r, 0);
    rec.state_stride = st.entry_floats();
    rec.run_row0 = run_row0_;
    rec.run_state_in = run_rec_in_;
    rec.row_state_out = row_state_out_;
    rec.n_runs = static_cast<int>(runs_.size());
    if (any_rec_run_) deltanet_step(rec, stream_);  // (a launch whose CTAs all left would skip its PDL wait)
    // Prompt runs: the chunked form on the run's own rows, in place on its output entry.
    const size_t ssm_bytes = static_cast<size_t>(s.state_floats()) * sizeof(float);
    for (size_t i = 0; i < runs_.size(); ++i) {
        if (chunk_in_[i] < 0) continue;
        const int64_t r0 = runs_[i].row0;
        float* state = st.ssm(r, chunk_out_[i]);
        PELICAN_CUDA_CHECK(
            cudaMemcpyAsync(state, st.ssm(r, chunk_in_[i]), ssm_bytes, cudaMemcpyDeviceToDevice, stream_));
        DeltaNetStepArgs ch = d;
        ch.n_tok = static_cast<int>(runs_[i].n);
        ch.conv_out = conv_ + r0 * cd;
        ch.z = d.z + r0 * w_dn_;
        ch.b = d.b + r0 * w_dn_;
        ch.a = d.a + r0 * w_dn_;
        ch.out = core_ + r0 * vd;
        ch.state = state;
        deltanet_chunked(ch, dn_ws_, stream_);
    }
    out_residual(L.linear.out, core_, n);
}

void CudaExecutor::gated_attention_block(const GpuHybridLayer& L, int64_t n, const KvView& kv,
                                         int64_t table_stride, int64_t max_kv) {
    const int64_t Q = hp_.q_dim(), KV = hp_.kv_dim();
    // qkv_ rows [w_at_]: [q | k | v | gate]
    project(L.attn.qkvg, L.attn_norm, n, qkv_, w_at_);
    RopeStoreArgs r = rope_store_args(hp_, *gm_, rope_table_, qkv_, static_cast<int>(n), nullptr, kv);
    r.row_stride = w_at_;
    r.q_norm = L.attn.q_norm;
    r.k_norm = L.attn.k_norm;
    r.norm_one_plus = true;
    r.row_pos = pos_;
    r.row_slot = slot_;
    rope_store_kv(r, stream_);
    attention(n, kv, table_stride, max_kv, qkv_, w_at_);
    sigmoid_gate_mul(attn_, Q, qkv_ + Q + 2 * KV, w_at_, n, Q, stream_);
    out_residual(L.attn.wo, attn_, n);
}

void CudaExecutor::moe_block(const GpuHybridLayer& L, int64_t n) {
    const HybridHParams& hy = *hp_.hybrid;
    const int64_t E = hp_.n_embd, ffe = hy.n_ff_expert;
    const int n_exp = hy.n_expert, k = hy.n_expert_used;
    const bool shared_slot = L.moe.shared_in_experts;  // the shared expert is expert n_exp, slot k
    const int ko = shared_slot ? k + 1 : k;
    const int slots = static_cast<int>(n) * ko;
    // router_ rows [n_exp + 1]: expert logits, then the shared expert's gate logit.
    project(L.moe.router, L.ffn_norm, n, router_, n_exp + 1);
    moe_route(router_, n_exp + 1, static_cast<int>(n), n_exp, k, /*renormalize=*/true, eids_, ewts_, stream_,
              shared_slot);
    MoeCombineArgs c;
    if (n <= gemv_rows_) {  // slot t * ko + j: token t's j-th expert, one GEMV pair over all slots
        expert_slot_gemvs(L.moe, x_, L.ffn_norm, hp_.rms_eps, eids_, slots, ko, E, ffe, eact_, eout_,
                          stream_);
        c.expert_out = eout_;
    } else {  // the step's slots grouped by expert: each chosen expert read once per 8 rows
        const int n_ids = n_exp + (shared_slot ? 1 : 0);
        const int groups = moe_group_max_groups(slots, n_ids);
        MoeGroupArgs ga;
        ga.ids = eids_;
        ga.n_slots = slots;
        ga.n_experts = n_ids;
        ga.max_groups = groups;
        ga.group_expert = group_expert_;
        ga.slot_row = slot_row_;
        ga.row_slot = row_slot_;
        moe_group_slots(ga, stream_);
        const int64_t rows = int64_t{groups} * kMoeGroupRows;
        moe_gather_rows(xn_, E, ko, row_slot_, group_expert_, rows, xg_, stream_);
        grouped_expert_stack(L.moe.experts_gate_up, true, 2 * ffe, E, ffe, group_expert_, groups, xg_, eactg_,
                             stream_);
        grouped_expert_stack(L.moe.experts_down, false, E, ffe, E, group_expert_, groups, eactg_, eoutg_,
                             stream_);
        c.expert_out = eoutg_;
        c.slot_row = slot_row_;
    }
    // x += sum_j w_j y_j over the slots [+ sigmoid(shared gate) * shared expert, run on its own].
    c.n_tok = static_cast<int>(n);
    c.n_embd = E;
    c.k = ko;
    c.weights = ewts_;
    c.residual = x_;
    c.y = x_;
    if (!shared_slot) {
        swiglu_block(L.moe.shared_gate_up, L.moe.shared_down, L.ffn_norm, n, sout_, /*residual=*/false);
        c.shared_out = sout_;
        c.shared_gate_logit = router_ + n_exp;
        c.shared_gate_stride = n_exp + 1;
    }
    moe_combine(c, stream_);
}

}  // namespace pelican::cuda
