// Helpers for the ops_* tests: fresh random inputs (seeded from std::random_device; the seed is
// printed so a failure can be replayed with PELICAN_TEST_SEED=<seed>), random weight matrices of
// every matmul type, and the per-output magnitude used by the rounding-error bounds.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/blocks.h"
#include "core/dequantize.h"
#include "core/dtype.h"
#include "core/float_convert.h"
#include "core/tensor.h"

namespace pelican::test {

inline uint32_t fresh_seed() {
    if (const char* env = std::getenv("PELICAN_TEST_SEED"))
        return static_cast<uint32_t>(std::strtoul(env, nullptr, 10));
    return std::random_device{}();
}

// A generator whose seed is printed with every failure of the current scope.
struct Rng {
    uint32_t seed = fresh_seed();
    std::mt19937 gen{seed};
    ::testing::ScopedTrace trace{__FILE__, __LINE__, "PELICAN_TEST_SEED=" + std::to_string(seed)};

    float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen); }
    float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(gen); }
    int64_t index(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(gen); }
    uint8_t byte() { return static_cast<uint8_t>(gen()); }
};

// n values ~ scale * N(0, 1) from a fixed-seed generator (tests whose inputs are part of the case).
inline std::vector<float> randn(size_t n, std::mt19937& gen, float scale = 1.0f) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = scale * nd(gen);
    return v;
}

// Largest |got - want| relative to max |want| (no floor at 1: small outputs are not forgiven).
inline double max_rel_to_largest(const std::vector<float>& got, const std::vector<float>& want) {
    double scale = 0, d = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::abs(static_cast<double>(want[i])));
        d = std::max(d, std::abs(static_cast<double>(got[i]) - want[i]));
    }
    return d / std::max(scale, 1e-30);
}

// n values ~ N(0, 1), with about 1 in 50 scaled by 8 (activation outliers).
inline std::vector<float> random_vec(Rng& rng, int64_t n, float scale = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = rng.normal() * scale * (rng.index(50) == 0 ? 8.0f : 1.0f);
    return v;
}

// A weight matrix [n_out, n_in] of type t with its bytes (GGUF rows, dense).
struct RandomMatrix {
    DType type;
    int64_t n_in, n_out;
    std::vector<uint8_t> bytes;
    Tensor tensor() { return *Tensor::contiguous_view(type, {n_in, n_out}, bytes.data(), "w"); }
};

// Random valid blocks: every byte random, then the fp16 scale fields set to sane values (small
// enough that dot products stay far from overflow, both signs where the format allows).
// quantized = true instead quantizes N(0, 1/sqrt(n_in)) weights with the reference quantizer
// (types that have one), so realistic codes/scales are covered too.
inline RandomMatrix random_matrix(Rng& rng, DType t, int64_t n_in, int64_t n_out, bool quantized) {
    const DTypeInfo& info = dtype_info(t);
    RandomMatrix m{t, n_in, n_out, {}};
    const int64_t row_bytes = static_cast<int64_t>(*dtype_row_bytes(t, static_cast<uint64_t>(n_in)));
    m.bytes.resize(static_cast<size_t>(row_bytes * n_out));
    const float w_scale = 1.0f / std::sqrt(static_cast<float>(n_in));
    if (quantized || info.block_elems == 1) {
        std::vector<float> row;
        for (int64_t o = 0; o < n_out; ++o) {
            row = random_vec(rng, n_in, w_scale);
            EXPECT_TRUE(quantize_row(t, row.data(), m.bytes.data() + o * row_bytes, n_in).ok());
        }
        return m;
    }
    for (auto& b : m.bytes) b = rng.byte();
    const int64_t n_blocks = n_out * n_in / info.block_elems;
    auto set_f16 = [&](uint8_t* p, float v) {
        const uint16_t h = f32_to_f16(v);
        std::memcpy(p, &h, 2);
    };
    for (int64_t b = 0; b < n_blocks; ++b) {
        uint8_t* blk = m.bytes.data() + b * info.block_bytes;
        const float sign = rng.index(2) ? 1.0f : -1.0f;
        switch (t) {
            case DType::Q4_0:
            case DType::Q8_0:  // d at offset 0; |w| ~ d * (codes up to 8 / 127)
                set_f16(blk, sign * rng.uniform(0.5f, 1.5f) * w_scale / (t == DType::Q4_0 ? 4.0f : 64.0f));
                break;
            case DType::Q4_K:
            case DType::Q5_K:  // d, dmin at offsets 0, 2; 6-bit scales/mins up to 63
                set_f16(blk, sign * rng.uniform(0.5f, 1.5f) * w_scale / (t == DType::Q4_K ? 200.0f : 400.0f));
                set_f16(blk + 2, rng.uniform(0.0f, 1.0f) * w_scale / 100.0f);
                break;
            case DType::Q6_K:  // d at offset 208; int8 scales up to 127, codes up to 32
                set_f16(blk + offsetof(BlockQ6_K, d), sign * rng.uniform(0.5f, 1.5f) * w_scale / 2000.0f);
                break;
            default:
                ADD_FAILURE() << "no random-block recipe for " << dtype_name(t);
        }
    }
    return m;
}

// Per output row o: sum_i mag_i(o) * |x_i| where mag bounds every partial product a kernel may
// form for weight i: |w_i| plus the magnitude of the block's zero-point / min term (Q4_0: 8 d,
// Q8_0: 128 d, Q4_K/Q5_K: dmin * m, Q6_K: 32 d * |sc|), since integer kernels multiply the
// unsigned codes and subtract that term separately.
inline std::vector<double> partial_magnitude(const RandomMatrix& m, const float* x) {
    std::vector<double> out(static_cast<size_t>(m.n_out));
    std::vector<float> w(static_cast<size_t>(m.n_in)), zp(static_cast<size_t>(m.n_in), 0.0f);
    const int64_t row_bytes = static_cast<int64_t>(*dtype_row_bytes(m.type, static_cast<uint64_t>(m.n_in)));
    for (int64_t o = 0; o < m.n_out; ++o) {
        const uint8_t* row = m.bytes.data() + o * row_bytes;
        EXPECT_TRUE(dequantize_row(m.type, row, w.data(), m.n_in).ok());
        for (int64_t i = 0; i < m.n_in; ++i) {
            switch (m.type) {
                case DType::Q4_0:
                    zp[i] = 8.0f * std::fabs(f16_to_f32(reinterpret_cast<const BlockQ4_0*>(row)[i / 32].d));
                    break;
                case DType::Q8_0:
                    zp[i] = 128.0f * std::fabs(f16_to_f32(reinterpret_cast<const BlockQ8_0*>(row)[i / 32].d));
                    break;
                case DType::Q4_K:
                case DType::Q5_K: {
                    const uint8_t* blk = row + (i / 256) * dtype_info(m.type).block_bytes;
                    uint16_t dmin;
                    std::memcpy(&dmin, blk + 2, 2);
                    uint8_t sc, mn;
                    ref::unpack_k_scale_min(blk + 4, static_cast<int>(i % 256 / 32), &sc, &mn);
                    zp[i] = std::fabs(f16_to_f32(dmin)) * mn;
                    break;
                }
                case DType::Q6_K: {
                    const auto* blk = reinterpret_cast<const BlockQ6_K*>(row) + i / 256;
                    const int j = static_cast<int>(i % 256);
                    // sub-block of element j (16 elements each, in element order: see blocks.h)
                    const int sub = (j / 128) * 8 + (j % 128) / 32 * 2 + (j % 32) / 16;
                    zp[i] = 32.0f * std::fabs(f16_to_f32(blk->d) * blk->scales[sub]);
                    break;
                }
                default:
                    break;
            }
        }
        double s = 0.0;
        for (int64_t i = 0; i < m.n_in; ++i) s += (std::fabs(w[i]) + zp[i]) * std::fabs(x[i]);
        out[static_cast<size_t>(o)] = s;
    }
    return out;
}

}  // namespace pelican::test
