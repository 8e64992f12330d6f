// Reference MoE router and expert evaluation (ops/ops_qwen35.h).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/ops.h"
#include "ops/ops_qwen35.h"

namespace pelican::ref {

void moe_route(const float* logits, int64_t n_tok, int n_expert, int k, bool renormalize, int32_t* ids,
               float* weights) {
    assert(k >= 1 && k <= n_expert);
    std::vector<float> p(static_cast<size_t>(n_expert));
    std::vector<int32_t> order(static_cast<size_t>(n_expert));
    for (int64_t t = 0; t < n_tok; ++t) {
        const float* l = logits + t * n_expert;
        std::copy(l, l + n_expert, p.begin());
        softmax(p.data(), 1, n_expert);  // double sums, fp32 result
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
            return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] ||
                   (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
        });
        double sum = 0.0;
        for (int j = 0; j < k; ++j) sum += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
        for (int j = 0; j < k; ++j) {
            const int32_t e = order[static_cast<size_t>(j)];
            ids[t * k + j] = e;
            const double w = p[static_cast<size_t>(e)];
            weights[t * k + j] = static_cast<float>(renormalize && sum > 0 ? w / sum : w);
        }
    }
}

void moe_experts(const float* x, int64_t n_tok, int64_t n_embd, std::span<const ExpertTensors> experts,
                 const int32_t* ids, const float* weights, int k, float* y) {
    std::vector<double> acc(static_cast<size_t>(n_embd));
    std::vector<float> gate, up, down(static_cast<size_t>(n_embd));
    for (int64_t t = 0; t < n_tok; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j < k; ++j) {
            const int32_t e = ids[t * k + j];
            assert(e >= 0 && static_cast<size_t>(e) < experts.size());
            const ExpertTensors& E = experts[static_cast<size_t>(e)];
            const int64_t n_ff = E.gate.ne[1];
            gate.resize(static_cast<size_t>(n_ff));
            up.resize(static_cast<size_t>(n_ff));
            matmul(E.gate, x + t * n_embd, 1, gate.data());
            matmul(E.up, x + t * n_embd, 1, up.data());
            swiglu(gate.data(), up.data(), gate.data(), n_ff);
            matmul(E.down, gate.data(), 1, down.data());
            for (int64_t i = 0; i < n_embd; ++i)
                acc[static_cast<size_t>(i)] +=
                    static_cast<double>(weights[t * k + j]) * down[static_cast<size_t>(i)];
        }
        for (int64_t i = 0; i < n_embd; ++i)
            y[t * n_embd + i] = static_cast<float>(acc[static_cast<size_t>(i)]);
    }
}

}  // namespace pelican::ref
