// The q/k row permutation between Hugging Face's NeoX ("rotate_half") rope layout and the
// interleaved-pair ("normal") layout that GGUF files of the llama/mistral/granite architectures use.
//
// In one head of head_dim rows, HF pairs row i with row i + head_dim/2; GGUF llama pairs rows
// 2i and 2i+1. llama.cpp's converter reorders the rows of q_proj (with the attention head count)
// and k_proj (with the kv head count), weights and biases alike, so that
//
//   gguf_row[h*head_dim + 2*i + j] = hf_row[h*head_dim + j*(head_dim/2) + i]   (i < head_dim/2, j < 2)
//
// qwen2/qwen3 GGUFs are NOT permuted (they keep NeoX rope). Rows are moved whole, so any dtype
// works, block-quantized ones included (a row is ne[0] elements = whole blocks).
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"

namespace pelican {

// HF -> GGUF order. src and dst hold n_rows rows of row_bytes each (n_rows = n_head * head_dim;
// pass row_bytes = element size for a 1-D bias). Errors: n_rows not a multiple of n_head, an odd
// head_dim, buffer sizes that do not match, overlapping src/dst.
Status rope_permute_rows(std::span<const uint8_t> src, std::span<uint8_t> dst, int64_t n_rows,
                         int64_t row_bytes, int64_t n_head);
// GGUF -> HF order (the inverse), same arguments.
Status rope_unpermute_rows(std::span<const uint8_t> src, std::span<uint8_t> dst, int64_t n_rows,
                           int64_t row_bytes, int64_t n_head);

// Within one head: the HF row that GGUF row gguf_row (0 <= gguf_row < head_dim) comes from.
int64_t rope_permute_src_row(int64_t gguf_row, int64_t head_dim);

}  // namespace pelican
