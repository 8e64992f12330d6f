// rope_store_kv (backend/cuda/attention.h) against the scalar reference (ops/ops.h), on fresh random
// inputs (replay a failure with PELICAN_TEST_SEED=<seed>): per-head RMSNorm (none / plain / one_plus),
// neox and interleaved rope with partial n_rot and mscale, k/v rows into F16 and F32 caches; nothing
// else is touched; the rope-table path (rope_table_build) bit-identical to the sincosf path.
//
// Small-problem mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h; for compute-sanitizer): every case
// but the 256K one (the 128K one still takes sincosf's slow path), the hd-80 case at position 650.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "core/float_convert.h"
#include "cuda_attention_test_util.h"
#include "cuda_test_buffers.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::expect_close;
using test::from_device;
using test::Rng;
using test::to_device;

// ---- rope_store_kv ------------------------------------------------------------------------------
struct RopeCase {
    int n_head, n_kv_head, hd, n_rot;
    bool neox;
    int norm;  // 0 none, 1 plain, 2 one_plus
    DType kv;
    int n_tok;
    int32_t pos0;
    float mscale;
    int extra = 0;  // columns after v in each qkv row (RopeStoreArgs::row_stride; must stay untouched)
};

void run_rope(Rng& rng, const RopeCase& c) {
    const std::string what = "rope heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_kv_head) +
                             " hd " + std::to_string(c.hd) + " n_rot " + std::to_string(c.n_rot) +
                             (c.neox ? " neox" : " interleaved") + " norm " + std::to_string(c.norm) + " " +
                             std::string(dtype_name(c.kv)) + " n_tok " + std::to_string(c.n_tok) + " pos0 " +
                             std::to_string(c.pos0);
    SCOPED_TRACE(what);
    const int hd = c.hd, half = c.n_rot / 2;
    const int64_t q_dim = static_cast<int64_t>(c.n_head) * hd,
                  kv_dim = static_cast<int64_t>(c.n_kv_head) * hd;
    const int64_t row = q_dim + 2 * kv_dim + c.extra;
    const std::vector<float> qkv = test::random_vec(rng, c.n_tok * row);
    std::vector<float> inv_freq(static_cast<size_t>(std::max(half, 1)));
    for (int i = 0; i < half; ++i)
        inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / c.n_rot)) * (i % 3 == 0 ? 0.25f : 1.0f);
    std::vector<float> qw(hd), kw(hd);
    for (int d = 0; d < hd; ++d) {
        qw[d] = c.norm == 2 ? rng.uniform(-0.3f, 0.3f) : rng.uniform(0.7f, 1.3f);
        kw[d] = c.norm == 2 ? rng.uniform(-0.3f, 0.3f) : rng.uniform(0.7f, 1.3f);
    }
    const NormWeight kind = c.norm == 2 ? NormWeight::kOnePlus : NormWeight::kPlain;
    const float eps = 1e-6f;

    // Reference: q [n_tok][n_head][hd], k [n_tok][n_kv][hd].
    std::vector<float> q(static_cast<size_t>(c.n_tok * q_dim)), k(static_cast<size_t>(c.n_tok * kv_dim));
    for (int t = 0; t < c.n_tok; ++t) {
        std::copy_n(qkv.begin() + t * row, q_dim, q.begin() + t * q_dim);
        std::copy_n(qkv.begin() + t * row + q_dim, kv_dim, k.begin() + t * kv_dim);
    }
    if (c.norm) {
        ref::rms_norm(q.data(), qw.data(), q.data(), c.n_tok * c.n_head, hd, eps, kind);
        ref::rms_norm(k.data(), kw.data(), k.data(), c.n_tok * c.n_kv_head, hd, eps, kind);
    }
    // Tolerance magnitudes from the (normed) inputs before the rotation.
    auto magnitude = [&](const std::vector<float>& x, int n_heads) {
        std::vector<double> m(x.size());
        for (size_t base = 0; base < x.size(); base += hd)
            for (int d = 0; d < hd; ++d) m[base + d] = std::fabs(x[base + d]);
        for (size_t base = 0; base < x.size(); base += hd)
            for (int i = 0; i < half; ++i) {
                const int ia = c.neox ? i : 2 * i, ib = c.neox ? i + half : 2 * i + 1;
                const double s = (std::fabs(x[base + ia]) + std::fabs(x[base + ib])) * c.mscale;
                m[base + ia] = m[base + ib] = s;
            }
        (void)n_heads;
        return m;
    };
    const std::vector<double> qmag = magnitude(q, c.n_head), kmag = magnitude(k, c.n_kv_head);
    if (c.n_rot > 0) {
        std::vector<int64_t> pos(c.n_tok);
        for (int t = 0; t < c.n_tok; ++t) pos[t] = c.pos0 + t;
        std::vector<float> cs(static_cast<size_t>(c.n_tok * half)), sn(cs.size());
        ref::rope_table(inv_freq.data(), c.n_rot, pos.data(), c.n_tok, c.mscale, cs.data(), sn.data());
        const RopeLayout layout = c.neox ? RopeLayout::kNeox : RopeLayout::kInterleaved;
        ref::rope(q.data(), c.n_tok, c.n_head, hd, q_dim, c.n_rot, cs.data(), sn.data(), layout);
        ref::rope(k.data(), c.n_tok, c.n_kv_head, hd, kv_dim, c.n_rot, cs.data(), sn.data(), layout);
    }
    // Bound (u = 2^-24): the norm's fp32 sum of squares and scaling, (hd / 2 + 4) u relative; the
    // rotation: sincosf (2 ulp) and the mscale product vs the reference table's one rounding, then
    // two products and a sum: 8u of |a| + |b|.
    const double u = std::ldexp(1.0, -24);
    const double rel = (c.norm ? hd / 2.0 + 4 : 0.0) * u + 8 * u;

    const int64_t n_ctx = c.pos0 + c.n_tok + 3;
    const size_t cache_n = static_cast<size_t>(n_ctx * kv_dim);
    const size_t es = c.kv == DType::F16 ? 2 : 4;
    DeviceBuffer dk(cache_n * es), dv(cache_n * es);
    PELICAN_CUDA_CHECK(cudaMemset(dk.get(), 0x5a, dk.size()));  // sentinel bytes
    PELICAN_CUDA_CHECK(cudaMemset(dv.get(), 0x5a, dv.size()));
    DeviceBuffer dqkv = to_device(qkv), dfreq = to_device(inv_freq), dqw = to_device(qw), dkw = to_device(kw);
    DeviceBuffer dpos = to_device(std::vector<int32_t>{c.pos0});
    cuda::RopeStoreArgs a;
    a.qkv = dqkv.as<float>();
    a.row_stride = c.extra > 0 ? row : 0;
    a.n_tok = c.n_tok;
    a.n_head = c.n_head;
    a.n_kv_head = c.n_kv_head;
    a.head_dim = hd;
    a.n_rot = c.n_rot;
    a.neox = c.neox;
    a.inv_freq = dfreq.as<float>();
    a.mscale = c.mscale;
    a.q_norm = c.norm ? dqw.as<float>() : nullptr;
    a.k_norm = c.norm ? dkw.as<float>() : nullptr;
    a.norm_eps = eps;
    a.norm_one_plus = c.norm == 2;
    a.pos0_dev = dpos.as<int32_t>();
    a.kv = {dk.get(), dv.get(), c.kv, n_ctx};
    cuda::rope_store_kv(a, nullptr);
    PELICAN_CUDA_CHECK(cudaDeviceSynchronize());

    const std::vector<float> gqkv = from_device<float>(dqkv, qkv.size());
    std::vector<uint8_t> rawk(cache_n * es), rawv(cache_n * es);
    PELICAN_CUDA_CHECK(cudaMemcpy(rawk.data(), dk.get(), rawk.size(), cudaMemcpyDeviceToHost));
    PELICAN_CUDA_CHECK(cudaMemcpy(rawv.data(), dv.get(), rawv.size(), cudaMemcpyDeviceToHost));
    // q in place; k and v parts of qkv untouched.
    std::vector<float> gq(q.size());
    std::vector<double> qtol(q.size());
    for (int t = 0; t < c.n_tok; ++t) {
        for (int64_t i = 0; i < q_dim; ++i) {
            gq[t * q_dim + i] = gqkv[t * row + i];
            qtol[t * q_dim + i] = rel * qmag[t * q_dim + i] + 1e-30;
        }
        for (int64_t i = q_dim; i < row; ++i)
            ASSERT_EQ(std::memcmp(&gqkv[t * row + i], &qkv[t * row + i], 4), 0)
                << "qkv k/v (or extra) part changed at " << i;
    }
    expect_close(gq, q, qtol, c.n_head, hd, what + " q");
    // Cache: rows pos0 .. pos0 + n_tok - 1 hold k (rel + one f16 rounding) and v (exact
    // conversion); every other byte keeps the sentinel.
    const size_t row_bytes = static_cast<size_t>(kv_dim) * es;
    std::vector<float> kc(k.size()), vref(k.size()), vc(k.size());
    std::vector<double> ktol(k.size()), vtol(k.size());
    for (int64_t p = 0; p < n_ctx; ++p) {
        const bool written = p >= c.pos0 && p < c.pos0 + c.n_tok;
        for (size_t b = 0; b < row_bytes && !written; ++b) {
            ASSERT_EQ(rawk[p * row_bytes + b], 0x5a) << "k cache row " << p << " written";
            ASSERT_EQ(rawv[p * row_bytes + b], 0x5a) << "v cache row " << p << " written";
        }
        if (!written) continue;
        const int64_t t = p - c.pos0;
        for (int64_t i = 0; i < kv_dim; ++i) {
            const size_t ci = static_cast<size_t>(p * kv_dim + i), ri = static_cast<size_t>(t * kv_dim + i);
            float kg, vg;
            if (c.kv == DType::F16) {
                uint16_t hk, hv;
                std::memcpy(&hk, &rawk[ci * 2], 2);
                std::memcpy(&hv, &rawv[ci * 2], 2);
                kg = f16_to_f32(hk);
                vg = f16_to_f32(hv);
            } else {
                std::memcpy(&kg, &rawk[ci * 4], 4);
                std::memcpy(&vg, &rawv[ci * 4], 4);
            }
            kc[ri] = kg;
            vc[ri] = vg;
            const float v_in = qkv[t * row + q_dim + kv_dim + i];
            vref[ri] = c.kv == DType::F16 ? f16_to_f32(f32_to_f16(v_in)) : v_in;
            vtol[ri] = 1e-30;
            ktol[ri] = rel * kmag[ri] +
                       (c.kv == DType::F16 ? std::ldexp(std::fabs(k[ri]), -10) + std::ldexp(1.0, -24) : 0) +
                       1e-30;
        }
    }
    expect_close(kc, k, ktol, c.n_kv_head, hd, what + " k cache");
    expect_close(vc, vref, vtol, c.n_kv_head, hd, what + " v cache");

    // The rope-table path: bit-identical q and cache bytes (table sized exactly to the last
    // position used).
    DeviceBuffer table(static_cast<size_t>(std::max<int64_t>(1, (c.pos0 + c.n_tok) * c.n_rot)) * 4);
    cuda::rope_table_build(dfreq.as<float>(), c.n_rot, c.pos0 + c.n_tok, c.mscale, table.as<float>(),
                           nullptr);
    DeviceBuffer dqkv2 = to_device(qkv), dk2(cache_n * es), dv2(cache_n * es);
    PELICAN_CUDA_CHECK(cudaMemset(dk2.get(), 0x5a, dk2.size()));
    PELICAN_CUDA_CHECK(cudaMemset(dv2.get(), 0x5a, dv2.size()));
    cuda::RopeStoreArgs a2 = a;
    a2.qkv = dqkv2.as<float>();
    a2.kv = {dk2.get(), dv2.get(), c.kv, n_ctx};
    a2.rope_table = table.as<float>();
    cuda::rope_store_kv(a2, nullptr);
    PELICAN_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> tqkv = from_device<float>(dqkv2, qkv.size());
    std::vector<uint8_t> tk(cache_n * es), tv(cache_n * es);
    PELICAN_CUDA_CHECK(cudaMemcpy(tk.data(), dk2.get(), tk.size(), cudaMemcpyDeviceToHost));
    PELICAN_CUDA_CHECK(cudaMemcpy(tv.data(), dv2.get(), tv.size(), cudaMemcpyDeviceToHost));
    size_t qdiff = 0, kdiff = 0;
    for (size_t i = 0; i < qkv.size(); ++i) qdiff += std::memcmp(&tqkv[i], &gqkv[i], 4) != 0;
    for (size_t i = 0; i < tk.size(); ++i) kdiff += tk[i] != rawk[i];
    EXPECT_EQ(qdiff, 0u) << what << ": rope table path: " << qdiff
                         << " qkv floats differ from the sincosf path";
    EXPECT_EQ(kdiff, 0u) << what << ": rope table path: " << kdiff << " k cache bytes differ";
    EXPECT_EQ(std::memcmp(tv.data(), rawv.data(), tv.size()), 0)
        << what << ": rope table path: v cache differs";
}

TEST(CudaRopeStore, MatchesReference) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const std::vector<RopeCase> full = {
        // heads, kv, hd, n_rot, neox, norm, cache, n_tok, pos0, mscale
        {4, 2, 16, 16, true, 0, DType::F32, 1, 0, 1.0f},
        {32, 8, 128, 128, true, 0, DType::F16, 1, 4999, 1.0f},  // llama decode
        {32, 8, 128, 128, false, 0, DType::F32, 8, 300, 1.0f},  // interleaved (GGUF llama)
        {16, 8, 128, 128, true, 1, DType::F16, 5, 17, 1.0f},    // qwen3: q/k norms
        {16, 2, 256, 64, true, 2, DType::F16, 3, 1000, 1.0f},   // qwen3.5: one_plus, partial rotary
        {8, 2, 64, 32, false, 1, DType::F32, 300, 123,
         1.2f},  // prefill rows, interleaved partial, yarn mscale
        {8, 4, 80, 40, true, 2, DType::F32, 7, 65000, 1.0f},           // generic head dim, large angles
        {4, 4, 32, 0, true, 1, DType::F16, 2, 5, 1.0f},                // no rotary, norm only
        {16, 2, 256, 64, true, 2, DType::F16, 4, 77, 1.0f, 16 * 256},  // qwen3.5 rows [q|k|v|gate]
        {32, 8, 128, 128, true, 0, DType::F16, 1, 131000, 1.0f},       // 128K context: sincosf slow path
        {8, 2, 64, 64, false, 2, DType::F16, 2, 262140, 0.8f},         // 256K, interleaved, mscale
    };
    // Small mode: the 256K case is dropped (the 128K one keeps sincosf's slow path) and the generic
    // head dim runs at position 650 (its cache would be 83 MB at 65000).
    std::vector<RopeCase> small(full.begin(), full.end() - 1);
    small[6].pos0 = 650;
    for (const RopeCase& c : test::cuda_test_small() ? small : full) run_rope(rng, c);
}

}  // namespace
}  // namespace pelican
