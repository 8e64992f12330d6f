// The Gated DeltaNet's delta rule on the CPU (the hybrid Qwen3.5 hot path): the same functions as
// ref::gated_delta_rule_recurrent / ref::gated_delta_rule_chunked (ops/ops_qwen35.h: shapes, formulas),
// in fp32 with the inner loops over contiguous value / key columns (AVX-512 when active, portable C++
// otherwise), the value heads split over the pool. Results equal the references up to fp32 rounding
// (the references sum in double). Scratch is per thread, grown on first use (no allocation after).
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "backend/cpu/deltanet_head.h"
#include "ops/ops_qwen35.h"

namespace pelican::cpu {

// q, k [n_tok, n_k_heads, d_k] (L2-normed, q scaled), v [n_tok, n_v_heads, d_v], g, beta [n_tok, n_v_heads],
// state [n_v_heads, d_k, d_v] (in/out), out [n_tok, n_v_heads, d_v]. chunked: the chunk-of-64 (WY) form
// for prompts, else token by token. state_in: the state before the first token when it is not `state`
// (read only; `state` then receives the result without being read first), nullptr: in place.
void gated_delta_rule(const float* q, const float* k, const float* v, const float* g, const float* beta,
                      int64_t n_tok, const DeltaNetShape& s, float* state, float* out, bool chunked,
                      ThreadPool& pool, const float* state_in = nullptr);

namespace detail {

void dn_recurrent_head_avx512(const DnHead& h);
void dn_chunked_head_avx512(const DnHead& h, float* scratch);

}  // namespace detail
}  // namespace pelican::cpu
