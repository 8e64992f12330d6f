// Shared per-layer kernel arguments of the CUDA passes (see layer_args.h).
#include "backend/cuda/layer_args.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/moe.h"

namespace pelican::cuda {

RopeStoreArgs rope_store_args(const ModelHParams& hp, const GpuModel& gm, const float* rope_table, float* qkv,
                              int n_tok, const int32_t* pos, const KvView& kv) {
    RopeStoreArgs r;
    r.qkv = qkv;
    r.n_tok = n_tok;
    r.n_head = static_cast<int>(hp.n_head);
    r.n_kv_head = static_cast<int>(hp.n_head_kv);
    r.head_dim = static_cast<int>(hp.head_dim);
    r.n_rot = static_cast<int>(hp.rope_dim);
    r.neox = hp.rope_layout == RopeLayout::kNeox;
    r.inv_freq = gm.inv_freq();
    r.mscale = hp.rope_attn_factor;
    r.rope_table = rope_table;
    r.norm_eps = hp.rms_eps;
    r.pos0_dev = pos;
    r.kv = kv;
    return r;
}

AttnArgs decode_attn_args(const ModelHParams& hp, const float* q, int64_t q_stride, int n_tok,
                          const int32_t* pos, const KvView& kv, float* out) {
    AttnArgs at;
    at.q = q;
    at.q_stride = q_stride;
    at.n_tok = n_tok;
    at.n_head = static_cast<int>(hp.n_head);
    at.n_kv_head = static_cast<int>(hp.n_head_kv);
    at.head_dim = static_cast<int>(hp.head_dim);
    at.scale = hp.attn_scale;
    at.window = hp.sliding_window;
    at.pos0_dev = pos;
    at.kv = kv;
    at.out = out;
    return at;
}

DeltaNetStepArgs deltanet_layer_args(const ModelHParams& hp, const GpuDeltaNet& L, const float* proj,
                                     int64_t proj_stride, const float* conv_out, float* out, int n_tok) {
    const DeltaNetShape& s = hp.deltanet.linear;
    const int64_t cd = s.conv_dim(), vd = s.value_dim(), nv = s.n_v_heads;
    DeltaNetStepArgs d;
    d.n_tok = n_tok;
    d.n_k_heads = s.n_k_heads;
    d.n_v_heads = s.n_v_heads;
    d.d_k = s.d_k;
    d.d_v = s.d_v;
    d.v_tiled = s.v_tiled;
    d.conv_out = conv_out;
    d.conv_stride = cd;
    d.z = proj + cd;
    d.z_stride = proj_stride;
    d.b = proj + cd + vd;
    d.b_stride = proj_stride;
    d.a = proj + cd + vd + nv;
    d.a_stride = proj_stride;
    d.a_log = L.a_log;
    d.dt_bias = L.dt_bias;
    d.norm_w = L.norm;
    d.eps = hp.rms_eps;
    d.out = out;
    d.out_stride = vd;
    return d;
}

void grouped_expert_stack(const GpuMatrix& w, bool glu, int64_t expert_rows, int64_t n_in, int64_t n_out,
                          const int32_t* group_expert, int n_groups, const float* x, float* y,
                          cudaStream_t stream, bool allow_mma) {
    if (allow_mma && moe_mma_supported(w, glu, expert_rows)) {
        MoeMmaArgs m;
        m.w = w;
        m.expert_rows = expert_rows;
        m.glu = glu;
        m.n_out = n_out;
        m.group_expert = group_expert;
        m.n_groups = n_groups;
        m.x = x;
        m.x_stride = n_in;
        m.y = y;
        m.y_stride = n_out;
        moe_group_mma(m, stream);
        return;
    }
    GemvArgs g;
    g.x = x;
    g.n_tok = kMoeGroupRows;
    g.glu = glu;
    g.expert_ids = group_expert;
    g.n_expert_slots = n_groups;
    g.expert_rows = expert_rows;
    g.x_slot_stride = kMoeGroupRows * n_in;
    g.y = y;
    g.y_slot_stride = kMoeGroupRows * n_out;
    g.skip_negative_ids = true;
    gemv(w, g, stream);
}

void expert_slot_gemvs(const GpuMoe& moe, const float* x, const float* norm_w, float eps, bool norm_one_plus,
                       const int32_t* ids, int slots, int ko, int64_t n_embd, int64_t ff_e, float* act,
                       float* out, cudaStream_t stream, const ExpertSlotCombine& comb) {
    GemvArgs g;
    g.x = x;
    g.norm_w = norm_w;
    g.norm_eps = eps;
    g.norm_one_plus = norm_one_plus;
    g.glu = true;
    g.expert_ids = ids;
    g.n_expert_slots = slots;
    g.expert_rows = 2 * ff_e;
    g.x_slot_stride = n_embd;
    g.x_slot_div = ko;
    g.y = act;
    g.y_slot_stride = ff_e;
    gemv(moe.experts_gate_up, g, stream);
    GemvArgs d;
    d.x = act;
    d.expert_ids = ids;
    d.n_expert_slots = slots;
    d.expert_rows = n_embd;
    d.x_slot_stride = ff_e;
    d.y = out;
    d.y_slot_stride = n_embd;
    d.comb_ctr = comb.ctr;
    d.comb_w = comb.w;
    d.comb_res = comb.res;
    d.comb_y = comb.y;
    gemv(moe.experts_down, d, stream);
}

GpuSampleParams gpu_sample_params(const StepSampling& p) {
    GpuSampleParams g;
    g.temperature = p.temperature;
    g.top_k = p.top_k;
    g.top_p = p.top_p;
    g.min_p = p.min_p;
    g.repetition_penalty = p.repetition_penalty;
    g.presence_penalty = p.presence_penalty;
    g.frequency_penalty = p.frequency_penalty;
    return g;
}

void prefill_parts(PrefillMatmul& mm, const std::vector<GpuPart>& parts, const float* x, int64_t n, float* y,
                   int64_t width, float* tmp, cudaStream_t stream) {
    if (parts.size() == 1 && parts[0].row0 == 0 && parts[0].m.n_out == width) {
        mm.run(parts[0].m, x, n, y, stream);
        return;
    }
    for (const GpuPart& p : parts) {
        mm.run(p.m, x, n, tmp, stream);
        const size_t row_bytes = static_cast<size_t>(p.m.n_out) * sizeof(float);
        PELICAN_CUDA_CHECK(cudaMemcpy2DAsync(y + p.row0, static_cast<size_t>(width) * sizeof(float), tmp,
                                             row_bytes, row_bytes, static_cast<size_t>(n),
                                             cudaMemcpyDeviceToDevice, stream));
    }
}

}  // namespace pelican::cuda
