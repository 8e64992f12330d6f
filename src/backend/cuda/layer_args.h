// Per-layer kernel arguments from a model's hyper-parameters, shared by the CUDA forward passes
// (cuda_forward_layers.cpp, cuda_hybrid_layers.cpp) and the executor (cuda_executor_*.cpp); each adds
// what is its own (q/k norms, row strides, workspace). Host code.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/gpu_model.h"
#include "backend/cuda/prefill_matmul.h"
#include "backend/cuda/sampling.h"
#include "model/forward_pass.h"
#include "model/hparams.h"

namespace pelican::cuda {

// qkv rows [n_tok] of q | k | v (rope_store_kv rewrites q in place, K/V rows go to kv at *pos + t);
// rope from gm's frequencies (and rope_table when given). No q/k norms.
RopeStoreArgs rope_store_args(const ModelHParams& hp, const GpuModel& gm, const float* rope_table, float* qkv,
                              int n_tok, const int32_t* pos, const KvView& kv);
// q rows [n_tok] q_stride floats apart, attention over kv rows 0 .. *pos + n_tok - 1, out [n_tok, q_dim].
AttnArgs decode_attn_args(const ModelHParams& hp, const float* q, int64_t q_stride, int n_tok,
                          const int32_t* pos, const KvView& kv, float* out);

// The DeltaNet step of Gated DeltaNet layer L over n_tok rows of proj ([Q|K|V (conv_dim) | z | b | a], rows
// proj_stride floats apart) after the conv (conv_out [n_tok, conv_dim]) into out [n_tok, value_dim];
// the caller sets the state (and the runs fields).
DeltaNetStepArgs deltanet_layer_args(const ModelHParams& hp, const GpuDeltaNet& L, const float* proj,
                                     int64_t proj_stride, const float* conv_out, float* out, int n_tok);

// One grouped expert stack (MoE prompt chunks and the executors' larger steps): for the groups of
// moe_group_slots (group_expert [n_groups], 8 rows each of x [n_groups * 8, n_in]) y rows of
// [n_groups * 8, n_out] = the group's expert of w (glu: silu(gate) * up, expert_rows = 2 n_out) on tensor
// cores where moe_mma_supported (and allow_mma), else through the grouped expert GEMVs; both write rows
// g * 8 + i of y, so the two stacks of one layer may take different paths (e.g. Q4_K gate/up, Q6_K down).
void grouped_expert_stack(const GpuMatrix& w, bool glu, int64_t expert_rows, int64_t n_in, int64_t n_out,
                          const int32_t* group_expert, int n_groups, const float* x, float* y,
                          cudaStream_t stream, bool allow_mma = true);

// The routed experts of `slots` expert slots (slot s = token s / ko's (s % ko)-th choice, ids [slots]) as the
// two expert-slot GEMVs: act [slots, ff_e] = silu(gate) * up of x (token rows n_embd floats apart; the RMS
// norm as the prologue when norm_w is set, weight 1 + norm_w when norm_one_plus), out [slots, n_embd] =
// down(act). With comb_ctr set
// (one token), the down GEMV's tail also does comb_y = comb_res + sum_s comb_w[s] out_s (gemv.h).
struct ExpertSlotCombine {
    unsigned* ctr = nullptr;
    const float* w = nullptr;
    const float* res = nullptr;
    float* y = nullptr;
};
void expert_slot_gemvs(const GpuMoe& moe, const float* x, const float* norm_w, float eps, bool norm_one_plus,
                       const int32_t* ids, int slots, int ko, int64_t n_embd, int64_t ff_e, float* act,
                       float* out, cudaStream_t stream, const ExpertSlotCombine& comb = {});

// The GPU sampler's parameters for a pass's StepSampling (the same fields).
GpuSampleParams gpu_sample_params(const StepSampling& p);

// y [n, width] = x W^T over stacked parts (GEMMs through mm; a single part covering every column
// writes y directly, otherwise each part goes through tmp [n, part rows] into its columns of y).
void prefill_parts(PrefillMatmul& mm, const std::vector<GpuPart>& parts, const float* x, int64_t n, float* y,
                   int64_t width, float* tmp, cudaStream_t stream);

}  // namespace pelican::cuda
