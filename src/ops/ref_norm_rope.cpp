// Reference rms_norm and rotary embedding.
#include <cassert>
#include <cmath>

#include "ops/ops.h"

namespace pelican::ref {

void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps,
              NormWeight kind) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + static_cast<double>(eps));
        for (int64_t i = 0; i < n; ++i) {
            double wi = w ? w[i] : (kind == NormWeight::kOnePlus ? 0.0 : 1.0);
            if (kind == NormWeight::kOnePlus) wi += 1.0;
            yr[i] = static_cast<float>(xr[i] * inv * wi);
        }
    }
}

void rope_table(const float* inv_freq, int n_rot, const int64_t* pos, int64_t n_pos, float mscale,
                float* cos_out, float* sin_out) {
    assert(n_rot % 2 == 0);
    const int half = n_rot / 2;
    for (int64_t p = 0; p < n_pos; ++p) {
        for (int i = 0; i < half; ++i) {
            const float angle = static_cast<float>(pos[p]) * inv_freq[i];  // fp32 product, as HF
            cos_out[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)) * mscale);
            sin_out[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)) * mscale);
        }
    }
}

void rope(float* x, int64_t n_tok, int n_head, int head_dim, int64_t tok_stride, int n_rot, const float* cos,
          const float* sin, RopeLayout layout) {
    assert(n_rot % 2 == 0 && n_rot <= head_dim);
    const int half = n_rot / 2;
    for (int64_t t = 0; t < n_tok; ++t) {
        const float* c = cos + t * half;
        const float* s = sin + t * half;
        for (int h = 0; h < n_head; ++h) {
            float* v = x + t * tok_stride + static_cast<int64_t>(h) * head_dim;
            for (int i = 0; i < half; ++i) {
                const int ia = layout == RopeLayout::kInterleaved ? 2 * i : i;
                const int ib = layout == RopeLayout::kInterleaved ? 2 * i + 1 : i + half;
                const double a = v[ia], b = v[ib];
                v[ia] = static_cast<float>(a * c[i] - b * s[i]);
                v[ib] = static_cast<float>(a * s[i] + b * c[i]);
            }
        }
    }
}

}  // namespace pelican::ref
