// Fast causal GQA attention: one task per (token, KV head) covers the KV head's whole group of
// query heads, so each K/V row is read once per group. Online softmax over key blocks of
// kKeyBlock: scores of a block, new running max, rescale the accumulators, accumulate p * V.
#include <algorithm>
#include <cassert>
#include <cmath>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_ops.h"
#include "core/float_convert.h"

namespace pelican::cpu {
namespace {

constexpr int kKeyBlock = 64;
constexpr int kMaxGroup = 16;  // query heads per KV head handled in one pass (more: several passes)

inline float cache_at(const void* base, bool f16, int64_t idx) {
    return f16 ? f16_to_f32(static_cast<const uint16_t*>(base)[idx]) : static_cast<const float*>(base)[idx];
}

void attention_group_scalar(const detail::AttnGroupArgs& a) {
    const int hd = a.head_dim;
    float m[kMaxGroup], l[kMaxGroup], s[kMaxGroup][kKeyBlock];
    for (int g = 0; g < a.group; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        std::fill(a.out + g * hd, a.out + (g + 1) * hd, 0.0f);
    }
    for (int64_t j0 = a.first; j0 <= a.last;) {
        const void *kc, *vc;
        int64_t r0;
        const int nk = detail::key_chunk(a, j0, kKeyBlock, &kc, &vc, &r0);
        for (int g = 0; g < a.group; ++g) {
            const float* q = a.q + g * hd;
            float bmax = -INFINITY;
            for (int j = 0; j < nk; ++j) {
                const int64_t base = (r0 + j) * a.pos_stride;
                float dot = 0.0f;
                for (int d = 0; d < hd; ++d) dot += q[d] * cache_at(kc, a.f16, base + d);
                s[g][j] = dot * a.scale;
                bmax = std::max(bmax, s[g][j]);
            }
            const float m_new = std::max(m[g], bmax);
            const float corr = std::exp(m[g] - m_new);  // 0 on the first block (m = -inf)
            float* o = a.out + g * hd;
            for (int d = 0; d < hd; ++d) o[d] *= corr;
            l[g] *= corr;
            for (int j = 0; j < nk; ++j) {
                const float p = std::exp(s[g][j] - m_new);
                l[g] += p;
                const int64_t base = (r0 + j) * a.pos_stride;
                for (int d = 0; d < hd; ++d) o[d] += p * cache_at(vc, a.f16, base + d);
            }
            m[g] = m_new;
        }
        j0 += nk;
    }
    for (int g = 0; g < a.group; ++g) {
        const float inv = 1.0f / l[g];
        for (int d = 0; d < hd; ++d) a.out[g * hd + d] *= inv;
    }
}

}  // namespace

namespace {

// One (token, KV head) task: the token at `pos` (row `row` of q / out) against its KV head.
void attend_one(const detail::AttnGroupKernel kernel, const float* q, const void* k, const void* v,
                const int32_t* blocks, int block_tokens, int64_t block_stride, int64_t row, int64_t pos,
                int kvh, const AttentionParams& p, float* out) {
    const int group = p.n_head / p.n_kv_head;
    const size_t elem = p.kv_type == DType::F16 ? 2 : 4;
    const int64_t hs = p.head_stride_or_default();
    detail::AttnGroupArgs a;
    a.k = static_cast<const uint8_t*>(k) + static_cast<size_t>(kvh * hs) * elem;
    a.v = static_cast<const uint8_t*>(v) + static_cast<size_t>(kvh * hs) * elem;
    a.pos_stride = p.pos_stride_or_default();
    a.blocks = blocks;
    a.block_tokens = block_tokens;
    a.block_stride = block_stride;
    a.f16 = p.kv_type == DType::F16;
    a.head_dim = p.head_dim;
    a.first = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
    a.last = pos;
    a.scale = p.scale;
    for (int g0 = 0; g0 < group; g0 += kMaxGroup) {
        const int64_t head = static_cast<int64_t>(kvh) * group + g0;
        a.group = std::min(kMaxGroup, group - g0);
        a.q = q + (row * p.n_head + head) * p.head_dim;
        a.out = out + (row * p.n_head + head) * p.head_dim;
        kernel(a);
    }
}

detail::AttnGroupKernel pick_kernel(const AttentionParams& p) {
    assert(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0 && p.head_dim <= kMaxHeadDim);
    assert(p.kv_type == DType::F32 || p.kv_type == DType::F16);
    return active_isa() == Isa::kAvx512 ? detail::attention_group_avx512 : attention_group_scalar;
}

}  // namespace

void attention(const float* q, const void* k_cache, const void* v_cache, int64_t pos0, int64_t n_tok,
               const AttentionParams& p, float* out, ThreadPool& pool) {
    const detail::AttnGroupKernel kernel = pick_kernel(p);
    pool.parallel_for(n_tok * p.n_kv_head, [&](int64_t task, int) {
        const int64_t t = task / p.n_kv_head;
        attend_one(kernel, q, k_cache, v_cache, nullptr, 0, 0, t, pos0 + t,
                   static_cast<int>(task % p.n_kv_head), p, out);
    });
}

void attention_paged(const float* q, KvPoolView k, KvPoolView v, int block_tokens,
                     std::span<const PagedSeq> seqs, const AttentionParams& p, float* out, ThreadPool& pool) {
    assert(block_tokens > 0 && k.block_stride == v.block_stride);
    const detail::AttnGroupKernel kernel = pick_kernel(p);
    int64_t n_rows = 0;
    for (const PagedSeq& s : seqs) n_rows += s.n_tok;
    // Rows are numbered across the sequences in order; a task finds its sequence by walking them
    // (a step holds at most a few hundred; the walk is small next to the attention itself).
    pool.parallel_for(n_rows * p.n_kv_head, [&](int64_t task, int) {
        const int64_t i = task / p.n_kv_head;  // i-th row over all sequences
        int64_t before = 0;
        size_t si = 0;
        while (before + seqs[si].n_tok <= i) before += seqs[si++].n_tok;
        const PagedSeq& s = seqs[si];
        const int64_t t = i - before;
        attend_one(kernel, q, k.base, v.base, s.block_table, block_tokens, k.block_stride, s.row0 + t,
                   s.pos0 + t, static_cast<int>(task % p.n_kv_head), p, out);
    });
}

}  // namespace pelican::cpu
