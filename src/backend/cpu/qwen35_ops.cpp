// The Qwen3.5 hybrid pieces of qwen35_ops.h.
#include "backend/cpu/qwen35_ops.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace pelican::cpu {

void causal_conv1d_silu(const float* x, int64_t n_tok, int64_t n_ch, int kernel, const float* w, float* state,
                        float* y) {
    if (kernel < 1 || kernel > 8) throw std::invalid_argument("causal_conv1d_silu: kernel 1..8");
    if (n_tok <= 0) return;
    const int64_t hist = kernel - 1;
    // Weights transposed to [kernel, n_ch] and the accumulators of one row: per-thread scratch.
    thread_local std::vector<float> wt, acc;
    wt.resize(static_cast<size_t>(kernel * n_ch));
    acc.resize(static_cast<size_t>(n_ch));
    for (int64_t c = 0; c < n_ch; ++c)
        for (int j = 0; j < kernel; ++j) wt[static_cast<size_t>(j * n_ch + c)] = w[c * kernel + j];
    // Row r of xx = concat(state, x).
    const auto xx = [&](int64_t r) { return r < hist ? state + r * n_ch : x + (r - hist) * n_ch; };
    for (int64_t t = 0; t < n_tok; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int j = 0; j < kernel; ++j) {
            const float* src = xx(t + j);
            const float* wj = wt.data() + j * n_ch;
            float* a = acc.data();
            for (int64_t c = 0; c < n_ch; ++c) a[c] += wj[c] * src[c];
        }
        silu(acc.data(), y + t * n_ch, n_ch);
    }
    // New state: rows n_tok .. n_tok + hist - 1 of xx, read before written (source row >= destination).
    for (int64_t r = 0; r < hist; ++r) {
        const float* src = xx(n_tok + r);
        if (src != state + r * n_ch) std::copy(src, src + n_ch, state + r * n_ch);
    }
}

void l2norm(float* x, int64_t n_rows, int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; ++r) {
        float* v = x + r * n;
        scale(v, 1.0f / std::sqrt(sum_squares(v, n) + eps), v, n);
    }
}

void deltanet_gates(const float* a, const float* b, const float* a_log, const float* dt_bias, int64_t n_tok,
                    int n_heads, float* g, float* beta) {
    for (int64_t t = 0; t < n_tok; ++t)
        for (int h = 0; h < n_heads; ++h) {
            const int64_t i = t * n_heads + h;
            beta[i] = 1.0f / (1.0f + std::exp(-b[i]));
            const float s = a[i] + dt_bias[h];
            const float softplus = s > 20.0f ? s : std::log1p(std::exp(s));
            g[i] = -std::exp(a_log[h]) * softplus;
        }
}

void rms_norm_gated(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                    float eps) {
    thread_local std::vector<float> sz;
    sz.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x + r * n;
        const float inv = 1.0f / std::sqrt(sum_squares(xr, n) / static_cast<float>(n) + eps);
        silu(z + r * n, sz.data(), n);
        float* yr = y + r * n;
        const float* s = sz.data();
        for (int64_t i = 0; i < n; ++i) yr[i] = w[i] * (xr[i] * inv) * s[i];
    }
}

}  // namespace pelican::cpu
