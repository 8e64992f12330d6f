// The Qwen3.5 hybrid pieces of qwen35_ops.h.
#include "backend/cpu/qwen35_ops.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace pelican::cpu {

namespace {

// y rows of the conv before the SiLU: acc[c] = sum_j w[c, j] * xx(t + j, c), j ascending. K a constant, so
// the channel loop vectorises over w's interleaved rows without a transposed copy.
template <int K>
void conv_rows(const float* x, int64_t n_tok, int64_t n_ch, const float* w, const float* state, float* y) {
    constexpr int64_t H = K - 1;
    const auto xx = [&](int64_t r) { return r < H ? state + r * n_ch : x + (r - H) * n_ch; };
    for (int64_t t = 0; t < n_tok; ++t) {
        const float* src[K];
        for (int j = 0; j < K; ++j) src[j] = xx(t + j);
        float* yt = y + t * n_ch;
        for (int64_t c = 0; c < n_ch; ++c) {
            float a = 0.0f;
            for (int j = 0; j < K; ++j) a += w[c * K + j] * src[j][c];
            yt[c] = a;
        }
    }
}

}  // namespace

void causal_conv1d_silu(const float* x, int64_t n_tok, int64_t n_ch, int kernel, const float* w, float* state,
                        float* y) {
    if (kernel < 1 || kernel > 8) throw std::invalid_argument("causal_conv1d_silu: kernel 1..8");
    if (n_tok <= 0) return;
    switch (kernel) {
        case 1:
            conv_rows<1>(x, n_tok, n_ch, w, state, y);
            break;
        case 2:
            conv_rows<2>(x, n_tok, n_ch, w, state, y);
            break;
        case 3:
            conv_rows<3>(x, n_tok, n_ch, w, state, y);
            break;
        case 4:
            conv_rows<4>(x, n_tok, n_ch, w, state, y);
            break;
        case 5:
            conv_rows<5>(x, n_tok, n_ch, w, state, y);
            break;
        case 6:
            conv_rows<6>(x, n_tok, n_ch, w, state, y);
            break;
        case 7:
            conv_rows<7>(x, n_tok, n_ch, w, state, y);
            break;
        default:
            conv_rows<8>(x, n_tok, n_ch, w, state, y);
            break;
    }
    silu(y, y, n_tok * n_ch);
    // New state: rows n_tok .. n_tok + hist - 1 of xx = concat(state, x), read before written (source row >=
    // destination).
    const int64_t hist = kernel - 1;
    for (int64_t r = 0; r < hist; ++r) {
        const int64_t sr = n_tok + r;
        const float* src = sr < hist ? state + sr * n_ch : x + (sr - hist) * n_ch;
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
