// cpu::attention (each ISA this CPU has; fp32 and fp16 caches; GQA groups; decode and prefill
// with a position offset; sliding window; strided caches) against ref::attention (double).
//
// Tolerance, per output element (t, h, d), u = 2^-24:
//   scores: fp32 dot of head_dim terms plus the scale product: |ds| <= E = (hd + 8) u S where
//           S = |scale| max_j sum_d |q_d k_jd|;
//   p_j = exp(s_j - m): relative error <= 2E + u |s_j - m| + 4u (exp), plus 6u per rescale of
//           the running sums (one per 64-key block): eps = 2E + u max|s_j - m| + 4u + 6u n_blocks;
//   out = sum p_j v_j / sum p_j: <= (2 eps + (n_keys + 10) u) max_j |v_jd|.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/float_convert.h"
#include "ops/ops.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using test::Rng;

struct Case {
    int n_head, n_kv_head, head_dim;
    int64_t pos0, n_tok, window;
    DType kv;
    bool padded;  // caches with non-default strides
};

void run_case(Rng& rng, const Case& c) {
    SCOPED_TRACE(testing::Message() << "heads " << c.n_head << "/" << c.n_kv_head << " hd " << c.head_dim
                                    << " pos0 " << c.pos0 << " n_tok " << c.n_tok << " window " << c.window
                                    << " " << dtype_name(c.kv) << (c.padded ? " padded" : ""));
    AttentionParams p;
    p.n_head = c.n_head;
    p.n_kv_head = c.n_kv_head;
    p.head_dim = c.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)) * rng.uniform(0.5f, 2.0f);
    p.kv_type = c.kv;
    p.window = c.window;
    const int64_t n_ctx = c.pos0 + c.n_tok;
    if (c.padded) {  // head-major cache [n_kv_head, n_ctx + 3, head_dim + 8]
        p.pos_stride = c.head_dim + 8;
        p.head_stride = (n_ctx + 3) * p.pos_stride;
    }
    const int64_t ps = p.pos_stride_or_default(), hs = p.head_stride_or_default();
    const int64_t cache_elems = c.padded ? c.n_kv_head * hs : n_ctx * ps;
    std::vector<float> kf = test::random_vec(rng, cache_elems, 1.5f), vf = test::random_vec(rng, cache_elems);
    std::vector<uint16_t> kh(kf.size()), vh(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) {
        kh[i] = f32_to_f16(kf[i]);
        vh[i] = f32_to_f16(vf[i]);
        kf[i] = f16_to_f32(kh[i]);  // keep both caches representable in fp16 (same values)
        vf[i] = f16_to_f32(vh[i]);
    }
    const void* k = c.kv == DType::F16 ? static_cast<const void*>(kh.data()) : kf.data();
    const void* v = c.kv == DType::F16 ? static_cast<const void*>(vh.data()) : vf.data();
    const std::vector<float> q = test::random_vec(rng, c.n_tok * c.n_head * c.head_dim);
    std::vector<float> yr(q.size());
    ref::attention(q.data(), k, v, c.pos0, c.n_tok, p, yr.data());

    // Tolerances from the cache values (see the file comment).
    const double u = std::ldexp(1.0, -24);
    const int group = c.n_head / c.n_kv_head, hd = c.head_dim;
    std::vector<double> tol(q.size());
    for (int64_t t = 0; t < c.n_tok; ++t) {
        const int64_t pos = c.pos0 + t, first = c.window ? std::max<int64_t>(0, pos - c.window + 1) : 0;
        for (int h = 0; h < c.n_head; ++h) {
            const int64_t kvh = h / group;
            const float* qv = q.data() + (t * c.n_head + h) * hd;
            double S = 0, smax = -INFINITY, smin = INFINITY;
            for (int64_t j = first; j <= pos; ++j) {
                double a = 0, s = 0;
                for (int d = 0; d < hd; ++d) {
                    a += std::fabs(qv[d] * kf[j * ps + kvh * hs + d]);
                    s += qv[d] * kf[j * ps + kvh * hs + d];
                }
                S = std::max(S, a * std::fabs(p.scale));
                smax = std::max(smax, s * p.scale);
                smin = std::min(smin, s * p.scale);
            }
            const int64_t n_keys = pos - first + 1;
            const double E = (hd + 8) * u * S;
            const double eps =
                2 * E + u * (smax - smin) + 4 * u + 6 * u * static_cast<double>((n_keys + 63) / 64 + 1);
            for (int d = 0; d < hd; ++d) {
                double vmax = 0;
                for (int64_t j = first; j <= pos; ++j)
                    vmax = std::max(vmax, std::fabs(static_cast<double>(vf[j * ps + kvh * hs + d])));
                tol[(t * c.n_head + h) * hd + d] = (2 * eps + (n_keys + 10) * u) * vmax + 1e-30;
            }
        }
    }
    std::vector<cpu::Isa> isas{cpu::Isa::kScalar};
    if (cpu::detected_isa() == cpu::Isa::kAvx512) isas.push_back(cpu::Isa::kAvx512);
    for (cpu::Isa isa : isas) {
        cpu::set_isa(isa);
        for (int threads : {1, 2}) {
            ThreadPool pool(threads);
            std::vector<float> y(q.size(), NAN);
            cpu::attention(q.data(), k, v, c.pos0, c.n_tok, p, y.data(), pool);
            for (size_t i = 0; i < y.size(); ++i)
                ASSERT_NEAR(y[i], yr[i], tol[i])
                    << "isa " << cpu::isa_name(isa) << " threads " << threads << " i " << i;
        }
    }
    cpu::set_isa(cpu::detected_isa());
}

TEST(OpsAttention, MatchesReference) {
    Rng rng;
    const Case cases[] = {
        {4, 4, 64, 0, 1, 0, DType::F32, false},     // first token
        {32, 4, 64, 37, 1, 0, DType::F32, false},   // TinyLlama decode
        {32, 4, 64, 200, 1, 0, DType::F16, false},  // fp16 cache, several key blocks
        {8, 2, 128, 5, 9, 0, DType::F32, false},    // prefill with offset
        {6, 3, 80, 0, 70, 0, DType::F16, true},     // prefill from 0, head_dim not a multiple of 16, strided
        {4, 1, 40, 130, 3, 50, DType::F32, false},  // sliding window, MQA
        {20, 1, 64, 3, 2, 0, DType::F32, true},     // group of 20 (> one pass of 16)
    };
    for (const Case& c : cases) run_case(rng, c);
}

}  // namespace
}  // namespace pelican
