// Reference gated delta rule (ops/ops_qwen35.h): token by token, and the chunked prefill form.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "ops/ops_qwen35.h"

namespace pelican::ref {

void gated_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g,
                                const float* beta, int64_t n_tok, const DeltaNetShape& s, float* state,
                                float* out) {
    assert(s.n_k_heads > 0 && s.n_v_heads % s.n_k_heads == 0);
    const int dk = s.d_k, dv = s.d_v, nv = s.n_v_heads, nk = s.n_k_heads;
    std::vector<double> S(static_cast<size_t>(dk) * dv), u(static_cast<size_t>(dv));
    for (int h = 0; h < nv; ++h) {
        float* Sh = state + static_cast<int64_t>(h) * dk * dv;  // [dk, dv]
        const int kh = s.key_head(h);
        for (size_t i = 0; i < S.size(); ++i) S[i] = Sh[i];
        for (int64_t t = 0; t < n_tok; ++t) {
            const float* qt = q + (t * nk + kh) * dk;
            const float* kt = k + (t * nk + kh) * dk;
            const float* vt = v + (t * nv + h) * dv;
            const double decay = std::exp(static_cast<double>(g[t * nv + h]));
            const double b = beta[t * nv + h];
            for (double& x : S) x *= decay;
            for (int d = 0; d < dv; ++d) {
                double acc = 0.0;
                for (int a = 0; a < dk; ++a) acc += S[a * dv + d] * kt[a];
                u[d] = b * (vt[d] - acc);  // delta
            }
            for (int a = 0; a < dk; ++a)
                for (int d = 0; d < dv; ++d) S[a * dv + d] += kt[a] * u[d];
            // The state is fp32 between tokens (as a decode step stores it).
            for (double& x : S) x = static_cast<float>(x);
            float* ot = out + (t * nv + h) * dv;
            for (int d = 0; d < dv; ++d) {
                double acc = 0.0;
                for (int a = 0; a < dk; ++a) acc += S[a * dv + d] * qt[a];
                ot[d] = static_cast<float>(acc);
            }
        }
        for (size_t i = 0; i < S.size(); ++i) Sh[i] = static_cast<float>(S[i]);
    }
}

void gated_delta_rule_chunked(const float* q, const float* k, const float* v, const float* g,
                              const float* beta, int64_t n_tok, const DeltaNetShape& s, float* state,
                              float* out, int chunk) {
    assert(s.n_k_heads > 0 && s.n_v_heads % s.n_k_heads == 0 && chunk > 0);
    const int dk = s.d_k, dv = s.d_v, nv = s.n_v_heads, nk = s.n_k_heads;
    const auto C = static_cast<size_t>(chunk);
    std::vector<double> S(static_cast<size_t>(dk) * dv), gam(C), A(C * C), U(C * dv), W(C * dk), Vn(C * dv),
        qk(C);
    for (int h = 0; h < nv; ++h) {
        float* Sh = state + static_cast<int64_t>(h) * dk * dv;
        const int kh = s.key_head(h);
        for (size_t i = 0; i < S.size(); ++i) S[i] = Sh[i];
        for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
            const int L = static_cast<int>(std::min<int64_t>(chunk, n_tok - t0));
            const auto Q = [&](int i) { return q + ((t0 + i) * nk + kh) * dk; };
            const auto K = [&](int i) { return k + ((t0 + i) * nk + kh) * dk; };
            const auto V = [&](int i) { return v + ((t0 + i) * nv + h) * dv; };
            const auto B = [&](int i) { return static_cast<double>(beta[(t0 + i) * nv + h]); };
            const auto dot = [&](const float* x, const float* y) {
                double acc = 0.0;
                for (int a = 0; a < dk; ++a) acc += static_cast<double>(x[a]) * y[a];
                return acc;
            };
            double cum = 0.0;
            for (int i = 0; i < L; ++i) gam[i] = cum += g[(t0 + i) * nv + h];
            // A_ij = beta_i (k_i . k_j) exp(gamma_i - gamma_j), j < i.
            for (int i = 0; i < L; ++i)
                for (int j = 0; j < i; ++j) A[i * C + j] = B(i) * dot(K(i), K(j)) * std::exp(gam[i] - gam[j]);
            // Forward substitution for (I + A) U = beta v and (I + A) W = beta k exp(gamma).
            for (int i = 0; i < L; ++i) {
                for (int d = 0; d < dv; ++d) U[i * dv + d] = B(i) * V(i)[d];
                for (int a = 0; a < dk; ++a) W[i * dk + a] = B(i) * K(i)[a] * std::exp(gam[i]);
                for (int j = 0; j < i; ++j) {
                    const double aij = A[i * C + j];
                    for (int d = 0; d < dv; ++d) U[i * dv + d] -= aij * U[j * dv + d];
                    for (int a = 0; a < dk; ++a) W[i * dk + a] -= aij * W[j * dk + a];
                }
            }
            // v' = U - W S (the deltas of the chunk's tokens).
            for (int i = 0; i < L; ++i)
                for (int d = 0; d < dv; ++d) {
                    double acc = U[i * dv + d];
                    for (int a = 0; a < dk; ++a) acc -= W[i * dk + a] * S[a * dv + d];
                    Vn[i * dv + d] = acc;
                }
            // Outputs: the old state's read plus the intra-chunk part.
            for (int i = 0; i < L; ++i) {
                float* oi = out + ((t0 + i) * nv + h) * dv;
                const double ei = std::exp(gam[i]);
                for (int j = 0; j <= i; ++j) qk[j] = dot(Q(i), K(j)) * std::exp(gam[i] - gam[j]);
                for (int d = 0; d < dv; ++d) {
                    double acc = 0.0;
                    for (int a = 0; a < dk; ++a) acc += static_cast<double>(Q(i)[a]) * S[a * dv + d];
                    acc *= ei;
                    for (int j = 0; j <= i; ++j) acc += qk[j] * Vn[j * dv + d];
                    oi[d] = static_cast<float>(acc);
                }
            }
            // State at the chunk's end, stored in fp32.
            const double eL = std::exp(gam[L - 1]);
            for (int a = 0; a < dk; ++a)
                for (int d = 0; d < dv; ++d) {
                    double acc = eL * S[a * dv + d];
                    for (int j = 0; j < L; ++j)
                        acc += std::exp(gam[L - 1] - gam[j]) * K(j)[a] * Vn[j * dv + d];
                    S[a * dv + d] = static_cast<float>(acc);
                }
        }
        for (size_t i = 0; i < S.size(); ++i) Sh[i] = static_cast<float>(S[i]);
    }
}

}  // namespace pelican::ref
