// Shared by the GEMV tests (cuda_gemv_test.cpp: the register-streaming kernels and their variants): one call
// of cuda::gemv against the scalar references on fresh random inputs (run_case), and a chain of calls
// replayed from a CUDA graph against the same chain launched eagerly. Include only in tests built with the
// CUDA backend.
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
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_matrix.h"
#include "ops/act_quant.h"
#include "ops/ops.h"
#include "cuda_test_buffers.h"
#include "cuda_test_util.h"
#include "ops_test_util.h"

namespace pelican::test::gemv {

using cuda::DeviceBuffer;
using test::from_device;
using test::Rng;
using test::to_device;

inline constexpr double kU = 1.0 / 16777216.0;  // 2^-24

inline bool is_quant(DType t) {
    return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q6_K;
}

inline int64_t row_bytes(DType t, int64_t n_in) {
    return static_cast<int64_t>(*dtype_row_bytes(t, static_cast<uint64_t>(n_in)));
}

// x rounded the way the kernels do: int8 32-blocks (act_quant.h), dequantized.
inline std::vector<float> round_acts32(const std::vector<float>& x, int64_t n_in, int n_tok) {
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
inline std::vector<double> rounding_sigma(const test::RandomMatrix& m, const float* x) {
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
    int variant = -1;  // forced kernel variant (cuda::gemv_force_variant); -1: the normal choice
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

inline void run_case(Rng& rng, DType t, int64_t n_in, const Opts& o) {
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

// chain() launched eagerly on s after reset(), then captured once into a graph and replayed after
// reset() again: every buffer of outs (device, n floats) must hold the same bits both times. The eager
// results go to *eager when it is given.
inline void expect_graph_matches_eager(cudaStream_t s, const std::function<void()>& reset,
                                       const std::function<void()>& chain,
                                       const std::vector<std::pair<const DeviceBuffer*, int64_t>>& outs,
                                       const std::string& what,
                                       std::vector<std::vector<float>>* eager = nullptr) {
    reset();
    chain();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << what;
    std::vector<std::vector<float>> first;
    for (const auto& [b, n] : outs) first.push_back(from_device<float>(*b, n));
    reset();
    cudaGraph_t g;
    cudaGraphExec_t ge;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    chain();
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess) << what;
    for (size_t i = 0; i < outs.size(); ++i)
        EXPECT_EQ(from_device<float>(*outs[i].first, outs[i].second), first[i]) << what << ": output " << i;
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    if (eager) *eager = std::move(first);
}

}  // namespace pelican::test::gemv
