// The Qwen3.5 kinds of GpuModel::upload (gpu_model.h): gated attention, Gated DeltaNet and MoE layers and
// the MTP block, from the CPU's views of the GGUF rows; their kernels' limits and the expert-slot tuning.
#include <algorithm>

#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_model.h"
#include "backend/cuda/gpu_upload.h"
#include "backend/cuda/moe.h"
#include "model/model.h"

namespace pelican::cuda {
namespace {

RowSegment seg(const cpu::Weight& w, const char* name) { return RowSegment{&w, name, {}}; }

}  // namespace

Status gpu_supports_kinds(const Model& model) {
    const ModelHParams& hp = model.hparams();
    if (hp.has(Mixer::kDeltaNet)) {
        const DeltaNetShape& s = hp.deltanet.linear;
        const int dk = s.d_k;
        if (dk != s.d_v || (dk != 16 && dk != 32 && dk != 64 && dk != 128))
            return make_error(
                "{}: the GPU Gated DeltaNet takes key/value head widths 16, 32, 64 or 128 (equal); "
                "this model has {} / {}",
                model.path(), s.d_k, s.d_v);
        if (hp.deltanet.conv_kernel < 2 || hp.deltanet.conv_kernel > 8)
            return make_error("{}: the GPU Gated DeltaNet takes conv kernel widths 2 to 8, not {}",
                              model.path(), hp.deltanet.conv_kernel);
    }
    if (hp.has(Mixer::kGatedAttention) && hp.head_dim != 64 && hp.head_dim != 128 && hp.head_dim != 256)
        return make_error("{}: the GPU attention takes head_dim 64, 128 or 256, not {}", model.path(),
                          hp.head_dim);
    if (hp.has(Ffn::kMoe) && (hp.moe.n_expert > kMoeMaxExperts || hp.moe.n_expert_used > kMoeMaxUsed))
        return make_error(
            "{}: the GPU MoE router takes at most {} experts and {} per token (this model: {}, {})",
            model.path(), kMoeMaxExperts, kMoeMaxUsed, hp.moe.n_expert, hp.moe.n_expert_used);
    return {};
}

Status GpuModel::upload_gated_attention(Uploader& up, VecArena& vecs, const AttentionWeights& a, int il,
                                        GpuAttention& g, size_t* vec_read) const {
    const ModelHParams& hp = model_.hparams();
    const int64_t hd = hp.head_dim, nh = hp.n_head;
    // wq rows per head: head_dim query rows, then head_dim gate rows (ref::split_query_gate).
    RowSegment q{&a.wq, "attn_q(query)", {}}, gate{&a.wq, "attn_q(gate)", {}};
    for (int64_t hh = 0; hh < nh; ++hh) {
        q.ranges.push_back({hh * 2 * hd, hd});
        gate.ranges.push_back({hh * 2 * hd + hd, hd});
    }
    const RowSegment qkvg[4] = {q, seg(a.wk, "attn_k"), seg(a.wv, "attn_v"), gate};
    PELICAN_TRY(up.parts(qkvg, il, g.qkv));
    const cpu::Weight* wo[1] = {&a.wo};
    PELICAN_TRY(up.stack(wo, gpu_layer_name(il, "attn_output"), g.wo));
    vecs.add(&g.q_norm, {{a.q_norm, hd}});
    vecs.add(&g.k_norm, {{a.k_norm, hd}});
    *vec_read += static_cast<size_t>((a.q_norm ? hd : 0) + (a.k_norm ? hd : 0)) * sizeof(float);
    return {};
}

Status GpuModel::upload_deltanet(Uploader& up, VecArena& vecs, const DeltaNetWeights& d, int il,
                                 GpuDeltaNet& g, size_t* vec_read) const {
    const DeltaNetHParams& h = model_.hparams().deltanet;
    const RowSegment in[4] = {seg(d.in_qkv, "attn_qkv"), seg(d.in_z, "attn_gate"), seg(d.in_b, "ssm_beta"),
                              seg(d.in_a, "ssm_alpha")};
    PELICAN_TRY(up.parts(in, il, g.in_proj));
    const cpu::Weight* out[1] = {&d.out};
    PELICAN_TRY(up.stack(out, gpu_layer_name(il, "ssm_out"), g.out));
    const int64_t cd = h.linear.conv_dim(), nv = h.linear.n_v_heads;
    vecs.add(&g.conv, {{d.conv, cd * h.conv_kernel}});
    vecs.add(&g.dt_bias, {{d.dt_bias, nv}});
    vecs.add(&g.a_log, {{d.a_log, nv}});
    vecs.add(&g.norm, {{d.norm, h.linear.d_v}});
    *vec_read += static_cast<size_t>(cd * h.conv_kernel + 2 * nv + h.linear.d_v) * sizeof(float);
    return {};
}

Status GpuModel::upload_moe(Uploader& up, const MoeWeights& m, int il, GpuMoe& g, size_t* read) const {
    const size_t before = up.read_bytes;
    const RowSegment router[2] = {seg(m.router, "ffn_gate_inp"), seg(m.shared_gate, "ffn_gate_inp_shexp")};
    PELICAN_TRY(up.parts(router, il, g.router));
    // The shared expert runs as one more expert slot (stacked as expert E) when its shapes and
    // types are the routed experts' (every released Qwen3.5: 512 / 1024 both): two fewer GEMVs.
    const SwigluWeights& x0 = m.experts.front();
    g.shared_in_experts = m.shared.gate.n_out() == x0.gate.n_out() &&
                          m.shared.gate.type() == x0.gate.type() && m.shared.up.type() == x0.up.type() &&
                          m.shared.down.type() == x0.down.type() && m.shared.down.n_in() == x0.down.n_in();
    if (!g.shared_in_experts) {
        const RowSegment sgu[2] = {seg(m.shared.gate, "ffn_gate_shexp"), seg(m.shared.up, "ffn_up_shexp")};
        PELICAN_TRY(up.parts(sgu, il, g.shared_gate_up));
        const cpu::Weight* sd[1] = {&m.shared.down};
        PELICAN_TRY(up.stack(sd, gpu_layer_name(il, "ffn_down_shexp"), g.shared_down));
    }
    const size_t dense_bytes = up.read_bytes;
    // Routed experts: per expert [gate; up] rows, then the down rows, each projection one matrix
    // (the shared expert last when it is one of them).
    std::vector<RowSegment> gu, down;
    for (size_t x = 0; x < m.experts.size(); ++x) {
        gu.push_back(seg(m.experts[x].gate, "ffn_gate_exps"));
        gu.push_back(seg(m.experts[x].up, "ffn_up_exps"));
        down.push_back(seg(m.experts[x].down, "ffn_down_exps"));
    }
    if (g.shared_in_experts) {
        gu.push_back(seg(m.shared.gate, "ffn_gate_shexp"));
        gu.push_back(seg(m.shared.up, "ffn_up_shexp"));
        down.push_back(seg(m.shared.down, "ffn_down_shexp"));
    }
    PELICAN_TRY(up.stack(gu, gpu_layer_name(il, "ffn_gate_exps+ffn_up_exps"), g.experts_gate_up));
    PELICAN_TRY(up.stack(down, gpu_layer_name(il, "ffn_down_exps"), g.experts_down));
    // One decode step reads k of the E routed experts (+ the shared one when stacked).
    const size_t n_stacked = m.experts.size() + (g.shared_in_experts ? 1 : 0);
    const size_t n_read =
        static_cast<size_t>(model_.hparams().moe.n_expert_used) + (g.shared_in_experts ? 1 : 0);
    const size_t expert_bytes = g.experts_gate_up.read_bytes + g.experts_down.read_bytes;
    *read += (dense_bytes - before) + expert_bytes * n_read / std::max<size_t>(1, n_stacked);
    return {};
}

Status GpuModel::upload_mtp(Uploader& up, VecArena& vecs) {
    const ModelHParams& hp = model_.hparams();
    const MtpWeights& mtp = model_.weights().mtp;
    if (!mtp.present || mtp.layers.empty()) return {};
    const int64_t e = hp.n_embd;
    size_t mtp_read = 0, mtp_vec = 0;  // not read by a decode step
    const cpu::Weight* fc[1] = {&mtp.fc};
    PELICAN_TRY(up.stack(fc, "mtp.fc", mtp_.fc));
    vecs.add(&mtp_.norm_embd, {{mtp.norm_embd, e}});
    vecs.add(&mtp_.norm_hidden, {{mtp.norm_hidden, e}});
    vecs.add(&mtp_.norm, {{mtp.norm, e}});
    PELICAN_TRY(
        upload_layer(up, vecs, mtp.layers[0], static_cast<int>(hp.n_layer), mtp_.layer, &mtp_read, &mtp_vec));
    mtp_.present = true;
    return {};
}

// The decode step's expert-slot calls (CudaHybridForward::moe_block, CudaExecutor::moe_block): k slots
// (+ 1 for a stacked shared expert) of one token.
void GpuModel::tune_moe(GpuMoe& g, const TuneArgsFn& tune_args) const {
    if (!g.experts_gate_up.data || !g.experts_down.data) return;
    const ModelHParams& hp = model_.hparams();
    static const float kSet = 0.0f;  // a non-null flag: gemv_autotune never dereferences it
    static const int32_t kSetId = 0;
    GemvArgs a;
    a.expert_ids = &kSetId;
    a.n_expert_slots = hp.moe.n_expert_used + (g.shared_in_experts ? 1 : 0);
    a.norm_w = &kSet;
    a.glu = true;
    a.expert_rows = 2 * hp.moe.n_ff_expert;
    tune_args(g.experts_gate_up, a);
    GemvArgs d;
    d.expert_ids = &kSetId;
    d.n_expert_slots = a.n_expert_slots;
    d.expert_rows = hp.n_embd;
    d.x_slot_stride = hp.moe.n_ff_expert;
    tune_args(g.experts_down, d);
}

}  // namespace pelican::cuda
