// Shared per-layer kernel arguments of the CUDA passes (see layer_args.h).
#include "backend/cuda/layer_args.h"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

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
