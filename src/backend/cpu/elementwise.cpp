// Fast rms_norm, softmax, activations and element-wise helpers: AVX-512 kernels
// (elementwise_avx512.cpp) for the exp-heavy and reduction ops when active, else plain fp32 C++
// the compiler vectorises (-O3). The formulas are rearranged only where that removes a cancellation:
//   gelu_tanh(x) = x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3)   (= 0.5 x (1 + tanh z))
//   gelu_erf(x)  = 0.5 x erfc(-x / sqrt(2))                               (= 0.5 x (1 + erf(x/sqrt 2)))
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/elementwise_kernels.h"

namespace pelican::cpu {
namespace {

// Sum of squares with 8 independent fp32 partial sums (vectorisable, shorter error paths).
float sum_squares(const float* x, int64_t n) {
    float part[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) part[k] += x[i + k] * x[i + k];
    for (; i < n; ++i) part[0] += x[i] * x[i];
    float s = 0.0f;
    for (float p : part) s += p;
    return s;
}

bool use_avx512() { return active_isa() == Isa::kAvx512; }

void rms_norm_rows(const float* x, const float* w, float* y, int64_t r0, int64_t r1, int64_t n, float eps,
                   NormWeight kind) {
    if (use_avx512()) {
        for (int64_t r = r0; r < r1; ++r)
            detail::rms_norm_row_avx512(x + r * n, w, y + r * n, n, eps, kind == NormWeight::kOnePlus);
        return;
    }
    for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        const float inv = 1.0f / std::sqrt(sum_squares(xr, n) / static_cast<float>(n) + eps);
        if (!w) {
            for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv;  // w' = 1 for both kinds
        } else if (kind == NormWeight::kOnePlus) {
            for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * (1.0f + w[i]);
        } else {
            for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * w[i];
        }
    }
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps, NormWeight kind,
              ThreadPool* pool) {
    if (pool && n_rows > 1 && pool->size() > 1) {
        const int64_t chunk = (n_rows + pool->size() * 4 - 1) / (pool->size() * 4);
        pool->parallel_for((n_rows + chunk - 1) / chunk, [&](int64_t c, int) {
            rms_norm_rows(x, w, y, c * chunk, std::min(n_rows, (c + 1) * chunk), n, eps, kind);
        });
        return;
    }
    rms_norm_rows(x, w, y, 0, n_rows, n, eps, kind);
}

void softmax(float* x, int64_t n_rows, int64_t n) {
    if (use_avx512()) {
        for (int64_t r = 0; r < n_rows; ++r) detail::softmax_row_avx512(x + r * n, n);
        return;
    }
    for (int64_t r = 0; r < n_rows; ++r) {
        float* v = x + r * n;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n; ++i) mx = v[i] > mx ? v[i] : mx;
        if (mx == -std::numeric_limits<float>::infinity()) {
            for (int64_t i = 0; i < n; ++i) v[i] = 0.0f;
            continue;
        }
        float part[8] = {};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int k = 0; k < 8; ++k) {
                v[i + k] = std::exp(v[i + k] - mx);
                part[k] += v[i + k];
            }
        for (; i < n; ++i) {
            v[i] = std::exp(v[i] - mx);
            part[0] += v[i];
        }
        float sum = 0.0f;
        for (float p : part) sum += p;
        const float inv = 1.0f / sum;
        for (i = 0; i < n; ++i) v[i] *= inv;
    }
}

void silu(const float* x, float* y, int64_t n) {
    if (use_avx512()) return detail::silu_avx512(x, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void gelu_tanh(const float* x, float* y, int64_t n) {
    if (use_avx512()) return detail::gelu_tanh_avx512(x, y, n);
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        const float z = k * (v + 0.044715f * v * v * v);
        y[i] = v / (1.0f + std::exp(-2.0f * z));
    }
}

void gelu_erf(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * std::erfc(-x[i] * 0.70710678118654752f);
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
    if (use_avx512()) return detail::swiglu_avx512(gate, up, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void sigmoid_mul(float* x, const float* gate, int64_t n) {
    if (use_avx512()) return detail::sigmoid_mul_avx512(x, gate, n);
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-gate[i]));
}

float sum_squares(const float* x, int64_t n) {
    if (use_avx512()) return detail::sum_squares_avx512(x, n);
    float part[16] = {};  // 16 partial sums: the loop vectorises without reassociating one sum
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; ++j) part[j] += x[i + j] * x[i + j];
    for (; i < n; ++i) part[0] += x[i] * x[i];
    float s = 0.0f;
    for (float p : part) s += p;
    return s;
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

void rope_table(const float* inv_freq, int n_rot, const int64_t* pos, int64_t n_pos, float mscale,
                float* cos_out, float* sin_out) {
    ref::rope_table(inv_freq, n_rot, pos, n_pos, mscale, cos_out, sin_out);  // once per step: not hot
}

void rope(float* x, int64_t n_tok, int n_head, int head_dim, int64_t tok_stride, int n_rot, const float* cos,
          const float* sin, RopeLayout layout) {
    const int half = n_rot / 2;
    for (int64_t t = 0; t < n_tok; ++t) {
        const float* c = cos + t * half;
        const float* s = sin + t * half;
        for (int h = 0; h < n_head; ++h) {
            float* v = x + t * tok_stride + static_cast<int64_t>(h) * head_dim;
            if (layout == RopeLayout::kNeox) {
                float* va = v;
                float* vb = v + half;
                for (int i = 0; i < half; ++i) {
                    const float a = va[i], b = vb[i];
                    va[i] = a * c[i] - b * s[i];
                    vb[i] = a * s[i] + b * c[i];
                }
            } else {
                for (int i = 0; i < half; ++i) {
                    const float a = v[2 * i], b = v[2 * i + 1];
                    v[2 * i] = a * c[i] - b * s[i];
                    v[2 * i + 1] = a * s[i] + b * c[i];
                }
            }
        }
    }
}

}  // namespace pelican::cpu
