// The per-head delta-rule kernels of deltanet_cpu.h, written once in plain C++ with every inner loop over
// contiguous columns (so the compiler vectorises them) and included by deltanet.cpp (portable build) and
// deltanet_avx512.cpp (AVX-512 build). Internal linkage: each including file gets its own copy; no
// standard-library templates or inline functions (their one shared copy could come from either build),
// only builtins.
#pragma once

#include <cstdint>

#include "backend/cpu/deltanet_head.h"

namespace pelican::cpu::detail {
namespace {

// Per token: S <- S exp(g);  u = S^T k;  d = beta (v - u);  S <- S + k d^T;  out = S^T q.
// Two passes over S per token (the decay folded into the first, which reads S_in for the first token).
void dn_recurrent_head(const DnHead& h) {
    const int dk = h.dk, dv = h.dv;
    float u[512];  // d_v <= 512 (checked by the caller)
    float* S = h.S;
    for (int64_t t = 0; t < h.n_tok; ++t) {
        const float* S_src = t == 0 && h.S_in ? h.S_in : S;
        const float* q = h.q + t * h.qk_stride;
        const float* k = h.k + t * h.qk_stride;
        const float* v = h.v + t * h.v_stride;
        const float decay = __builtin_expf(h.g[t * h.gb_stride]);
        const float b = h.beta[t * h.gb_stride];
        for (int d = 0; d < dv; ++d) u[d] = 0.0f;
        for (int a = 0; a < dk; ++a) {
            float* Sa = S + static_cast<int64_t>(a) * dv;
            const float* Si = S_src + static_cast<int64_t>(a) * dv;
            const float ka = k[a];
            for (int d = 0; d < dv; ++d) {
                Sa[d] = Si[d] * decay;
                u[d] += ka * Sa[d];
            }
        }
        for (int d = 0; d < dv; ++d) u[d] = b * (v[d] - u[d]);
        float* o = h.out + t * h.out_stride;
        for (int d = 0; d < dv; ++d) o[d] = 0.0f;
        for (int a = 0; a < dk; ++a) {
            float* Sa = S + static_cast<int64_t>(a) * dv;
            const float ka = k[a], qa = q[a];
            for (int d = 0; d < dv; ++d) {
                Sa[d] += ka * u[d];
                o[d] += qa * Sa[d];
            }
        }
    }
}

// Chunks of kDnChunk tokens (ref::gated_delta_rule_chunked's algebra), gamma = cumsum(g) in double and
// every exp of a gamma difference taken once per (i, j) pair, in float.
void dn_chunked_head(const DnHead& h, float* scratch) {
    const int dk = h.dk, dv = h.dv;
    constexpr int C = kDnChunk;
    float* kt = scratch;      // [dk, C] the chunk's keys, transposed
    float* A = kt + C * dk;   // [C, C] beta_i (k_i . k_j) exp(gamma_i - gamma_j), j < i
    float* QK = A + C * C;    // [C, C] (q_i . k_j) exp(gamma_i - gamma_j), j <= i
    float* U = QK + C * C;    // [C, dv]
    float* Vn = U + C * dv;   // [C, dv] the chunk's deltas v'
    float* W = Vn + C * dv;   // [C, dk]
    float* row = W + C * dk;  // [max(C, dv)] one row's partial sums
    double gam[C];
    float eg[C], edl[C];  // exp(gamma_i), exp(gamma_last - gamma_i)
    float* S = h.S;
    for (int64_t t0 = 0; t0 < h.n_tok; t0 += C) {
        const int L = static_cast<int>(h.n_tok - t0 < C ? h.n_tok - t0 : C);
        const auto Q = [&](int i) { return h.q + (t0 + i) * h.qk_stride; };
        const auto K = [&](int i) { return h.k + (t0 + i) * h.qk_stride; };
        const auto V = [&](int i) { return h.v + (t0 + i) * h.v_stride; };
        const auto B = [&](int i) { return h.beta[(t0 + i) * h.gb_stride]; };
        double cum = 0.0;
        for (int i = 0; i < L; ++i) gam[i] = cum += h.g[(t0 + i) * h.gb_stride];
        for (int i = 0; i < L; ++i) {
            eg[i] = static_cast<float>(__builtin_exp(gam[i]));
            edl[i] = static_cast<float>(__builtin_exp(gam[L - 1] - gam[i]));
        }
        for (int i = 0; i < L; ++i)
            for (int a = 0; a < dk; ++a) kt[a * C + i] = K(i)[a];
        // Rows of k_i . k_j and q_i . k_j over every j at once (axpy over the transposed keys).
        for (int i = 0; i < L; ++i) {
            float* kk = A + i * C;
            float* qk = QK + i * C;
            for (int j = 0; j < L; ++j) kk[j] = qk[j] = 0.0f;
            const float* ki = K(i);
            const float* qi = Q(i);
            for (int a = 0; a < dk; ++a) {
                const float* kta = kt + a * C;
                const float x = ki[a], y = qi[a];
                for (int j = 0; j < L; ++j) {
                    kk[j] += x * kta[j];
                    qk[j] += y * kta[j];
                }
            }
            const float bi = B(i);
            for (int j = 0; j < i; ++j) kk[j] *= bi * static_cast<float>(__builtin_exp(gam[i] - gam[j]));
            for (int j = 0; j <= i; ++j) qk[j] *= static_cast<float>(__builtin_exp(gam[i] - gam[j]));
        }
        // Forward substitution: (I + A) U = beta v, (I + A) W = beta k exp(gamma).
        for (int i = 0; i < L; ++i) {
            float* Ui = U + i * dv;
            float* Wi = W + i * dk;
            const float bi = B(i), be = bi * eg[i];
            const float* vi = V(i);
            const float* ki = K(i);
            for (int d = 0; d < dv; ++d) Ui[d] = bi * vi[d];
            for (int a = 0; a < dk; ++a) Wi[a] = be * ki[a];
            for (int j = 0; j < i; ++j) {
                const float aij = A[i * C + j];
                const float* Uj = U + j * dv;
                const float* Wj = W + j * dk;
                for (int d = 0; d < dv; ++d) Ui[d] -= aij * Uj[d];
                for (int a = 0; a < dk; ++a) Wi[a] -= aij * Wj[a];
            }
        }
        // v' = U - W S; out_i = exp(gamma_i) q_i^T S + sum_{j <= i} QK_ij v'_j (S: the chunk's old state).
        for (int i = 0; i < L; ++i) {
            float* vn = Vn + i * dv;
            for (int d = 0; d < dv; ++d) {
                vn[d] = U[i * dv + d];
                row[d] = 0.0f;
            }
            const float* Wi = W + i * dk;
            const float* qi = Q(i);
            for (int a = 0; a < dk; ++a) {
                const float* Sa = S + static_cast<int64_t>(a) * dv;
                const float w = Wi[a], x = qi[a];
                for (int d = 0; d < dv; ++d) {
                    vn[d] -= w * Sa[d];
                    row[d] += x * Sa[d];
                }
            }
            float* o = h.out + (t0 + i) * h.out_stride;
            const float ei = eg[i];
            for (int d = 0; d < dv; ++d) o[d] = ei * row[d];
            for (int j = 0; j <= i; ++j) {
                const float c = QK[i * C + j];
                const float* vj = Vn + j * dv;
                for (int d = 0; d < dv; ++d) o[d] += c * vj[d];
            }
        }
        // S <- exp(gamma_last) S + sum_j exp(gamma_last - gamma_j) k_j v'_j^T.
        const float eL = eg[L - 1];
        for (int a = 0; a < dk; ++a) {
            float* Sa = S + static_cast<int64_t>(a) * dv;
            for (int d = 0; d < dv; ++d) Sa[d] *= eL;
            const float* kta = kt + a * C;
            for (int j = 0; j < L; ++j) {
                const float c = edl[j] * kta[j];
                const float* vj = Vn + j * dv;
                for (int d = 0; d < dv; ++d) Sa[d] += c * vj[d];
            }
        }
    }
}

}  // namespace
}  // namespace pelican::cpu::detail
