// Internal interface of the attention kernels (scalar in attention.cpp, AVX-512 in
// attention_avx512.cpp). Plain C++ only (see matmul_kernels.h for why).
#pragma once

#include <cstdint>

namespace pelican::cpu::detail {

// One query token against one KV head for its whole group of query heads.
//   Contiguous (blocks == nullptr): position j of this KV head at k + j * pos_stride elements.
//   Paged: position j at k + blocks[j / block_tokens] * block_stride + (j % block_tokens) * pos_stride;
//   the kernels walk keys page by page (a key chunk never crosses a page).
struct AttnGroupArgs {
    const float* q = nullptr;         // [group, head_dim] the group's query heads (dense)
    const void* k = nullptr;          // K of this KV head (position 0, or page 0's row 0 when paged)
    const void* v = nullptr;          // V likewise
    int64_t pos_stride = 0;           // elements
    const int32_t* blocks = nullptr;  // paged: the sequence's block table
    int block_tokens = 0;             // paged: positions per block
    int64_t block_stride = 0;         // paged: elements between blocks
    bool f16 = false;                 // cache element type: fp16 (else fp32)
    int group = 0;                    // query heads sharing this KV head
    int head_dim = 0;
    int64_t first = 0;  // first attended position
    int64_t last = 0;   // last attended position (inclusive)
    float scale = 0.0f;
    float* out = nullptr;  // [group, head_dim]
};

// The key chunk starting at position j0: at most max_keys keys up to `last`, clipped at the page
// end; *k / *v point at its first row's page, *row0 is j0's row in that page (j0 itself when contiguous).
inline int key_chunk(const AttnGroupArgs& a, int64_t j0, int max_keys, const void** k, const void** v,
                     int64_t* row0) {
    int64_t n = a.last - j0 + 1 < max_keys ? a.last - j0 + 1 : max_keys;
    if (!a.blocks) {
        *k = a.k;
        *v = a.v;
        *row0 = j0;
        return static_cast<int>(n);
    }
    const int64_t page = j0 / a.block_tokens, r = j0 % a.block_tokens;
    if (a.block_tokens - r < n) n = a.block_tokens - r;
    const int64_t off = static_cast<int64_t>(a.blocks[page]) * a.block_stride * (a.f16 ? 2 : 4);
    *k = static_cast<const uint8_t*>(a.k) + off;
    *v = static_cast<const uint8_t*>(a.v) + off;
    *row0 = r;
    return static_cast<int>(n);
}

using AttnGroupKernel = void (*)(const AttnGroupArgs& a);

void attention_group_avx512(const AttnGroupArgs& a);

}  // namespace pelican::cpu::detail
