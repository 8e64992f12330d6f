// Reference softmax, activations and element-wise helpers (double internally).
#include <cmath>
#include <limits>

#include "ops/ops.h"

namespace pelican::ref {

void softmax(float* x, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; ++r) {
        float* v = x + r * n;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n; ++i) mx = v[i] > mx ? v[i] : mx;
        if (mx == -std::numeric_limits<float>::infinity()) {  // empty or all masked
            for (int64_t i = 0; i < n; ++i) v[i] = 0.0f;
            continue;
        }
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(v[i]) - mx);
        for (int64_t i = 0; i < n; ++i)
            v[i] = static_cast<float>(std::exp(static_cast<double>(v[i]) - mx) / sum);
    }
}

void silu(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        y[i] = static_cast<float>(x[i] / (1.0 + std::exp(-static_cast<double>(x[i]))));
}

// 0.5 (1 + tanh z) = 1 / (1 + exp(-2z)) and 0.5 (1 + erf t) = 0.5 erfc(-t): the same functions
// without the cancellation of 1 + tanh / 1 + erf for large negative x (even in double).
void gelu_tanh(const float* x, float* y, int64_t n) {
    const double k = std::sqrt(2.0 / M_PI);
    for (int64_t i = 0; i < n; ++i) {
        const double v = x[i];
        const double z = k * (v + 0.044715 * v * v * v);
        y[i] = static_cast<float>(v / (1.0 + std::exp(-2.0 * z)));
    }
}

void gelu_erf(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const double v = x[i];
        y[i] = static_cast<float>(0.5 * v * std::erfc(-v / std::sqrt(2.0)));
    }
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const double g = gate[i];
        y[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
    }
}

void add(const float* a, const float* b, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void mul(const float* a, const float* b, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void scale(const float* x, float s, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = s * x[i];
}

void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t i = 0; i < n; ++i) y[r * n + i] += bias[i];
}

}  // namespace pelican::ref
