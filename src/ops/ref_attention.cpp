// Reference causal GQA attention over a KV cache: explicit scores, softmax in double.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "core/float_convert.h"
#include "ops/ops.h"

namespace pelican::ref {
namespace {

double cache_at(const void* cache, DType t, int64_t idx) {
    if (t == DType::F16) return f16_to_f32(static_cast<const uint16_t*>(cache)[idx]);
    return static_cast<const float*>(cache)[idx];
}

}  // namespace

void attention(const float* q, const void* k_cache, const void* v_cache, int64_t pos0, int64_t n_tok,
               const AttentionParams& p, float* out) {
    assert(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0);
    assert(p.kv_type == DType::F32 || p.kv_type == DType::F16);
    const int group = p.n_head / p.n_kv_head;
    const int64_t ps = p.pos_stride_or_default(), hs = p.head_stride_or_default();
    const int hd = p.head_dim;
    std::vector<double> score(static_cast<size_t>(pos0 + n_tok));
    for (int64_t t = 0; t < n_tok; ++t) {
        const int64_t pos = pos0 + t;
        const int64_t first = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
        for (int h = 0; h < p.n_head; ++h) {
            const float* qv = q + (t * p.n_head + h) * hd;
            const int64_t kvh = h / group;
            double mx = -INFINITY;
            for (int64_t j = first; j <= pos; ++j) {
                double dot = 0.0;
                for (int d = 0; d < hd; ++d)
                    dot += qv[d] * cache_at(k_cache, p.kv_type, j * ps + kvh * hs + d);
                score[j] = dot * p.scale;
                mx = std::max(mx, score[j]);
            }
            double sum = 0.0;
            for (int64_t j = first; j <= pos; ++j) {
                score[j] = std::exp(score[j] - mx);
                sum += score[j];
            }
            float* o = out + (t * p.n_head + h) * hd;
            for (int d = 0; d < hd; ++d) {
                double acc = 0.0;
                for (int64_t j = first; j <= pos; ++j)
                    acc += score[j] * cache_at(v_cache, p.kv_type, j * ps + kvh * hs + d);
                o[d] = static_cast<float>(acc / sum);
            }
        }
    }
}

}  // namespace pelican::ref
