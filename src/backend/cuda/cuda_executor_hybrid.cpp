// The Gated DeltaNet and MoE blocks of CudaExecutor (cuda_executor.h) over a step's rows, and the step's
// recurrent plan: Gated DeltaNet with every sequence's state in its memory entries, MoE with the shared
// expert. A step of at most gemv_rows() rows takes the GEMVs (the layer norm as their prologue, the
// residual as their epilogue); a larger one is normed once into xn_ (CudaExecutor::layer) and takes
// qmatmul / cuBLAS, with the routed experts grouped by expert across all of the step's rows.
#include <algorithm>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/layer_args.h"
#include "backend/cuda/moe.h"
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

void CudaExecutor::deltanet_block(const GpuLayer& L, int r, int64_t n, const CudaMemoryStorage& st) {
    const DeltaNetShape& s = hp_.deltanet.linear;
    const int64_t cd = s.conv_dim(), vd = s.value_dim();
    // qkv_ rows [w_dn_]: [Q|K|V (cd) | z (vd) | b (nv) | a (nv)]
    project(L.linear.in_proj, L.attn_norm, n, qkv_, w_dn_);
    ConvRunsArgs c;
    c.x = qkv_;
    c.x_stride = w_dn_;
    c.n_rows = static_cast<int>(n);
    c.n_ch = cd;
    c.kernel = hp_.deltanet.conv_kernel;
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

void CudaExecutor::moe_block(const GpuLayer& L, int64_t n) {
    const int64_t E = hp_.n_embd, ffe = hp_.moe.n_ff_expert;
    const int n_exp = hp_.moe.n_expert, k = hp_.moe.n_expert_used;
    const bool shared_slot = L.moe.shared_in_experts;  // the shared expert is expert n_exp, slot k
    const int ko = shared_slot ? k + 1 : k;
    const int slots = static_cast<int>(n) * ko;
    // router_ rows [n_exp + 1]: expert logits, then the shared expert's gate logit.
    project(L.moe.router, L.ffn_norm, n, router_, n_exp + 1);
    moe_route(router_, n_exp + 1, static_cast<int>(n), n_exp, k, /*renormalize=*/true, eids_, ewts_, stream_,
              shared_slot);
    MoeCombineArgs c;
    if (n <= gemv_rows_) {  // slot t * ko + j: token t's j-th expert, one GEMV pair over all slots
        expert_slot_gemvs(L.moe, x_, L.ffn_norm, hp_.rms_eps, norm_one_plus_, eids_, slots, ko, E, ffe, eact_,
                          eout_, stream_);
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
        swiglu_block(L.moe.shared_gate_up, L.moe.shared_down, L.ffn_norm, nullptr, nullptr, n, sout_,
                     /*residual=*/false);
        c.shared_out = sout_;
        c.shared_gate_logit = router_ + n_exp;
        c.shared_gate_stride = n_exp + 1;
    }
    moe_combine(c, stream_);
}

}  // namespace pelican::cuda
