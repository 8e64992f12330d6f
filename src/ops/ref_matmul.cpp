// Reference matmul: dequantize each weight row, sum products in double.
#include <cassert>
#include <vector>

#include "core/dequantize.h"
#include "ops/act_quant.h"
#include "ops/ops.h"

namespace pelican::ref {
namespace {

// y [n_tok, n_out] from fp32 activations xa [n_tok, n_in] (already rounded or not).
void matmul_fp32_acts(const Tensor& w, const float* xa, int64_t n_tok, float* y) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1];
    assert(w.ne[2] == 1 && w.ne[3] == 1);
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t o = 0; o < n_out; ++o) {
        const Status st = dequantize_row(w.dtype, w.row_ptr(o), row.data(), n_in);
        assert(st.ok());
        (void)st;
        for (int64_t t = 0; t < n_tok; ++t) {
            const float* x = xa + t * n_in;
            double acc = 0.0;
            for (int64_t i = 0; i < n_in; ++i) acc += static_cast<double>(row[i]) * x[i];
            y[t * n_out + o] = static_cast<float>(acc);
        }
    }
}

}  // namespace

void matmul(const Tensor& w, const float* x, int64_t n_tok, float* y) { matmul_fp32_acts(w, x, n_tok, y); }

void matmul_act_rounded(const Tensor& w, const float* x, int64_t n_tok, float* y) {
    const int block = act_quant_block(w.dtype);
    if (block == 0) {
        matmul_fp32_acts(w, x, n_tok, y);
        return;
    }
    const int64_t n = w.ne[0];
    std::vector<int8_t> qs(static_cast<size_t>(n * n_tok));
    std::vector<float> d(static_cast<size_t>(n / block * n_tok)), s(static_cast<size_t>(n / 32 * n_tok));
    std::vector<int16_t> bsum(static_cast<size_t>(n / 16 * n_tok));
    std::vector<float> xr(static_cast<size_t>(n * n_tok));
    ActQ8 a{qs.data(),
            d.data(),
            block == kActBlock32 ? s.data() : nullptr,
            block == kActBlock256 ? bsum.data() : nullptr,
            n,
            block};
    for (int64_t t = 0; t < n_tok; ++t) {
        if (block == kActBlock32) {
            quantize_act_q32(x + t * n, n, a.qs + t * n, a.d + t * (n / block), a.s + t * (n / 32));
        } else {
            quantize_act_q256(x + t * n, n, a.qs + t * n, a.d + t * (n / block), a.bsum + t * (n / 16));
        }
        dequantize_act(a, t, xr.data() + t * n);
    }
    matmul_fp32_acts(w, xr.data(), n_tok, y);
}

}  // namespace pelican::ref
