// Internal interface of the attention kernels (scalar in attention.cpp, AVX-512 in
// attention_avx512.cpp). Plain C++ only (see matmul_kernels.h for why).
#pragma once

#include <cstdint>

namespace pelican::cpu::detail {

// One query token against one KV head for its whole group of query heads.
struct AttnGroupArgs {
    const float* q = nullptr;  // [group, head_dim] the group's query heads (dense)
    const void* k = nullptr;   // K of this KV head at position 0; position j at k + j * pos_stride
    const void* v = nullptr;   // V likewise
    int64_t pos_stride = 0;    // elements
    bool f16 = false;          // cache element type: fp16 (else fp32)
    int group = 0;             // query heads sharing this KV head
    int head_dim = 0;
    int64_t first = 0;  // first attended position
    int64_t last = 0;   // last attended position (inclusive)
    float scale = 0.0f;
    float* out = nullptr;  // [group, head_dim]
};

using AttnGroupKernel = void (*)(const AttnGroupArgs& a);

void attention_group_avx512(const AttnGroupArgs& a);

}  // namespace pelican::cpu::detail
