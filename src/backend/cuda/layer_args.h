// Rope + KV-store and decode-attention arguments from a model's hyper-parameters, shared by the CUDA
// forward passes (cuda_forward_layers.cpp, cuda_hybrid_layers.cpp); each adds what is its own (q/k
// norms, row strides, workspace). Host code.
#pragma once

#include <cstdint>

#include "backend/cuda/attention.h"
#include "backend/cuda/gpu_model.h"
#include "model/hparams.h"

namespace pelican::cuda {

// qkv rows [n_tok] of q | k | v (rope_store_kv rewrites q in place, K/V rows go to kv at *pos + t);
// rope from gm's frequencies (and rope_table when given). No q/k norms.
RopeStoreArgs rope_store_args(const ModelHParams& hp, const GpuModel& gm, const float* rope_table, float* qkv,
                              int n_tok, const int32_t* pos, const KvView& kv);
// q rows [n_tok] q_stride floats apart, attention over kv rows 0 .. *pos + n_tok - 1, out [n_tok, q_dim].
AttnArgs decode_attn_args(const ModelHParams& hp, const float* q, int64_t q_stride, int n_tok,
                          const int32_t* pos, const KvView& kv, float* out);

}  // namespace pelican::cuda
