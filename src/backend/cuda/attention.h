// Attention on the GPU over a per-layer KV cache [n_ctx, n_kv_head, head_dim] (F16 or F32),
// GQA (query head h uses KV head h / (n_head / n_kv_head)), causal, optional sliding window.
// Same semantics as ref::attention (ops/ops.h). Host-includable, fmt-free.
//
// Graph capture: positions come from device memory (pos0_dev) so one captured decode step
// serves every position; the decode kernels' grids depend only on n_ctx, never on pos0.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/dtype.h"

namespace pelican::cuda {

// Per-layer cache view. Element (p, h, d) at p * n_kv_head * head_dim + h * head_dim + d.
struct KvView {
    void* k = nullptr;
    void* v = nullptr;
    DType type = DType::F16;  // F16 or F32
    int64_t n_ctx = 0;
};

// After the fused QKV GEMV: qkv [n_tok, q_dim + 2 * kv_dim] fp32 (q heads, then k heads, then v
// heads; biases already added). Per token at position pos = *pos0_dev + t:
//   q, k heads: optional per-head RMSNorm over head_dim (q_norm / k_norm, eps, one_plus weights),
//   then rope over the first n_rot dims (neox: pairs (i, i + n_rot/2); else (2i, 2i+1)) with
//   angle = float(pos) * inv_freq[i] (fp32 product), cos/sin scaled by mscale;
//   q is written back in place; k and v go to the cache rows at pos (converted to the cache type).
// Graph-capturable.
struct RopeStoreArgs {
    float* qkv = nullptr;
    int64_t row_stride = 0;  // floats between token rows of qkv; 0 = q_dim + 2 * kv_dim (extra columns
                             // after v, e.g. the gated attention's gate, are left alone)
    int n_tok = 1;
    int n_head = 0, n_kv_head = 0, head_dim = 0, n_rot = 0;
    bool neox = true;
    const float* inv_freq = nullptr;  // [n_rot / 2] device
    float mscale = 1.0f;
    const float* q_norm = nullptr;  // [head_dim] device or nullptr
    const float* k_norm = nullptr;
    float norm_eps = 1e-6f;
    bool norm_one_plus = false;
    const int32_t* pos0_dev = nullptr;  // device int: position of token 0
    // Paged memory (the executors): when set, token t is at position row_pos[t] (device [n_tok];
    // pos0_dev is then unused) and its K/V rows go to cache row row_slot[t] (device [n_tok]: the
    // pool row block * block_tokens + p % block_tokens) instead of row pos.
    const int32_t* row_pos = nullptr;
    const int32_t* row_slot = nullptr;
    KvView kv;
    // Optional [n_pos][n_rot] table from rope_table_build (same inv_freq, n_rot, mscale): the
    // kernel reads (cos, sin) of pair i at rope_table[pos * n_rot + 2i] instead of calling sincosf
    // (bit-identical results). Every position used must be < the table's n_pos. nullptr: sincosf.
    const float* rope_table = nullptr;
};
// Launched with programmatic dependent launch (pdl.cuh).
void rope_store_kv(const RopeStoreArgs& a, cudaStream_t stream);

// cos_sin [n_pos][n_rot] fp32 (device): for pos < n_pos, i < n_rot / 2, with the fp32 angle
// a = float(pos) * inv_freq[i] and the accurate sincosf: [pos * n_rot + 2i] = cos(a) * mscale,
// [pos * n_rot + 2i + 1] = sin(a) * mscale (exactly what rope_store_kv computes inline).
void rope_table_build(const float* inv_freq, int n_rot, int64_t n_pos, float mscale, float* cos_sin,
                      cudaStream_t stream);

struct AttnArgs {
    const float* q = nullptr;  // [n_tok, n_head, head_dim] fp32, token rows q_stride floats apart
    int64_t q_stride = 0;      // 0 = n_head * head_dim (e.g. q_dim + 2 * kv_dim inside qkv)
    int n_tok = 1;
    int n_head = 0, n_kv_head = 0, head_dim = 0;  // head_dim in {64, 128, 256} fast; others allowed
    float scale = 0.0f;
    int64_t window = 0;                 // 0 = full causal
    const int32_t* pos0_dev = nullptr;  // device int: position of token 0
    KvView kv;                          // rows 0 .. pos0 + n_tok - 1 filled
    float* out = nullptr;               // [n_tok, n_head * head_dim] fp32
    void* workspace = nullptr;          // attention_workspace_bytes(...) bytes, device
};

// Workspace for attention_decode (split-KV partials and counters) for a cache of n_ctx.
size_t attention_workspace_bytes(int64_t n_ctx, int n_head, int head_dim, int max_tokens);
// The workspace starts with this many int32 arrival counters; every launch leaves them at zero.
size_t attention_workspace_counters(int n_head);
// Decode / short verification: n_tok <= 8. Split-KV flash-decoding; graph-capturable; PDL launch.
// The workspace must be zeroed once (cudaMemset) before first use; the kernels leave it reusable.
void attention_decode(const AttnArgs& a, cudaStream_t stream);
// Prefill: any n_tok; pos0 is also given on the host (grid sizing). Flash-attention style
// (tiled, online softmax). Not captured in graphs. Workspace not needed (may be nullptr).
void attention_prefill(const AttnArgs& a, int64_t pos0, cudaStream_t stream);

}  // namespace pelican::cuda
