// cuda::gemv against the scalar references, on fresh random inputs (the weight upload and
// cuda::dequantize_matrix: cuda_gpu_matrix_test.cpp).
//
// Tolerances (u = 2^-24, M[t, o] = sum_i mag_i(o) |x_i| from test::partial_magnitude, which bounds
// every partial product the kernels form, zero-point terms included):
//  * Accumulation: each lane sums its units in fp32 (<= n_units/32 additions), then a 5-level
//    warp tree; each unit's term carries <= 3 roundings (scale product, int -> float, fma). So
//    |err| <= 2 (n_units/32 + 12) u M. Quantized weights: the integer dot products are exact.
//  * Quantized weights use int8 activations in 32-blocks (ops/act_quant.h's rule). Without a
//    norm the kernel rounds exactly as ref::quantize_act_q32, so we compare with the "twin":
//    ref::matmul on those rounded activations, within the accumulation bound. Always, we also
//    compare with ref::matmul on the unrounded activations: the rounding errors e_i (|e_i| <=
//    d/2, d = block amax / 127) are independent and uniform, so sum_i w_i e_i has standard
//    deviation sigma = sqrt(sum_i w_i^2 d_i^2 / 12); we allow 8 sigma (false failure ~1e-15).
//  * RMSNorm prologue: x' differs from ref::rms_norm's (double) by a few roundings: + 6 u M.
//  * Epilogue, in double on the host: v = s (y + b) gets |s| tol_y + 4 u |s| (|y| + |b|);
//    SwiGLU: |silu'| <= 1.1, so tol = 1.1 tol_g |v_u| + |silu(g)| tol_u + 8 u |out|; residual:
//    + 2 u (|out| + |res|).
// Failures print the worst output (token, row, values, tolerance) and how many outputs failed.
// Small mode (PELICAN_CUDA_TEST_SMALL=1, for compute-sanitizer): AllTypesPlain takes token counts
// 1, 3 and 8; EveryVariant and GraphCapturePdlChain the plain variants only (the L2-prefetch ones
// add hint instructions, no shared memory); PrefetchVariantsGiveSameBits its two short shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_matrix.h"
#include "ops/act_quant.h"
#include "ops/ops.h"
#include "cuda_test_buffers.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::from_device;
using test::Rng;
using test::to_device;

#define SKIP_WITHOUT_GPU()                \
    if (!cuda::gpu_available()) {         \
        GTEST_SKIP() << "no CUDA device"; \
    }                                     \
    static_assert(true, "")

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

bool is_quant(DType t) {
    return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q6_K;
}

int64_t row_bytes(DType t, int64_t n_in) {
    return static_cast<int64_t>(*dtype_row_bytes(t, static_cast<uint64_t>(n_in)));
}

// x rounded the way the kernels do: int8 32-blocks (act_quant.h), dequantized.
std::vector<float> round_acts32(const std::vector<float>& x, int64_t n_in, int n_tok) {
    std::vector<float> out(x.size());
    std::vector<int8_t> q(static_cast<size_t>(n_in));
    std::vector<float> d(static_cast<size_t>(n_in / 32)), s(static_cast<size_t>(n_in / 32));
    for (int t = 0; t < n_tok; ++t) {
        ref::quantize_act_q32(x.data() + t * n_in, n_in, q.data(), d.data(), s.data());
        for (int64_t i = 0; i < n_in; ++i) out[static_cast<size_t>(t * n_in + i)] = d[i / 32] * q[i];
    }
    return out;
}

// sigma of sum_i w_i (x^_i - x_i) for uniform rounding errors in 32-blocks (per output row).
std::vector<double> rounding_sigma(const test::RandomMatrix& m, const float* x) {
    std::vector<double> out(static_cast<size_t>(m.n_out));
    std::vector<float> w(static_cast<size_t>(m.n_in));
    std::vector<double> d(static_cast<size_t>(m.n_in / 32));
    for (int64_t b = 0; b < m.n_in / 32; ++b) {
        double amax = 0.0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[b * 32 + j])));
        d[static_cast<size_t>(b)] = amax / 127.0;
    }
    const int64_t rb = row_bytes(m.type, m.n_in);
    for (int64_t o = 0; o < m.n_out; ++o) {
        EXPECT_TRUE(dequantize_row(m.type, m.bytes.data() + o * rb, w.data(), m.n_in).ok());
        double v = 0.0;
        for (int64_t i = 0; i < m.n_in; ++i) {
            const double e = w[i] * d[static_cast<size_t>(i / 32)];
            v += e * e / 12.0;
        }
        out[static_cast<size_t>(o)] = std::sqrt(v);
    }
    return out;
}

struct Opts {
    std::vector<int64_t> parts{37};  // rows per stacked part (glu: {n_half, n_half})
    int n_tok = 1;
    bool random_blocks = false;  // quantized types: random codes/scales instead of ref-quantized
    bool norm = false, one_plus = false, bias = false, glu = false, residual = false, alias = false;
    float scale = 1.0f;
    int64_t x_pad = 0, y_pad = 0;  // extra floats per row (filled with NaN / a sentinel)
    int x_misalign = 0;            // floats: x starts this far past a 16-byte boundary
    int64_t stride_pad = 0;        // extra bytes per row of odd-numbered host parts
    int grid_policy = 0;
    int variant = -1;      // forced kernel variant (cuda::gemv_force_variant); -1: the normal choice
    int expect_bulk = -1;  // 1 / 0: the call must / must not take the bulk-copy kernel; -1: either
    std::string describe(DType t, int64_t n_in) const {
        std::string s = std::string(dtype_name(t)) + " n_in=" + std::to_string(n_in) + " parts=";
        for (int64_t p : parts) s += std::to_string(p) + ",";
        s += " n_tok=" + std::to_string(n_tok);
        if (random_blocks) s += " random-blocks";
        if (norm) s += one_plus ? " norm(1+w)" : " norm";
        if (bias) s += " bias";
        if (scale != 1.0f) s += " scale=" + std::to_string(scale);
        if (glu) s += " glu";
        if (residual) s += alias ? " residual(=y)" : " residual";
        if (x_pad || y_pad || x_misalign) s += " strided";
        if (stride_pad) s += " padded-host-rows";
        if (grid_policy) s += " grid=" + std::to_string(grid_policy) + "/SM";
        if (variant >= 0) s += std::string(" variant=") + cuda::gemv_variant_name(variant);
        if (expect_bulk == 1) s += " bulk";
        return s;
    }
};

// Worst error / tolerance ratio over the outputs of one check.
struct Worst {
    const char* what;
    double ratio = 0.0, err = 0.0, tol = 0.0, got = 0.0, want = 0.0;
    int t = -1;
    int64_t o = -1, n_bad = 0;
    void add(double g, double w, double tl, int tt, int64_t oo) {
        const double e = std::fabs(g - w);
        const double r = std::isfinite(g) ? e / tl : INFINITY;
        if (!(r <= 1.0)) ++n_bad;
        if (!(r <= ratio)) {
            ratio = r;
            err = e;
            tol = tl;
            got = g;
            want = w;
            t = tt;
            o = oo;
        }
    }
    void report(const std::string& c) const {
        EXPECT_LE(ratio, 1.0) << c << ": " << what << ": " << n_bad
                              << " outputs out of tolerance; worst at token " << t << " row " << o << ": gpu "
                              << got << " ref " << want << " |err| " << err << " tol " << tol;
    }
};

void run_case(Rng& rng, DType t, int64_t n_in, const Opts& o) {
    const std::string c = o.describe(t, n_in);
    SCOPED_TRACE(c);
    const bool quant = is_quant(t);
    const int64_t rb = row_bytes(t, n_in);
    // Weights: random parts, their host copies with padded rows, and the stacked whole.
    test::RandomMatrix all{t, n_in, 0, {}};
    std::vector<std::vector<uint8_t>> host_parts;
    std::vector<cuda::HostRows> rows;
    for (size_t i = 0; i < o.parts.size(); ++i) {
        test::RandomMatrix m = test::random_matrix(rng, t, n_in, o.parts[i], !(o.random_blocks && quant));
        all.n_out += m.n_out;
        all.bytes.insert(all.bytes.end(), m.bytes.begin(), m.bytes.end());
        const int64_t stride = rb + (i % 2 == 1 ? o.stride_pad : 0);
        std::vector<uint8_t> hp(static_cast<size_t>(stride * m.n_out), 0xff);
        for (int64_t r = 0; r < m.n_out; ++r)
            std::memcpy(hp.data() + r * stride, m.bytes.data() + r * rb, rb);
        host_parts.push_back(std::move(hp));
        rows.push_back({host_parts.back().data(), static_cast<size_t>(stride), m.n_out});
    }
    for (size_t i = 0; i < rows.size(); ++i) rows[i].data = host_parts[i].data();
    cuda::GpuMatrix gm;
    const char* err = nullptr;
    ASSERT_TRUE(cuda::upload_matrix(t, n_in, rows.data(), static_cast<int>(rows.size()), gm, nullptr, &err))
        << err;
    ASSERT_EQ(gm.n_out, all.n_out);
    const int64_t n_out = all.n_out, width = o.glu ? n_out / 2 : n_out;
    const int n_tok = o.n_tok;

    // Activations (NaN in the gaps: a kernel reading past n_in fails loudly).
    const int64_t xs = n_in + o.x_pad, ys = width + o.y_pad;
    const std::vector<float> x = test::random_vec(rng, n_in * n_tok);
    std::vector<float> xbuf(static_cast<size_t>(o.x_misalign + xs * n_tok), NAN);
    for (int tk = 0; tk < n_tok; ++tk)
        std::copy_n(x.begin() + tk * n_in, n_in, xbuf.begin() + o.x_misalign + tk * xs);
    std::vector<float> nw(static_cast<size_t>(n_in)), bias(static_cast<size_t>(n_out)),
        res(static_cast<size_t>(ys * n_tok), NAN);
    for (auto& v : nw) v = o.one_plus ? 0.2f * rng.normal() : 1.0f + 0.2f * rng.normal();
    for (auto& v : bias) v = 0.5f * rng.normal();
    for (int tk = 0; tk < n_tok; ++tk)
        for (int64_t i = 0; i < width; ++i) res[static_cast<size_t>(tk * ys + i)] = rng.normal();
    const float sentinel = 12345.0f;
    std::vector<float> ybuf(static_cast<size_t>(ys * n_tok), sentinel);
    if (o.residual && o.alias)
        for (int tk = 0; tk < n_tok; ++tk)
            for (int64_t i = 0; i < width; ++i)
                ybuf[static_cast<size_t>(tk * ys + i)] = res[static_cast<size_t>(tk * ys + i)];

    DeviceBuffer dx = to_device(xbuf), dnw = to_device(nw), dbias = to_device(bias), dres = to_device(res),
                 dy = to_device(ybuf);
    cuda::GemvArgs a;
    a.x = dx.as<float>() + o.x_misalign;
    a.x_stride = o.x_pad ? xs : 0;
    a.n_tok = n_tok;
    if (o.norm) {
        a.norm_w = dnw.as<float>();
        a.norm_eps = 1e-5f;
        a.norm_one_plus = o.one_plus;
    }
    a.bias = o.bias ? dbias.as<float>() : nullptr;
    a.scale = o.scale;
    a.glu = o.glu;
    a.residual = o.residual ? (o.alias ? dy.as<float>() : dres.as<float>()) : nullptr;
    a.y = dy.as<float>();
    a.y_stride = o.y_pad ? ys : 0;
    cuda::gemv_set_grid_policy(o.grid_policy);
    cuda::gemv_force_variant(o.variant);
    if (o.expect_bulk >= 0) {
        EXPECT_EQ(cuda::gemv_bulk_applies(gm, a), o.expect_bulk == 1) << c;
    }
    cuda::gemv(gm, a, nullptr);
    cuda::gemv_force_variant(-1);
    cuda::gemv_set_grid_policy(0);
    // A fault here (illegal address) poisons the context: name the case before anything else runs.
    const cudaError_t st = cudaDeviceSynchronize();
    ASSERT_EQ(st, cudaSuccess) << c << ": " << cudaGetErrorString(st);
    const std::vector<float> y = from_device<float>(dy, ybuf.size());
    cuda::free_matrix(gm);

    // References.
    std::vector<float> xn = x;
    if (o.norm)
        ref::rms_norm(x.data(), nw.data(), xn.data(), n_tok, n_in, 1e-5f,
                      o.one_plus ? NormWeight::kOnePlus : NormWeight::kPlain);
    const std::vector<float> xq = quant ? round_acts32(xn, n_in, n_tok) : xn;
    const Tensor wt = all.tensor();
    std::vector<float> y_twin(static_cast<size_t>(n_tok * n_out)), y_exact(y_twin.size());
    ref::matmul(wt, xq.data(), n_tok, y_twin.data());
    ref::matmul(wt, xn.data(), n_tok, y_exact.data());
    const int64_t unit = t == DType::F32                       ? 4
                         : t == DType::F16 || t == DType::BF16 ? 8
                         : t == DType::Q4_K                    ? 64
                                                               : 32;
    const double k_acc = 2.0 * (static_cast<double>((n_in + unit - 1) / unit) / 32.0 + 12.0);
    std::vector<double> tol_twin(y_twin.size()), tol_exact(y_twin.size());
    for (int tk = 0; tk < n_tok; ++tk) {
        const std::vector<double> mag = test::partial_magnitude(all, xq.data() + tk * n_in);
        const std::vector<double> sig =
            quant ? rounding_sigma(all, xn.data() + tk * n_in) : std::vector<double>(n_out, 0.0);
        for (int64_t r = 0; r < n_out; ++r) {
            const size_t i = static_cast<size_t>(tk * n_out + r);
            tol_twin[i] = k_acc * kU * mag[r] + 1e-30;
            tol_exact[i] = tol_twin[i] + 8.0 * sig[r] + (o.norm ? 6.0 * kU * mag[r] : 0.0);
        }
    }
    // Epilogue in double with propagated tolerances.
    auto finish = [&](const std::vector<float>& acc, const std::vector<double>& tol, int tk, int64_t i,
                      double& tl) {
        auto v_of = [&](int64_t r, double& tv) {
            const double yv = acc[static_cast<size_t>(tk * n_out + r)], b = o.bias ? bias[r] : 0.0;
            const double s = o.scale;
            tv = std::fabs(s) * tol[static_cast<size_t>(tk * n_out + r)] +
                 4.0 * kU * std::fabs(s) * (std::fabs(yv) + std::fabs(b));
            return s * (yv + b);
        };
        double out;
        if (o.glu) {
            double tg, tu;
            const double g = v_of(i, tg), vu = v_of(i + width, tu);
            const double silu = g / (1.0 + std::exp(-g));
            out = silu * vu;
            tl = 1.1 * tg * std::fabs(vu) + std::fabs(silu) * tu + 1.1 * tg * tu + 8.0 * kU * std::fabs(out);
        } else {
            out = v_of(i, tl);
        }
        if (o.residual) {
            const double rv = res[static_cast<size_t>(tk * ys + i)];
            tl += 2.0 * kU * (std::fabs(out) + std::fabs(rv));
            out += rv;
        }
        return out;
    };
    Worst w_twin{"vs twin (same activation rounding)"}, w_exact{"vs exact (unrounded activations)"};
    int64_t gap_changed = 0;
    for (int tk = 0; tk < n_tok; ++tk) {
        for (int64_t i = 0; i < ys; ++i) {
            const float g = y[static_cast<size_t>(tk * ys + i)];
            if (i >= width) {
                gap_changed += g != sentinel;
                continue;
            }
            double tl;
            if (quant && !o.norm) {
                const double want = finish(y_twin, tol_twin, tk, i, tl);
                w_twin.add(g, want, tl, tk, i);
            }
            const double want = finish(y_exact, tol_exact, tk, i, tl);
            w_exact.add(g, want, tl, tk, i);
        }
    }
    if (quant && !o.norm) w_twin.report(c);
    w_exact.report(c);
    EXPECT_EQ(gap_changed, 0) << c << ": outputs written past the row width (y_stride gaps)";
}

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                        DType::Q4_0, DType::Q4_K, DType::Q6_K};

int64_t odd_n_in(DType t) { return is_quant(t) ? 4096 + 256 : 1000; }

TEST(CudaGemv, AllTypesPlain) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    const std::vector<int> tokens =
        test::cuda_test_size(std::vector<int>{1, 2, 3, 5, 8}, std::vector<int>{1, 3, 8});
    for (DType t : kTypes) {
        for (int n_tok : tokens) {
            Opts o;
            o.n_tok = n_tok;
            o.parts = {37};
            run_case(rng, t, 256, o);
            o.parts = {100};
            run_case(rng, t, odd_n_in(t), o);
            if (is_quant(t)) {
                o.random_blocks = true;
                o.parts = {45};
                run_case(rng, t, 512, o);
            }
        }
    }
    // Float types accept any n_in (rows padded on the device).
    for (DType t : {DType::F32, DType::F16, DType::BF16})
        for (int64_t n_in : {1, 3, 100, 1000, 1040}) {
            Opts o;
            o.parts = {13};
            o.n_tok = 3;
            run_case(rng, t, n_in, o);
        }
}

TEST(CudaGemv, NormPrologue) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : kTypes)
        for (int n_tok : {1, 3, 8})
            for (bool one_plus : {false, true}) {
                Opts o;
                o.n_tok = n_tok;
                o.norm = true;
                o.one_plus = one_plus;
                o.parts = {41};
                run_case(rng, t, odd_n_in(t), o);
            }
}

TEST(CudaGemv, Epilogues) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : kTypes)
        for (int n_tok : {1, 2, 8}) {
            const int64_t n_in = is_quant(t) ? 512 : 264;
            Opts o;
            o.n_tok = n_tok;
            o.parts = {29};
            o.bias = true;
            run_case(rng, t, n_in, o);
            o.scale = 0.75f;
            run_case(rng, t, n_in, o);
            o.residual = true;
            run_case(rng, t, n_in, o);
            o.alias = true;
            o.bias = false;
            run_case(rng, t, n_in, o);
            // SwiGLU over [gate; up] stacked from two parts, alone and with everything else.
            Opts g;
            g.n_tok = n_tok;
            g.glu = true;
            g.parts = {35, 35};
            run_case(rng, t, n_in, g);
            g.bias = g.norm = g.residual = g.alias = true;
            g.scale = 1.25f;
            run_case(rng, t, n_in, g);
            g.alias = false;
            g.one_plus = true;
            run_case(rng, t, n_in, g);
        }
}

TEST(CudaGemv, StackedPartsAndStrides) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : kTypes)
        for (int n_tok : {1, 3}) {
            Opts o;
            o.n_tok = n_tok;
            o.parts = {64, 16, 0, 17};  // q, k, (an empty part), v
            o.stride_pad = 64;
            run_case(rng, t, 256, o);
            o.x_pad = 32;
            o.y_pad = 5;
            o.x_misalign = 1;  // scalar activation loads
            o.bias = o.residual = true;
            run_case(rng, t, 256, o);
            o.x_misalign = 0;
            o.x_pad = 4;
            o.norm = true;
            run_case(rng, t, 256, o);
        }
}

// Row groups looped over by fewer CTAs (grid policy 1/SM) and one CTA per group: every output
// row is computed by the same code in the same order, so the bits agree exactly.
TEST(CudaGemv, GridPolicyGivesSameBits) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : kTypes) {
        for (bool glu : {false, true}) {
            Opts o;
            o.n_tok = glu ? 2 : 1;
            o.glu = glu;
            o.parts = glu ? std::vector<int64_t>{1500, 1500} : std::vector<int64_t>{3001};
            o.grid_policy = 1;
            run_case(rng, t, 512, o);  // checks against the references
        }
        test::RandomMatrix m = test::random_matrix(rng, t, 512, 2999, true);
        cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(row_bytes(t, 512)), 2999};
        cuda::GpuMatrix gm;
        const char* err = nullptr;
        ASSERT_TRUE(cuda::upload_matrix(t, 512, &hr, 1, gm, nullptr, &err)) << err;
        const std::vector<float> x = test::random_vec(rng, 512 * 3);
        DeviceBuffer dx = to_device(x), dy(2999 * 3 * sizeof(float));
        cuda::GemvArgs a;
        a.x = dx.as<float>();
        a.n_tok = 3;
        a.y = dy.as<float>();
        std::vector<std::vector<float>> outs;
        for (int pol : {0, 1, 2, 100000}) {
            cuda::gemv_set_grid_policy(pol);
            cuda::gemv(gm, a, nullptr);
            outs.push_back(from_device<float>(dy, 2999 * 3));
        }
        cuda::gemv_set_grid_policy(0);
        for (size_t i = 1; i < outs.size(); ++i)
            EXPECT_EQ(std::memcmp(outs[0].data(), outs[i].data(), outs[0].size() * sizeof(float)), 0)
                << dtype_name(t) << ": grid policy " << i << " changed the bits";
        cuda::free_matrix(gm);
    }
}

// Every decode kernel variant (rows per warp, units in flight, split-K, grid policy, L2 prefetch
// mode; the table is iterated, so new variants are covered as they are added) against the
// references: long rows with a tail chunk, the short (n_in <= 4096) and long norm prologues,
// glu with every epilogue, and more rows than one CTA covers.
TEST(CudaGemv, EveryVariant) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    const int n_var = test::cuda_test_size(cuda::gemv_variant_count(), cuda::gemv_plain_variant_count());
    for (DType t : kTypes)
        for (int v = 0; v < n_var; ++v) {
            const bool q = is_quant(t);
            Opts o;
            o.variant = v;
            o.parts = {300};
            run_case(rng, t, q ? 4096 + 768 : 1000, o);  // several chunks, a partial last one
            o.norm = true;
            o.parts = {37};
            run_case(rng, t, q ? 4096 : 1040, o);  // short prologue (quantized)
            o.one_plus = true;
            run_case(rng, t, q ? 8192 + 256 : 264, o);  // long prologue
            Opts g;
            g.variant = v;
            g.glu = true;
            g.parts = {67, 67};
            g.bias = g.norm = g.residual = g.alias = true;
            g.scale = 1.25f;
            run_case(rng, t, q ? 1024 : 520, g);
            Opts r;
            r.variant = v;
            r.parts = {40, 9};
            r.bias = r.residual = true;
            r.x_misalign = 1;  // scalar activation loads
            run_case(rng, t, 256, r);
            if (v % 3 == 0) {  // token counts > 1 take the variant's grid policy only
                r.n_tok = 3;
                run_case(rng, t, 256, r);
            }
        }
}

// The L2 prefetch variants (named "<plain variant>+<mode>") only add hints: each gives exactly the
// bits of its plain variant (same configuration and grid policy: variant % plain count). Shapes:
// long rows (partial-row windows for the float types, several groups per CTA under the /1 and /2
// grid policies: the rolling window), glu with 66-byte Q4_0 scale rows (unaligned row starts, an
// allocation ending off a 16-byte boundary), and n_tok = 3 (the token-group kernels).
TEST(CudaGemv, PrefetchVariantsGiveSameBits) {
    SKIP_WITHOUT_GPU();
    const int nv = cuda::gemv_variant_count();
    int n_plain = 0;
    while (n_plain < nv && std::strchr(cuda::gemv_variant_name(n_plain), '+') == nullptr) ++n_plain;
    ASSERT_GT(n_plain, 0);
    ASSERT_GT(nv, n_plain) << "no prefetch variants";
    ASSERT_EQ(nv % n_plain, 0);
    for (int v = n_plain; v < nv; ++v)
        ASSERT_EQ(std::string(cuda::gemv_variant_name(v))
                      .rfind(cuda::gemv_variant_name(v % n_plain) + std::string("+"), 0),
                  0u)
            << cuda::gemv_variant_name(v);
    struct Shape {
        int64_t n_in, n_out;
        bool glu;
        int n_tok;
    };
    Rng rng;
    for (DType t : kTypes) {
        const bool q = is_quant(t);
        const int64_t short_in = !q ? 1036 : t == DType::Q4_K || t == DType::Q6_K ? 1280 : 1056;
        const Shape shapes[] = {
            {q ? 14336 : 9000, q ? 1531 : 700, false, 1},
            {short_in, 2 * 777, true, 1},
            {short_in, 1531, false, 3},
        };
        for (const Shape& s : shapes) {
            if (test::cuda_test_small() && &s == &shapes[0]) continue;  // the long rows: full mode only
            SCOPED_TRACE(std::string(dtype_name(t)) + " n_in=" + std::to_string(s.n_in) +
                         " n_out=" + std::to_string(s.n_out) + (s.glu ? " glu" : "") +
                         " n_tok=" + std::to_string(s.n_tok));
            test::RandomMatrix m = test::random_matrix(rng, t, s.n_in, s.n_out, true);
            cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(row_bytes(t, s.n_in)), s.n_out};
            cuda::GpuMatrix gm;
            const char* err = nullptr;
            ASSERT_TRUE(cuda::upload_matrix(t, s.n_in, &hr, 1, gm, nullptr, &err)) << err;
            const int64_t width = s.glu ? s.n_out / 2 : s.n_out;
            const size_t ny = static_cast<size_t>(width * s.n_tok);
            const std::vector<float> x = test::random_vec(rng, s.n_in * s.n_tok),
                                     nw = test::random_vec(rng, s.n_in),
                                     res = test::random_vec(rng, static_cast<int64_t>(ny)),
                                     bias = test::random_vec(rng, s.n_out);
            DeviceBuffer dx = to_device(x), dnw = to_device(nw), dres = to_device(res),
                         dbias = to_device(bias), dy(ny * sizeof(float));
            cuda::GemvArgs a;
            a.x = dx.as<float>();
            a.n_tok = s.n_tok;
            a.norm_w = dnw.as<float>();
            a.glu = s.glu;
            a.residual = s.glu ? dres.as<float>() : nullptr;
            a.bias = s.n_tok > 1 ? dbias.as<float>() : nullptr;
            a.y = dy.as<float>();
            std::vector<std::vector<float>> outs(static_cast<size_t>(nv));
            for (int v = 0; v < nv; ++v) {
                ASSERT_EQ(cudaMemset(dy.get(), 0xff, ny * sizeof(float)), cudaSuccess);  // NaN: unwritten
                cuda::gemv_force_variant(v);
                cuda::gemv(gm, a, nullptr);
                cuda::gemv_force_variant(-1);
                const cudaError_t st = cudaDeviceSynchronize();
                ASSERT_EQ(st, cudaSuccess) << cuda::gemv_variant_name(v) << ": " << cudaGetErrorString(st);
                outs[static_cast<size_t>(v)] = from_device<float>(dy, ny);
            }
            for (int v = 0; v < n_plain; ++v) {
                const std::vector<float>& y = outs[static_cast<size_t>(v)];
                EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float f) { return std::isfinite(f); }))
                    << cuda::gemv_variant_name(v) << " left outputs unwritten";
            }
            for (int v = n_plain; v < nv; ++v)
                EXPECT_EQ(std::memcmp(outs[static_cast<size_t>(v)].data(),
                                      outs[static_cast<size_t>(v % n_plain)].data(), ny * sizeof(float)),
                          0)
                    << cuda::gemv_variant_name(v) << " differs from " << cuda::gemv_variant_name(v % n_plain);
            cuda::free_matrix(gm);
        }
    }
}

// A chain of dependent PDL-launched GEMVs (y1 = W rms_norm(x); y2 += W y1; y1 = W y2) captured
// in a graph equals the same chain launched eagerly, for every variant.
TEST(CudaGemv, GraphCapturePdlChain) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : {DType::Q4_0, DType::Q6_K, DType::F16}) {
        constexpr int64_t n = 1024;
        test::RandomMatrix m = test::random_matrix(rng, t, n, n, true);
        cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(row_bytes(t, n)), n};
        cuda::GpuMatrix gm;
        const char* err = nullptr;
        ASSERT_TRUE(cuda::upload_matrix(t, n, &hr, 1, gm, nullptr, &err)) << err;
        const std::vector<float> x = test::random_vec(rng, n), nw = test::random_vec(rng, n),
                                 y2_0 = test::random_vec(rng, n);
        DeviceBuffer dx = to_device(x), dnw = to_device(nw), dy1(n * sizeof(float)), dy2 = to_device(y2_0);
        cudaStream_t s;
        ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
        auto chain = [&] {
            cuda::GemvArgs a;
            a.x = dx.as<float>();
            a.norm_w = dnw.as<float>();
            a.y = dy1.as<float>();
            cuda::gemv(gm, a, s);
            cuda::GemvArgs b;
            b.x = dy1.as<float>();
            b.scale = 0.01f;
            b.residual = dy2.as<float>();
            b.y = dy2.as<float>();
            cuda::gemv(gm, b, s);
            cuda::GemvArgs c;
            c.x = dy2.as<float>();
            c.scale = 0.01f;
            c.y = dy1.as<float>();
            cuda::gemv(gm, c, s);
        };
        const int n_var = test::cuda_test_size(cuda::gemv_variant_count(), cuda::gemv_plain_variant_count());
        for (int v = 0; v < n_var; ++v) {
            cuda::gemv_force_variant(v);
            ASSERT_EQ(cudaMemcpy(dy2.get(), y2_0.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                      cudaSuccess);
            chain();
            ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << cuda::gemv_variant_name(v);
            const std::vector<float> eager1 = from_device<float>(dy1, n), eager2 = from_device<float>(dy2, n);
            ASSERT_EQ(cudaMemcpy(dy2.get(), y2_0.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                      cudaSuccess);
            cudaGraph_t g;
            cudaGraphExec_t ge;
            ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
            chain();
            ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
            ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
            ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
            ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << cuda::gemv_variant_name(v);
            EXPECT_EQ(from_device<float>(dy1, n), eager1)
                << dtype_name(t) << " " << cuda::gemv_variant_name(v);
            EXPECT_EQ(from_device<float>(dy2, n), eager2)
                << dtype_name(t) << " " << cuda::gemv_variant_name(v);
            cudaGraphExecDestroy(ge);
            cudaGraphDestroy(g);
        }
        cuda::gemv_force_variant(-1);
        cudaStreamDestroy(s);
        cuda::free_matrix(gm);
    }
}

// gemv_autotune picks a valid variant, gemv then uses it (same bits as forcing it), and tuning
// inside a stream capture is skipped.
TEST(CudaGemv, AutotuneChoosesAVariant) {
    SKIP_WITHOUT_GPU();
    // The tuned variants belong to the register-streaming kernels: the bulk-copy kernel (which has no
    // variants and would take this one-token call) is off for this test.
    struct BulkOff {
        BulkOff() { cuda::gemv_set_bulk(0); }
        ~BulkOff() { cuda::gemv_set_bulk(-1); }
    } bulk_off;
    Rng rng;
    constexpr int64_t n_in = 2048, n_out = 700;
    test::RandomMatrix m = test::random_matrix(rng, DType::Q4_0, n_in, n_out, true);
    cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(row_bytes(DType::Q4_0, n_in)), n_out};
    cuda::GpuMatrix gm;
    const char* err = nullptr;
    ASSERT_TRUE(cuda::upload_matrix(DType::Q4_0, n_in, &hr, 1, gm, nullptr, &err)) << err;
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cuda::GemvArgs shape;
    static const float flag = 0.0f;
    shape.norm_w = &flag;  // never dereferenced
    std::vector<float> times(static_cast<size_t>(cuda::gemv_variant_count()));
    cuda::gemv_autotune(gm, shape, s, times.data());
    ASSERT_GE(gm.gemv_variant, 0);
    ASSERT_LT(gm.gemv_variant, cuda::gemv_variant_count());
    // Every plain variant is timed; the L2-prefetch variants (after the plain ones) only with
    // PELICAN_GEMV_PREFETCH=1 (see gemv_autotune).
    const char* pf = std::getenv("PELICAN_GEMV_PREFETCH");
    const bool prefetch_tuned = pf && pf[0] == '1';
    for (size_t v = 0; v < times.size(); ++v) {
        if (v < static_cast<size_t>(cuda::gemv_plain_variant_count()) || prefetch_tuned)
            EXPECT_GT(times[v], 0.0f) << cuda::gemv_variant_name(static_cast<int>(v));
        else
            EXPECT_EQ(times[v], -1.0f) << cuda::gemv_variant_name(static_cast<int>(v));
    }
    const std::vector<float> x = test::random_vec(rng, n_in), nw = test::random_vec(rng, n_in);
    DeviceBuffer dx = to_device(x), dnw = to_device(nw), dy(n_out * sizeof(float));
    cuda::GemvArgs a;
    a.x = dx.as<float>();
    a.norm_w = dnw.as<float>();
    a.y = dy.as<float>();
    cuda::gemv(gm, a, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::vector<float> tuned = from_device<float>(dy, n_out);
    cuda::gemv_force_variant(gm.gemv_variant);
    cuda::gemv(gm, a, s);
    cuda::gemv_force_variant(-1);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(from_device<float>(dy, n_out), tuned);
    // Cached: a second matrix of the same shape gets the same choice without timing.
    cuda::GpuMatrix gm2;
    ASSERT_TRUE(cuda::upload_matrix(DType::Q4_0, n_in, &hr, 1, gm2, nullptr, &err)) << err;
    cuda::gemv_autotune(gm2, shape, s);
    EXPECT_EQ(gm2.gemv_variant, gm.gemv_variant);
    // Inside a capture: nothing happens (and the capture stays valid).
    cuda::GpuMatrix gm3;
    ASSERT_TRUE(cuda::upload_matrix(DType::Q4_0, n_in, &hr, 1, gm3, nullptr, &err)) << err;
    cudaGraph_t g;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cuda::gemv_autotune(gm3, shape, s);
    cuda::gemv(gm3, a, s);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    EXPECT_EQ(gm3.gemv_variant, -1);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    cuda::free_matrix(gm);
    cuda::free_matrix(gm2);
    cuda::free_matrix(gm3);
}

// The bulk-copy kernel (gemv_bulk.cuh; one token, quantized weights) against the references: every
// lane layout (rows of 4 / 8 / 16 units packed side by side in a warp; 1, 2, 4 units per lane with
// activations in registers; longer rows with activations read from shared memory), a ring refilled
// many times (rows far more than a CTA's ring holds), fewer rows than CTAs, glu with every epilogue,
// the norm prologue, scalar activation loads, and a shape it must leave to the register kernels
// (Q6_K rows whose scale plane is not a multiple of 16 bytes).
TEST(CudaGemv, BulkKernelMatchesReferences) {
    SKIP_WITHOUT_GPU();
    struct BulkOn {
        BulkOn() { cuda::gemv_set_bulk(1); }
        ~BulkOn() { cuda::gemv_set_bulk(-1); }
    } bulk_on;
    Rng rng;
    const bool small = test::cuda_test_small();
    struct Shape {
        DType t;
        int64_t n_in, n_out;
    };
    const std::vector<Shape> shapes = {
        {DType::Q4_0, 256, 97},   {DType::Q4_0, 512, 300},  {DType::Q4_0, 1024, 131},
        {DType::Q4_0, 2048, 700}, {DType::Q4_0, 4096, 257}, {DType::Q4_0, 4352, 190},
        {DType::Q8_0, 512, 77},   {DType::Q8_0, 2048, 400}, {DType::Q8_0, 4352, 90},
        {DType::Q4_K, 256, 150},  {DType::Q4_K, 512, 300},  {DType::Q4_K, 2048, 333},
        {DType::Q4_K, 4096, 200}, {DType::Q4_K, 8192, 64},  {DType::Q4_K, 16384, 40},
        {DType::Q6_K, 2048, 500}, {DType::Q6_K, 4096, 100},
    };
    for (const Shape& sh : shapes) {
        Opts o;
        o.expect_bulk = 1;
        o.parts = {sh.n_out};
        run_case(rng, sh.t, sh.n_in, o);
        Opts n = o;
        n.norm = n.one_plus = true;
        n.residual = n.alias = true;
        run_case(rng, sh.t, sh.n_in, n);
        if (small) continue;
        Opts g = o;
        g.glu = true;
        g.parts = {sh.n_out, sh.n_out};
        g.bias = g.norm = g.residual = true;
        g.scale = 1.25f;
        run_case(rng, sh.t, sh.n_in, g);
    }
    for (DType t : {DType::Q4_0, DType::Q4_K}) {
        Opts r;  // ~12 ring refills per CTA
        r.expect_bulk = 1;
        r.parts = {small ? 3000 : 20000};
        r.norm = true;
        run_case(rng, t, 4096, r);
        Opts tiny;  // 5 rows: 5 CTAs
        tiny.expect_bulk = 1;
        tiny.parts = {2, 3};
        tiny.x_misalign = 1;
        tiny.x_pad = 3;
        tiny.y_pad = 2;
        tiny.bias = tiny.residual = true;
        run_case(rng, t, 1024, tiny);
    }
    Opts f;  // Q6_K n_in 256: 2-byte d plane rows, not 16-byte aligned: the register kernels
    f.expect_bulk = 0;
    f.parts = {100};
    run_case(rng, DType::Q6_K, 256, f);
    Opts tok;  // two tokens: the register kernels
    tok.expect_bulk = 0;
    tok.n_tok = 2;
    run_case(rng, DType::Q4_0, 2048, tok);
}

// A chain of dependent bulk-kernel GEMVs (each copies its weights before its PDL wait, while the
// previous one runs) captured in a graph equals the same chain launched eagerly, and the eager chain
// equals the register kernels' chain within the references' tolerance (checked by the plain cases).
TEST(CudaGemv, BulkGraphCapturePdlChain) {
    SKIP_WITHOUT_GPU();
    struct BulkOn {
        BulkOn() { cuda::gemv_set_bulk(1); }
        ~BulkOn() { cuda::gemv_set_bulk(-1); }
    } bulk_on;
    Rng rng;
    for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
        SCOPED_TRACE(dtype_name(t));
        constexpr int64_t n = 2048;
        test::RandomMatrix m = test::random_matrix(rng, t, n, n, true);
        cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(row_bytes(t, n)), n};
        cuda::GpuMatrix gm;
        const char* err = nullptr;
        ASSERT_TRUE(cuda::upload_matrix(t, n, &hr, 1, gm, nullptr, &err)) << err;
        const std::vector<float> x = test::random_vec(rng, n), nw = test::random_vec(rng, n),
                                 y2_0 = test::random_vec(rng, n);
        DeviceBuffer dx = to_device(x), dnw = to_device(nw), dy1(n * sizeof(float)), dy2 = to_device(y2_0);
        cudaStream_t s;
        ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
        auto chain = [&] {
            for (int rep = 0; rep < 3; ++rep) {
                cuda::GemvArgs a;
                a.x = dx.as<float>();
                a.norm_w = dnw.as<float>();
                a.y = dy1.as<float>();
                EXPECT_TRUE(cuda::gemv_bulk_applies(gm, a));
                cuda::gemv(gm, a, s);
                cuda::GemvArgs b;
                b.x = dy1.as<float>();
                b.scale = 0.01f;
                b.residual = dy2.as<float>();
                b.y = dy2.as<float>();
                cuda::gemv(gm, b, s);
                cuda::GemvArgs c;
                c.x = dy2.as<float>();
                c.scale = 0.01f;
                c.y = dy1.as<float>();
                cuda::gemv(gm, c, s);
            }
        };
        ASSERT_EQ(cudaMemcpy(dy2.get(), y2_0.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
        chain();
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        const std::vector<float> eager1 = from_device<float>(dy1, n), eager2 = from_device<float>(dy2, n);
        ASSERT_EQ(cudaMemcpy(dy2.get(), y2_0.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
        cudaGraph_t g;
        cudaGraphExec_t ge;
        ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
        chain();
        ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
        ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        EXPECT_EQ(from_device<float>(dy1, n), eager1);
        EXPECT_EQ(from_device<float>(dy2, n), eager2);
        EXPECT_TRUE(std::all_of(eager1.begin(), eager1.end(), [](float v) { return std::isfinite(v); }));
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
        cudaStreamDestroy(s);
        cuda::free_matrix(gm);
    }
}

// Activations too large for one launch's shared memory run in token groups.
TEST(CudaGemv, TokenGroups) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    Opts o;
    o.n_tok = 8;
    o.parts = {21};
    o.bias = o.residual = true;
    run_case(rng, DType::F32, 20000, o);   // 80 KB per token: groups of 2
    run_case(rng, DType::F16, 14336, o);   // 56 KB per token: groups of 3, 3, 2
    run_case(rng, DType::Q8_0, 40960, o);  // 51 KB per token
    o.norm = true;
    run_case(rng, DType::Q4_K, 40960, o);
}

TEST(CudaGemv, GraphCaptureReplays) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    test::RandomMatrix m = test::random_matrix(rng, DType::Q4_K, 1024, 300, true);
    cuda::HostRows hr{m.bytes.data(), static_cast<size_t>(row_bytes(DType::Q4_K, 1024)), 300};
    cuda::GpuMatrix gm;
    const char* err = nullptr;
    ASSERT_TRUE(cuda::upload_matrix(DType::Q4_K, 1024, &hr, 1, gm, nullptr, &err)) << err;
    const std::vector<float> x = test::random_vec(rng, 1024 * 2), nw = test::random_vec(rng, 1024);
    DeviceBuffer dx = to_device(x), dnw = to_device(nw), dy(300 * 2 * sizeof(float)),
                 dy2(300 * 2 * sizeof(float));
    cuda::GemvArgs a;
    a.x = dx.as<float>();
    a.n_tok = 2;
    a.norm_w = dnw.as<float>();
    a.y = dy.as<float>();
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cuda::gemv(gm, a, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    a.y = dy2.as<float>();
    cudaGraph_t g;
    cudaGraphExec_t ge;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cuda::gemv(gm, a, s);
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(from_device<float>(dy, 600), from_device<float>(dy2, 600));
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    cuda::free_matrix(gm);
}

}  // namespace
}  // namespace pelican
