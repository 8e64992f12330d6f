// cpu::attention_paged (each ISA this CPU has): several sequences of one batch whose K/V live in
// shuffled pages of a pool (blocks shared between sequences as a fork leaves them), against
// ref::attention (double) on each sequence's gathered contiguous cache, and bitwise against the
// same sequence run alone (sequences of a batch never affect each other).
//
// Tolerance as tests/unit/ops_attention_test.cpp derives it, with one online-softmax rescale per
// key chunk; a page boundary starts a new chunk, so the worst case is one chunk per key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/float_convert.h"
#include "ops/ops.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using test::Rng;

struct SeqCase {
    int64_t pos0, n_tok;
};

struct Case {
    int n_head, n_kv_head, head_dim, block_tokens;
    int64_t window;
    DType kv;
    std::vector<SeqCase> seqs;
};

void run_case(Rng& rng, const Case& c) {
    SCOPED_TRACE(testing::Message() << "heads " << c.n_head << "/" << c.n_kv_head << " hd " << c.head_dim
                                    << " block " << c.block_tokens << " window " << c.window << " "
                                    << dtype_name(c.kv));
    AttentionParams p;
    p.n_head = c.n_head;
    p.n_kv_head = c.n_kv_head;
    p.head_dim = c.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    p.kv_type = c.kv;
    p.window = c.window;
    const int64_t kvd = int64_t{c.n_kv_head} * c.head_dim, bt = c.block_tokens;
    // Block tables: sequence i > 0 shares sequence 0's first full block (a forked prefix) when
    // both have one; every other block is drawn from a shuffled pool.
    std::vector<std::vector<int32_t>> tables;
    int64_t n_blocks = 0;
    for (const SeqCase& s : c.seqs) n_blocks += (s.pos0 + s.n_tok + bt - 1) / bt;
    std::vector<int32_t> order(static_cast<size_t>(n_blocks));
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.gen() % i]);
    size_t next = 0;
    for (size_t i = 0; i < c.seqs.size(); ++i) {
        const int64_t nb = (c.seqs[i].pos0 + c.seqs[i].n_tok + bt - 1) / bt;
        std::vector<int32_t> t;
        for (int64_t b = 0; b < nb; ++b) {
            const bool share =
                i > 0 && b == 0 && !tables[0].empty() && c.seqs[i].pos0 >= bt && c.seqs[0].pos0 >= bt;
            t.push_back(share ? tables[0][0] : order[next++]);
        }
        tables.push_back(t);
    }
    const int64_t pool_elems = n_blocks * bt * kvd;
    std::vector<float> kf = test::random_vec(rng, pool_elems, 1.5f), vf = test::random_vec(rng, pool_elems);
    std::vector<uint16_t> kh(kf.size()), vh(vf.size());
    for (size_t i = 0; i < kf.size(); ++i) {
        kh[i] = f32_to_f16(kf[i]);
        vh[i] = f32_to_f16(vf[i]);
        kf[i] = f16_to_f32(kh[i]);
        vf[i] = f16_to_f32(vh[i]);
    }
    const bool f16 = c.kv == DType::F16;
    const cpu::KvPoolView kpool{f16 ? static_cast<const void*>(kh.data()) : kf.data(), bt * kvd};
    const cpu::KvPoolView vpool{f16 ? static_cast<const void*>(vh.data()) : vf.data(), bt * kvd};

    std::vector<cpu::PagedSeq> seqs;
    int64_t rows = 0;
    for (size_t i = 0; i < c.seqs.size(); ++i) {
        seqs.push_back({rows, c.seqs[i].n_tok, c.seqs[i].pos0, tables[i].data()});
        rows += c.seqs[i].n_tok;
    }
    const int64_t row_floats = int64_t{c.n_head} * c.head_dim;
    const std::vector<float> q = test::random_vec(rng, rows * row_floats);

    // The reference and its tolerance, per sequence, on the gathered contiguous cache.
    const double u = std::ldexp(1.0, -24);
    std::vector<float> yr(q.size());
    std::vector<double> tol(q.size());
    for (size_t i = 0; i < c.seqs.size(); ++i) {
        const int64_t n_ctx = c.seqs[i].pos0 + c.seqs[i].n_tok;
        std::vector<float> kc(static_cast<size_t>(n_ctx * kvd)), vc(kc.size());
        for (int64_t pos = 0; pos < n_ctx; ++pos) {
            const int64_t at = tables[i][static_cast<size_t>(pos / bt)] * bt * kvd + (pos % bt) * kvd;
            std::copy_n(kf.begin() + at, kvd, kc.begin() + pos * kvd);
            std::copy_n(vf.begin() + at, kvd, vc.begin() + pos * kvd);
        }
        AttentionParams pr = p;
        pr.kv_type = DType::F32;  // the fp16 values, widened exactly
        const int64_t r0 = seqs[i].row0;
        ref::attention(q.data() + r0 * row_floats, kc.data(), vc.data(), c.seqs[i].pos0, c.seqs[i].n_tok, pr,
                       yr.data() + r0 * row_floats);
        const int group = c.n_head / c.n_kv_head, hd = c.head_dim;
        for (int64_t t = 0; t < c.seqs[i].n_tok; ++t) {
            const int64_t pos = c.seqs[i].pos0 + t,
                          first = c.window ? std::max<int64_t>(0, pos - c.window + 1) : 0;
            for (int h = 0; h < c.n_head; ++h) {
                const int64_t kvh = h / group;
                const float* qv = q.data() + ((r0 + t) * c.n_head + h) * hd;
                double S = 0, smax = -INFINITY, smin = INFINITY;
                for (int64_t j = first; j <= pos; ++j) {
                    double a = 0, s = 0;
                    for (int d = 0; d < hd; ++d) {
                        a += std::fabs(qv[d] * kc[static_cast<size_t>(j * kvd + kvh * hd + d)]);
                        s += qv[d] * kc[static_cast<size_t>(j * kvd + kvh * hd + d)];
                    }
                    S = std::max(S, a * std::fabs(p.scale));
                    smax = std::max(smax, s * p.scale);
                    smin = std::min(smin, s * p.scale);
                }
                const int64_t n_keys = pos - first + 1;
                const double E = (hd + 8) * u * S;
                const double eps =
                    2 * E + u * (smax - smin) + 4 * u + 6 * u * static_cast<double>(n_keys + 1);
                for (int d = 0; d < hd; ++d) {
                    double vmax = 0;
                    for (int64_t j = first; j <= pos; ++j)
                        vmax = std::max(
                            vmax,
                            std::fabs(static_cast<double>(vc[static_cast<size_t>(j * kvd + kvh * hd + d)])));
                    tol[static_cast<size_t>(((r0 + t) * c.n_head + h) * hd + d)] =
                        (2 * eps + (n_keys + 10) * u) * vmax + 1e-30;
                }
            }
        }
    }

    std::vector<cpu::Isa> isas{cpu::Isa::kScalar};
    if (cpu::detected_isa() == cpu::Isa::kAvx512) isas.push_back(cpu::Isa::kAvx512);
    for (cpu::Isa isa : isas) {
        cpu::set_isa(isa);
        for (int threads : {1, 3}) {
            ThreadPool pool(threads);
            std::vector<float> y(q.size(), NAN);
            cpu::attention_paged(q.data(), kpool, vpool, c.block_tokens, seqs, p, y.data(), pool);
            for (size_t i = 0; i < y.size(); ++i)
                ASSERT_NEAR(y[i], yr[i], tol[i])
                    << "isa " << cpu::isa_name(isa) << " threads " << threads << " i " << i;
            // Each sequence alone gives the same bits.
            for (size_t i = 0; i < seqs.size(); ++i) {
                cpu::PagedSeq one = seqs[i];
                one.row0 = 0;
                std::vector<float> y1(static_cast<size_t>(one.n_tok * row_floats), NAN);
                cpu::attention_paged(q.data() + seqs[i].row0 * row_floats, kpool, vpool, c.block_tokens,
                                     std::span(&one, 1), p, y1.data(), pool);
                for (size_t j = 0; j < y1.size(); ++j)
                    ASSERT_EQ(y1[j], y[static_cast<size_t>(seqs[i].row0 * row_floats) + j])
                        << "sequence " << i << " alone, isa " << cpu::isa_name(isa);
            }
        }
    }
    cpu::set_isa(cpu::detected_isa());
}

TEST(PagedAttention, MatchesReferenceOnRandomBlockTables) {
    Rng rng;
    const std::vector<Case> cases = {
        {8, 2, 64, 16, 0, DType::F32, {{0, 1}, {37, 1}, {5, 9}, {16, 1}}},  // decode + a prefill chunk
        {32, 4, 64, 16, 0, DType::F16, {{200, 1}, {18, 3}}},                // fp16 pool, many pages
        {4, 4, 128, 32, 0, DType::F32, {{40, 1}, {0, 70}}},                 // prefill from 0 over pages
        {6, 3, 80, 5, 0, DType::F16, {{11, 4}, {23, 1}, {0, 2}}},           // odd block and head sizes
        {4, 1, 64, 1, 0, DType::F32, {{9, 2}, {3, 1}}},                     // one token per block
        {20, 1, 64, 64, 0, DType::F32, {{130, 1}, {64, 2}}},                // group of 20 (> 16)
        {8, 8, 64, 16, 12, DType::F32, {{50, 3}, {7, 1}}},                  // sliding window
    };
    for (const Case& c : cases) run_case(rng, c);
}

}  // namespace
}  // namespace pelican
