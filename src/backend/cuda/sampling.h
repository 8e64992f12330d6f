// Token sampling on the GPU, one row: the logits never leave the device; only the chosen id (4
// bytes) is read by the host. Same pipeline and tie rules as runtime/sampler.h (penalties,
// temperature, top_k, top_p, min_p, draw), with the uniform draw u in [0, 1) supplied by the host
// (Sampler::draw_uniform) so a seed reproduces CPU sampling up to fp32 rounding. The one-row case
// of sampling_batch.h (implemented there; the batched call draws u on the device from a row's seed
// and counter instead). Host-includable, fmt-free. Graph-capturable.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace pelican::cuda {

// Largest top_k the GPU path handles exactly (the candidates are the k largest logits). With
// top_k == 0 (off) or larger, the caller falls back to host sampling unless top_p/min_p/greedy
// make the GPU path exact (see gpu_sampling_exact).
inline constexpr int kMaxGpuTopK = 1024;

struct GpuSampleParams {
    float temperature = 0.0f;  // 0 = greedy argmax (lowest id on ties)
    int top_k = 0;
    float top_p = 1.0f;
    float min_p = 0.0f;
    float repetition_penalty = 1.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
};

// True when these parameters are sampled exactly by sample_on_gpu (greedy, or 1 <= top_k <=
// kMaxGpuTopK).
bool gpu_sampling_exact(const GpuSampleParams& p);

// Workspace bytes for n_vocab.
size_t sampling_workspace_bytes(int64_t n_vocab);

// logits [n_vocab] fp32 device (modified in place by penalties/temperature).
// penalty_ids: device int32 [n_penalty] (the penalty window, repeats allowed: counts matter for
// frequency); may be nullptr when n_penalty == 0. u_dev: device float, the uniform draw.
// out_token: device int32. workspace: sampling_workspace_bytes(n_vocab) bytes.
void sample_on_gpu(float* logits, int64_t n_vocab, const GpuSampleParams& p, const int32_t* penalty_ids,
                   int n_penalty, const float* u_dev, int32_t* out_token, void* workspace,
                   cudaStream_t stream);

}  // namespace pelican::cuda
