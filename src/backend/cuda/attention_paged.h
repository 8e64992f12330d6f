// Paged attention on the GPU: the query rows of many sequences in one launch, K/V read through
// per-sequence block tables from one paged pool per layer. Same semantics as cpu::attention_paged
// and ref::attention (online softmax in fp32, causal, optional sliding window, GQA: query head h
// uses KV head h / (n_head / n_kv_head)). Host-includable, fmt-free.
//
// Pool layout (per attention layer, one for K and one for V): [n_blocks][block_tokens][n_kv_head]
// [head_dim] of F16 or F32. Key position p of the sequence whose block table is `table` sits in pool
// row slot = table[p / block_tokens] * block_tokens + p % block_tokens, element (slot, h, d) at
// (slot * n_kv_head + h) * head_dim + d.
//
// Rows. Query row i sits at position row_pos[i] of the sequence whose block table is
// tables[row_table[i] * max_blocks ..]; it attends that sequence's keys max(0, pos - window + 1) ..
// pos (window 0: 0 .. pos). Decode rows of different sequences, the k+1 rows of a speculative
// verify and prefill chunks (consecutive rows of one sequence) mix freely. A row with row_pos < 0
// is padding (e.g. the unused rows of a graph bucket): its output row is set to 0 and neither its
// table nor any key is read.
//
// Paths (attention_paged.cu has the details):
//   * rows kernel, every row: split-KV flash decoding, one CTA per (row, KV head, split) serving
//     all the query heads of the GQA group (at most 8 per CTA), fp32 math. head_dim 64/128/256 at
//     F16 and 64/128 at F32 (16-byte aligned pools) take the vectorised kernel, any other head_dim
//     <= 256 a generic one.
//   * tile kernel (F16 pools, head_dim 64/128/256, 16-byte aligned pools, out 8-byte aligned,
//     n_rows >= kPagedTileMinRows and max_seq_rows >= kPagedTileMinRows): the rows
//     kPagedTileRows * t .. + kPagedTileRows - 1 (clipped to n_rows) are a "uniform tile" when there
//     are at least kPagedTileMinRows of them, all of one row_table entry at consecutive positions
//     (row_pos[first] >= 0). Uniform tiles are computed by tensor cores (q and p rounded to f16 once
//     each, fp32 accumulation, as attention_prefill) with K/V tiles shared by the tile's rows; the
//     rows kernel skips them. Decided on the device from row_pos / row_table, so a captured graph
//     serves any mix. A prefill chunk's rows go to the tile kernel only in the tiles it fills alone
//     (the batch's last tile, cut short by n_rows, counts with >= kPagedTileMinRows rows): a chunk
//     starting at a row offset that is a multiple of kPagedTileRows loses at most its last partial
//     tile to the rows kernel.
//
// Graph capture: the grids depend only on n_rows, max_kv, the shapes and the device, never on
// device data, so a launch captured once (per n_rows bucket and max_kv) serves any row_pos /
// row_table / tables contents. Both kernels are launched with programmatic dependent launch
// (pdl.cuh). Bad arguments abort with a message (as attention.h's functions do).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "core/dtype.h"

namespace pelican::cuda {

inline constexpr int kPagedTileRows = 64;     // rows of one tile-kernel CTA
inline constexpr int kPagedTileMinRows = 16;  // fewest rows of a tile the tile kernel takes
inline constexpr int kPagedMaxHeadDim = 256;

struct PagedAttnArgs {
    const float* q = nullptr;  // [n_rows][n_head * head_dim] fp32, rows q_stride floats apart
    int64_t q_stride = 0;      // 0 = n_head * head_dim
    int n_rows = 0;            // query rows of the step (all sequences)
    int n_head = 0, n_kv_head = 0, head_dim = 0;
    float scale = 0.0f;
    int64_t window = 0;                  // 0 = full causal
    const int32_t* row_pos = nullptr;    // device [n_rows] position of each row (< 0: padding)
    const int32_t* row_table = nullptr;  // device [n_rows] index of the row's block table
    const int32_t* tables = nullptr;     // device [n_tables][max_blocks] block ids
    int max_blocks = 0;                  // entries per table; positions >= max_blocks * block_tokens
                                         // are never read
    int block_tokens = 0;
    const void* k_pool = nullptr;  // device [n_blocks][block_tokens][n_kv_head][head_dim]
    const void* v_pool = nullptr;
    DType type = DType::F16;  // F16 or F32
    float* out = nullptr;     // device [n_rows][n_head * head_dim] fp32
    // paged_attention_workspace_bytes(>= n_rows, ...) bytes of device memory, 16-byte aligned, zeroed
    // once (cudaMemset) before first use; every launch leaves it reusable. One workspace per stream.
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    int64_t max_kv = 0;    // upper bound of any row's pos + 1 in this launch (sizes the splits; a
                           // row past it is still right, with fewer splits than it could use; 0: none)
    int max_seq_rows = 0;  // most rows any one sequence has in this launch (0 = unknown: n_rows);
                           // below kPagedTileMinRows the tile kernel is not launched (decode and
                           // verify steps). Affects speed only.
};

// Device bytes of the workspace for launches of at most max_rows rows with these shapes and
// max_kv (the split partials; 0 beyond the counters when no launch of this size splits).
size_t paged_attention_workspace_bytes(int max_rows, int n_head, int n_kv_head, int head_dim, int64_t max_kv);
// The workspace starts with this many int32 arrival counters; every launch leaves them at zero.
size_t paged_attention_workspace_counters();

void attention_paged(const PagedAttnArgs& a, cudaStream_t stream);

}  // namespace pelican::cuda
