// Reference conv / norm / gate pieces of the Qwen3.5 hybrid blocks (ops/ops_qwen35.h).
#include <cassert>
#include <cmath>
#include <cstring>

#include "ops/ops_qwen35.h"

namespace pelican::ref {
namespace {

double silu_d(double x) { return x / (1.0 + std::exp(-x)); }
double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// log(1 + exp(x)) without overflow (torch's softplus uses x itself above 20; the difference there is
// below fp32 resolution).
double softplus_d(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

}  // namespace

void causal_conv1d_silu(const float* x, int64_t n_tok, int64_t n_ch, int kernel, const float* w, float* state,
                        float* y) {
    assert(kernel >= 1 && n_tok >= 0 && x != y);
    const int64_t hist = kernel - 1;
    // xx(r, c) for r in [0, hist + n_tok): state rows first, then x.
    const auto xx = [&](int64_t r, int64_t c) -> double {
        return r < hist ? state[r * n_ch + c] : x[(r - hist) * n_ch + c];
    };
    for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t c = 0; c < n_ch; ++c) {
            double acc = 0.0;
            for (int j = 0; j < kernel; ++j) acc += static_cast<double>(w[c * kernel + j]) * xx(t + j, c);
            y[t * n_ch + c] = static_cast<float>(silu_d(acc));
        }
    // New state: the last `hist` rows of xx (rows n_tok .. n_tok + hist - 1). Rows are read before
    // being overwritten because the source index is never below the destination index.
    for (int64_t r = 0; r < hist; ++r)
        for (int64_t c = 0; c < n_ch; ++c) state[r * n_ch + c] = static_cast<float>(xx(n_tok + r, c));
}

void l2norm(float* x, int64_t n_rows, int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; ++r) {
        float* v = x + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(v[i]) * v[i];
        const double inv = 1.0 / std::sqrt(ss + eps);
        for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] * inv);
    }
}

void deltanet_gates(const float* a, const float* b, const float* a_log, const float* dt_bias, int64_t n_tok,
                    int n_heads, float* g, float* beta) {
    for (int64_t t = 0; t < n_tok; ++t)
        for (int h = 0; h < n_heads; ++h) {
            const int64_t i = t * n_heads + h;
            beta[i] = static_cast<float>(sigmoid_d(b[i]));
            g[i] = static_cast<float>(-std::exp(static_cast<double>(a_log[h])) *
                                      softplus_d(static_cast<double>(a[i]) + dt_bias[h]));
        }
}

void rms_norm_gated(const float* x, const float* z, const float* w, float* y, int64_t n_rows, int64_t n,
                    float eps) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x + r * n;
        const float* zr = z + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
        for (int64_t i = 0; i < n; ++i)
            y[r * n + i] = static_cast<float>(w[i] * (xr[i] * inv) * silu_d(zr[i]));
    }
}

void sigmoid_gate_mul(float* x, const float* gate, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] * sigmoid_d(gate[i]));
}

void split_query_gate(const float* qg, int64_t n_tok, int n_head, int head_dim, float* q, float* gate) {
    const size_t row = static_cast<size_t>(head_dim) * sizeof(float);
    for (int64_t t = 0; t < n_tok; ++t)
        for (int h = 0; h < n_head; ++h) {
            const float* src = qg + (t * n_head + h) * 2 * int64_t{head_dim};
            std::memcpy(q + (t * n_head + h) * head_dim, src, row);
            std::memcpy(gate + (t * n_head + h) * head_dim, src + head_dim, row);
        }
}

}  // namespace pelican::ref
