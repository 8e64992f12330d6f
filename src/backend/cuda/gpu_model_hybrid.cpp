// The hybrid Qwen3.5 part of GpuModel::upload (gpu_model.h): Gated DeltaNet, gated attention, MoE
// or dense MLP per layer, from the CPU's HybridWeights views of the GGUF rows.
#include <fmt/format.h>

#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_model.h"
#include "backend/cuda/gpu_upload.h"
#include "backend/cuda/moe.h"
#include "model/hybrid_hparams.h"
#include "model/hybrid_weights.h"
#include "model/model.h"

namespace pelican::cuda {
namespace {

RowSegment seg(const cpu::Weight& w, const char* name) { return RowSegment{&w, name, {}}; }

// The matrices of one hybrid layer with the names the errors use.
std::vector<std::pair<const cpu::Weight*, std::string>> layer_matrices(const HybridLayerWeights& l,
                                                                       bool moe) {
    std::vector<std::pair<const cpu::Weight*, std::string>> m;
    if (l.full_attention) {
        m = {{&l.attn.wq, "attn_q"},
             {&l.attn.wk, "attn_k"},
             {&l.attn.wv, "attn_v"},
             {&l.attn.wo, "attn_output"}};
    } else {
        m = {{&l.linear.in_qkv, "attn_qkv"},
             {&l.linear.in_z, "attn_gate"},
             {&l.linear.in_b, "ssm_beta"},
             {&l.linear.in_a, "ssm_alpha"},
             {&l.linear.out, "ssm_out"}};
    }
    if (moe) {
        m.push_back({&l.moe.router, "ffn_gate_inp"});
        m.push_back({&l.moe.shared_gate, "ffn_gate_inp_shexp"});
        m.push_back({&l.moe.shared.gate, "ffn_gate_shexp"});
        m.push_back({&l.moe.shared.up, "ffn_up_shexp"});
        m.push_back({&l.moe.shared.down, "ffn_down_shexp"});
        for (size_t x = 0; x < l.moe.experts.size(); ++x) {
            m.push_back({&l.moe.experts[x].gate, fmt::format("ffn_gate_exps[{}]", x)});
            m.push_back({&l.moe.experts[x].up, fmt::format("ffn_up_exps[{}]", x)});
            m.push_back({&l.moe.experts[x].down, fmt::format("ffn_down_exps[{}]", x)});
        }
    } else {
        m.push_back({&l.mlp.gate, "ffn_gate"});
        m.push_back({&l.mlp.up, "ffn_up"});
        m.push_back({&l.mlp.down, "ffn_down"});
    }
    return m;
}

}  // namespace

Status gpu_supports_hybrid(const Model& model) {
    const HybridWeights* hw = model.hybrid_weights();
    const ModelHParams& hp = model.hparams();
    if (hw == nullptr || !hp.hybrid) return make_error("{}: no hybrid weights loaded", model.path());
    const HybridHParams& h = *hp.hybrid;
    if (hp.n_vocab > INT32_MAX || hp.n_embd > INT32_MAX)
        return make_error("{}: vocabulary or width too large for the GPU pass", model.path());
    if (!gpu_matmul_supported(model.weights().tok_embd.dtype))
        return make_error("{}: token_embd has type {}, which the GPU embedding lookup does not read",
                          model.path(), dtype_name(model.weights().tok_embd.dtype));
    const int dk = h.linear.d_k;
    if (dk != h.linear.d_v || (dk != 16 && dk != 32 && dk != 64 && dk != 128))
        return make_error(
            "{}: the GPU Gated DeltaNet takes key/value head widths 16, 32, 64 or 128 (equal); "
            "this model has {} / {}",
            model.path(), h.linear.d_k, h.linear.d_v);
    if (hp.head_dim != 64 && hp.head_dim != 128 && hp.head_dim != 256)
        return make_error("{}: the GPU attention takes head_dim 64, 128 or 256, not {}", model.path(),
                          hp.head_dim);
    if (h.n_linear_layers() > 0 && (h.conv_kernel < 2 || h.conv_kernel > 8))
        return make_error("{}: the GPU Gated DeltaNet takes conv kernel widths 2 to 8, not {}", model.path(),
                          h.conv_kernel);
    if (h.moe && (h.n_expert > kMoeMaxExperts || h.n_expert_used > kMoeMaxUsed))
        return make_error(
            "{}: the GPU MoE router takes at most {} experts and {} per token (this model: {}, {})",
            model.path(), kMoeMaxExperts, kMoeMaxUsed, h.n_expert, h.n_expert_used);
    // The decoder layers, then the MTP block's layer (named blk.<n_layer>, as llama.cpp's nextn layer).
    std::vector<const HybridLayerWeights*> layers;
    for (const HybridLayerWeights& l : hw->layers) layers.push_back(&l);
    if (hw->mtp.present && !hw->mtp.layers.empty()) {
        Status s = check_gpu_matrix(hw->mtp.fc, "mtp.fc");
        if (!s.ok()) return make_error("{}: {}", model.path(), s.error().message);
        layers.push_back(&hw->mtp.layers[0]);
    }
    for (int il = 0; il < static_cast<int>(layers.size()); ++il) {
        const HybridLayerWeights& l = *layers[static_cast<size_t>(il)];
        for (const auto& [w, name] : layer_matrices(l, h.moe)) {
            Status s = check_gpu_matrix(*w, gpu_layer_name(il, name));
            if (!s.ok()) return make_error("{}: {}", model.path(), s.error().message);
        }
        if (h.moe) {  // one GPU matrix per expert projection: every expert of one type
            for (size_t x = 1; x < l.moe.experts.size(); ++x) {
                const SwigluWeights& a = l.moe.experts[0];
                const SwigluWeights& b = l.moe.experts[x];
                if (b.gate.type() != a.gate.type() || b.up.type() != a.gate.type() ||
                    b.down.type() != a.down.type())
                    return make_error(
                        "{}: blk.{}: routed experts of mixed types (expert {}); the GPU pass "
                        "stacks every expert's gate/up in one type and its down in one type",
                        model.path(), il, x);
            }
            if (!l.moe.experts.empty() && l.moe.experts[0].up.type() != l.moe.experts[0].gate.type())
                return make_error("{}: blk.{}: ffn_gate_exps and ffn_up_exps differ in type", model.path(),
                                  il);
        }
    }
    Status s = check_gpu_matrix(model.weights().output, "output");
    if (!s.ok()) return make_error("{}: {}", model.path(), s.error().message);
    return {};
}

Status GpuModel::upload_hybrid(Uploader& up, VecArena& vecs, size_t* vec_read) {
    const ModelHParams& hp = model_.hparams();
    const HybridHParams& h = *hp.hybrid;
    const HybridWeights& hw = *model_.hybrid_weights();
    const int64_t e = hp.n_embd, hd = hp.head_dim, nh = hp.n_head;
    // One layer into g (il: the name in errors); *read += the bytes one decode step reads of it,
    // *vread += its vector bytes.
    const auto upload_layer = [&](const HybridLayerWeights& l, int il, GpuHybridLayer& g, size_t* read,
                                  size_t* vread) -> Status {
        size_t* vec_read = vread;
        g.full_attention = l.full_attention;
        vecs.add(&g.attn_norm, {{l.attn_norm, e}});
        vecs.add(&g.ffn_norm, {{l.ffn_norm, e}});
        *vec_read += static_cast<size_t>(2 * e) * sizeof(float);
        const size_t before = up.read_bytes;
        if (l.full_attention) {
            // wq rows per head: head_dim query rows, then head_dim gate rows (ref::split_query_gate).
            RowSegment q{&l.attn.wq, "attn_q(query)", {}}, gate{&l.attn.wq, "attn_q(gate)", {}};
            for (int64_t hh = 0; hh < nh; ++hh) {
                q.ranges.push_back({hh * 2 * hd, hd});
                gate.ranges.push_back({hh * 2 * hd + hd, hd});
            }
            const RowSegment qkvg[4] = {q, seg(l.attn.wk, "attn_k"), seg(l.attn.wv, "attn_v"), gate};
            PELICAN_TRY(up.parts(qkvg, il, g.attn.qkvg));
            const cpu::Weight* wo[1] = {&l.attn.wo};
            PELICAN_TRY(up.stack(wo, gpu_layer_name(il, "attn_output"), g.attn.wo));
            vecs.add(&g.attn.q_norm, {{l.attn.q_norm, hd}});
            vecs.add(&g.attn.k_norm, {{l.attn.k_norm, hd}});
            *vec_read += static_cast<size_t>(2 * hd) * sizeof(float);
        } else {
            const DeltaNetWeights& d = l.linear;
            const RowSegment in[4] = {seg(d.in_qkv, "attn_qkv"), seg(d.in_z, "attn_gate"),
                                      seg(d.in_b, "ssm_beta"), seg(d.in_a, "ssm_alpha")};
            PELICAN_TRY(up.parts(in, il, g.linear.in_proj));
            const cpu::Weight* out[1] = {&d.out};
            PELICAN_TRY(up.stack(out, gpu_layer_name(il, "ssm_out"), g.linear.out));
            const int64_t cd = h.linear.conv_dim(), nv = h.linear.n_v_heads;
            vecs.add(&g.linear.conv, {{d.conv, cd * h.conv_kernel}});
            vecs.add(&g.linear.dt_bias, {{d.dt_bias, nv}});
            vecs.add(&g.linear.a_log, {{d.a_log, nv}});
            vecs.add(&g.linear.norm, {{d.norm, h.linear.d_v}});
            *vec_read += static_cast<size_t>(cd * h.conv_kernel + 2 * nv + h.linear.d_v) * sizeof(float);
        }
        if (h.moe) {
            const MoeWeights& m = l.moe;
            const RowSegment router[2] = {seg(m.router, "ffn_gate_inp"),
                                          seg(m.shared_gate, "ffn_gate_inp_shexp")};
            PELICAN_TRY(up.parts(router, il, g.moe.router));
            // The shared expert runs as one more expert slot (stacked as expert E) when its shapes and
            // types are the routed experts' (every released Qwen3.5: 512 / 1024 both): two fewer GEMVs.
            const SwigluWeights& x0 = m.experts.front();
            g.moe.shared_in_experts =
                m.shared.gate.n_out() == x0.gate.n_out() && m.shared.gate.type() == x0.gate.type() &&
                m.shared.up.type() == x0.up.type() && m.shared.down.type() == x0.down.type() &&
                m.shared.down.n_in() == x0.down.n_in();
            if (!g.moe.shared_in_experts) {
                const RowSegment sgu[2] = {seg(m.shared.gate, "ffn_gate_shexp"),
                                           seg(m.shared.up, "ffn_up_shexp")};
                PELICAN_TRY(up.parts(sgu, il, g.moe.shared_gate_up));
                const cpu::Weight* sd[1] = {&m.shared.down};
                PELICAN_TRY(up.stack(sd, gpu_layer_name(il, "ffn_down_shexp"), g.moe.shared_down));
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
            if (g.moe.shared_in_experts) {
                gu.push_back(seg(m.shared.gate, "ffn_gate_shexp"));
                gu.push_back(seg(m.shared.up, "ffn_up_shexp"));
                down.push_back(seg(m.shared.down, "ffn_down_shexp"));
            }
            PELICAN_TRY(up.stack(gu, gpu_layer_name(il, "ffn_gate_exps+ffn_up_exps"), g.moe.experts_gate_up));
            PELICAN_TRY(up.stack(down, gpu_layer_name(il, "ffn_down_exps"), g.moe.experts_down));
            // One decode step reads k of the E routed experts (+ the shared one when stacked).
            const size_t n_stacked = m.experts.size() + (g.moe.shared_in_experts ? 1 : 0);
            const size_t n_read = static_cast<size_t>(h.n_expert_used) + (g.moe.shared_in_experts ? 1 : 0);
            const size_t expert_bytes = g.moe.experts_gate_up.read_bytes + g.moe.experts_down.read_bytes;
            *read += (dense_bytes - before) + expert_bytes * n_read / std::max<size_t>(1, n_stacked);
        } else {
            const RowSegment gu[2] = {seg(l.mlp.gate, "ffn_gate"), seg(l.mlp.up, "ffn_up")};
            PELICAN_TRY(up.parts(gu, il, g.mlp.gate_up));
            const cpu::Weight* dn[1] = {&l.mlp.down};
            PELICAN_TRY(up.stack(dn, gpu_layer_name(il, "ffn_down"), g.mlp.down));
            *read += up.read_bytes - before;
        }
        return {};
    };
    hybrid_ = true;
    hybrid_layers_.resize(static_cast<size_t>(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il)
        PELICAN_TRY(upload_layer(hw.layers[static_cast<size_t>(il)], il,
                                 hybrid_layers_[static_cast<size_t>(il)], &hybrid_read_bytes_, vec_read));
    // The MTP block (not read by a decode step): fc, its norms and its decoder layer (named blk.<n_layer>).
    if (hw.mtp.present && !hw.mtp.layers.empty()) {
        size_t mtp_read = 0, mtp_vec = 0;
        const cpu::Weight* fc[1] = {&hw.mtp.fc};
        PELICAN_TRY(up.stack(fc, "mtp.fc", mtp_.fc));
        vecs.add(&mtp_.norm_embd, {{hw.mtp.norm_embd, e}});
        vecs.add(&mtp_.norm_hidden, {{hw.mtp.norm_hidden, e}});
        vecs.add(&mtp_.norm, {{hw.mtp.norm, e}});
        PELICAN_TRY(
            upload_layer(hw.mtp.layers[0], static_cast<int>(hp.n_layer), mtp_.layer, &mtp_read, &mtp_vec));
        mtp_.present = true;
    }
    return {};
}

void GpuModel::tune_hybrid(const std::function<void(GpuMatrix&, bool, bool, bool)>& tune,
                           const std::function<void(GpuMatrix&, const GemvArgs&)>& tune_args) {
    const ModelHParams& hp = model_.hparams();
    const HybridHParams& h = *hp.hybrid;
    static const float kSet = 0.0f;  // a non-null flag: gemv_autotune never dereferences it
    static const int32_t kSetId = 0;
    std::vector<GpuHybridLayer*> layers;
    for (GpuHybridLayer& g : hybrid_layers_) layers.push_back(&g);
    if (mtp_.present) {
        layers.push_back(&mtp_.layer);
        tune(mtp_.fc, false, false, false);
    }
    for (GpuHybridLayer* gp : layers) {
        GpuHybridLayer& g = *gp;
        if (g.full_attention) {
            for (GpuPart& p : g.attn.qkvg) tune(p.m, true, false, false);
            tune(g.attn.wo, false, false, true);
        } else {
            for (GpuPart& p : g.linear.in_proj) tune(p.m, true, false, false);
            tune(g.linear.out, false, false, true);
        }
        // Routed experts: the decode step's expert-slot calls (CudaHybridForward::moe_block), k
        // slots (+ 1 for a stacked shared expert) of one token.
        if (g.moe.experts_gate_up.data && g.moe.experts_down.data) {
            GemvArgs a;
            a.expert_ids = &kSetId;
            a.n_expert_slots = h.n_expert_used + (g.moe.shared_in_experts ? 1 : 0);
            a.norm_w = &kSet;
            a.glu = true;
            a.expert_rows = 2 * h.n_ff_expert;
            tune_args(g.moe.experts_gate_up, a);
            GemvArgs d;
            d.expert_ids = &kSetId;
            d.n_expert_slots = a.n_expert_slots;
            d.expert_rows = hp.n_embd;
            d.x_slot_stride = h.n_ff_expert;
            tune_args(g.moe.experts_down, d);
        }
        for (GpuPart& p : g.moe.router) tune(p.m, true, false, false);
        for (GpuPart& p : g.moe.shared_gate_up) tune(p.m, true, g.moe.shared_gate_up.size() == 1, false);
        if (g.moe.shared_down.data) tune(g.moe.shared_down, false, false, false);
        for (GpuPart& p : g.mlp.gate_up) tune(p.m, true, g.mlp.gate_up.size() == 1, false);
        if (g.mlp.down.data) tune(g.mlp.down, false, false, true);
    }
}

void GpuModel::free_hybrid() {
    std::vector<GpuHybridLayer*> layers;
    for (GpuHybridLayer& g : hybrid_layers_) layers.push_back(&g);
    layers.push_back(&mtp_.layer);
    free_matrix(mtp_.fc);
    for (GpuHybridLayer* gp : layers) {
        GpuHybridLayer& g = *gp;
        for (GpuPart& p : g.linear.in_proj) free_matrix(p.m);
        free_matrix(g.linear.out);
        for (GpuPart& p : g.attn.qkvg) free_matrix(p.m);
        free_matrix(g.attn.wo);
        for (GpuPart& p : g.moe.router) free_matrix(p.m);
        free_matrix(g.moe.experts_gate_up);
        free_matrix(g.moe.experts_down);
        for (GpuPart& p : g.moe.shared_gate_up) free_matrix(p.m);
        free_matrix(g.moe.shared_down);
        for (GpuPart& p : g.mlp.gate_up) free_matrix(p.m);
        free_matrix(g.mlp.down);
    }
    hybrid_layers_.clear();
    mtp_ = GpuMtp{};
}

}  // namespace pelican::cuda
