// Helpers shared by the MoE GPU tests (cuda_moe_test: routing and combine; cuda_moe_experts_test: the
// expert GEMVs, grouped experts, the fused combine and a whole MoE block): host copies, bit
// comparison, GpuMatrix uploads of random rows, and the route check against ref::moe_route (see
// cuda_moe_test.cpp's header for its tolerances). Include only in tests built with the CUDA backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_matrix.h"
#include "core/dtype.h"
#include "ops/ops_qwen35.h"
#include "ops_test_util.h"

namespace pelican::test {

inline constexpr double kU = 1.0 / 16777216.0;  // 2^-24

template <typename T>
void copy_to(const cuda::DeviceBuffer& b, const std::vector<T>& v) {
    ASSERT_EQ(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}

inline int64_t row_bytes(DType t, int64_t n_in) {
    return static_cast<int64_t>(*dtype_row_bytes(t, static_cast<uint64_t>(n_in)));
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b, size_t* first) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], 4) != 0) {
            *first = i;
            return false;
        }
    return true;
}

// Uploads rows [row0, row0 + n_rows) of a random matrix as one GpuMatrix.
inline cuda::GpuMatrix upload_rows(const RandomMatrix& m, int64_t row0, int64_t n_rows) {
    const int64_t rb = row_bytes(m.type, m.n_in);
    cuda::HostRows hr{m.bytes.data() + row0 * rb, static_cast<size_t>(rb), n_rows};
    cuda::GpuMatrix gm;
    const char* err = nullptr;
    EXPECT_TRUE(cuda::upload_matrix(m.type, m.n_in, &hr, 1, gm, nullptr, &err)) << err;
    return gm;
}

// p = softmax in double (for the near-tie allowance only).
inline std::vector<double> softmax_d(const float* l, int n) {
    double mx = -INFINITY;
    for (int i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(l[i]));
    std::vector<double> p(static_cast<size_t>(n), 0.0);
    if (mx == -INFINITY) return p;
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += (p[static_cast<size_t>(i)] = std::exp(static_cast<double>(l[i]) - mx));
    for (auto& v : p) v /= s;
    return p;
}

// ids / weights [n_tok, k] from the GPU against ref::moe_route on logits (dense [n_tok, n_expert]).
// exact_ids: the reference ids must come out exactly (gapped logits, ties); else near-ties may swap.
inline void check_route_result(const std::vector<float>& logits, int n_tok, int n_expert, int k,
                               bool renormalize, bool exact_ids, const std::vector<int32_t>& ids,
                               const std::vector<float>& w) {
    const size_t nk = static_cast<size_t>(n_tok) * static_cast<size_t>(k);
    std::vector<int32_t> rid(nk);
    std::vector<float> rw(nk);
    ref::moe_route(logits.data(), n_tok, n_expert, k, renormalize, rid.data(), rw.data());
    int bad = 0;
    for (int t = 0; t < n_tok; ++t) {
        const std::vector<double> p = softmax_d(logits.data() + static_cast<int64_t>(t) * n_expert, n_expert);
        std::vector<int32_t> seen;
        for (int j = 0; j < k; ++j) {
            const size_t i = static_cast<size_t>(t) * k + j;
            const int32_t g = ids[i], r = rid[i];
            ASSERT_TRUE(g >= 0 && g < n_expert) << "token " << t << " choice " << j << ": id " << g;
            EXPECT_EQ(std::count(seen.begin(), seen.end(), g), 0)
                << "token " << t << ": id " << g << " twice";
            seen.push_back(g);
            double tol = 8.0 * kU * std::fabs(rw[i]) + 1e-45;
            if (g != r) {
                const double pg = p[static_cast<size_t>(g)], pr = p[static_cast<size_t>(r)];
                const bool near_tie = std::fabs(pg - pr) <= 1e-6 * std::max(pg, pr);
                if ((exact_ids || !near_tie) && bad++ < 10)
                    ADD_FAILURE() << "token " << t << " choice " << j << ": gpu id " << g << " (p " << pg
                                  << ") ref id " << r << " (p " << pr << ")";
                tol = 2e-6 * std::fabs(rw[i]) + 1e-45;
            }
            if (!(std::fabs(static_cast<double>(w[i]) - rw[i]) <= tol) && bad++ < 10)
                ADD_FAILURE() << "token " << t << " choice " << j << " (id " << g << "): gpu weight " << w[i]
                              << " ref " << rw[i] << " tol " << tol;
        }
    }
    EXPECT_EQ(bad, 0);
}

}  // namespace pelican::test
