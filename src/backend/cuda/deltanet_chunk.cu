// The chunked (WY) form of the Gated DeltaNet step for prompts (deltanet.h: deltanet_chunked).
// Same function as deltanet_step, organised as ref::gated_delta_rule_chunked with chunks of kC = 64
// tokens, in three launches:
//
//   prep  grid (chunks, value heads): per chunk c and head h, with gamma = inclusive cumsum of g
//         inside the chunk, L2-normed k, beta = sigmoid(b):
//           A_ij = beta_i (k_i . k_j) exp(gamma_i - gamma_j) (j < i);   (I + A) U = beta v;
//           (I + A) W = beta k exp(gamma)   (forward substitution, one thread per column);
//           kd_t = k_t exp(gamma_last - gamma_t).   Writes U, W, kd, gamma to the scratch.
//   state grid (value heads, column blocks of the state): sequential over the chunks; per chunk
//         stores the state S_c at its start (hs), then v' = U - W S_c (in place of U) and
//         S <- exp(gamma_last) S + kd^T v'. The column blocks are independent (the update is linear
//         in each column). Writes the final state to args.state.
//   out   grid (chunks, value heads): o_i = exp(gamma_i) q_i^T S_c + sum_{t <= i} (q_i . k_t)
//         exp(gamma_i - gamma_t) v'_t, then the gated RMSNorm as deltanet_step.
//
// fp32 throughout (the reference sums in double). Not for --use_fast_math (accurate expf / log1pf).
// PDL (pdl.cuh): every kernel reads only weights before pdl_wait() and triggers at its end (implicit).
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/deltanet_impl.cuh"
#include "backend/cuda/pdl.cuh"

namespace pelican::cuda {
namespace {

constexpr int kC = 64;         // tokens per chunk
constexpr int kThreads = 256;  // threads of every CTA below
constexpr int kWarps = kThreads / 32;
constexpr int kLA = kC + 1;  // row stride of the [kC, kC] matrices in shared memory (padded)

// Scratch layout (floats), for n_tok tokens, nv value heads of width D, nc chunks.
struct Scratch {
    float* u;    // [n_tok, nv, D]: U, then v' (the chunk's deltas)
    float* w;    // [n_tok, nv, D]: W
    float* kd;   // [n_tok, nv, D]: k_t exp(gamma_last - gamma_t)
    float* gam;  // [n_tok, nv]: gamma (cumsum of g inside the chunk)
    float* hs;   // [nc, nv, D, D]: the state at each chunk's start
};

size_t scratch_floats(int64_t n_tok, int64_t nv, int64_t d) {
    const int64_t nc = (n_tok + kC - 1) / kC;
    return static_cast<size_t>(3 * n_tok * nv * d + n_tok * nv + nc * nv * d * d);
}

Scratch carve(void* base, int64_t n_tok, int64_t nv, int64_t d) {
    auto* f = static_cast<float*>(base);
    Scratch s;
    const int64_t rows = n_tok * nv * d;
    s.u = f;
    s.w = f + rows;
    s.kd = f + 2 * rows;
    s.gam = f + 3 * rows;
    s.hs = s.gam + n_tok * nv;
    return s;
}

// Strides and columns of one (value head, token range) as deltanet_step reads them.
struct Cols {
    int kh;
    int64_t key_dim, value_dim, conv_stride, a_stride, b_stride, z_stride, out_stride;
};

__device__ __forceinline__ Cols cols_of(const DeltaNetStepArgs& p, int h, int D) {
    Cols c;
    c.kh = p.v_tiled ? h % p.n_k_heads : h / (p.n_v_heads / p.n_k_heads);
    c.key_dim = int64_t{p.n_k_heads} * D;
    c.value_dim = int64_t{p.n_v_heads} * D;
    c.conv_stride = p.conv_stride ? p.conv_stride : 2 * c.key_dim + c.value_dim;
    c.a_stride = p.a_stride ? p.a_stride : p.n_v_heads;
    c.b_stride = p.b_stride ? p.b_stride : p.n_v_heads;
    c.z_stride = p.z_stride ? p.z_stride : c.value_dim;
    c.out_stride = p.out_stride ? p.out_stride : c.value_dim;
    return c;
}

// Rows [t0, t0 + L) of conv_out's columns [col, col + D) into dst [L, ld] (one warp per row),
// L2-normed when norm (times scale).
template <int D>
__device__ void load_rows(const DeltaNetStepArgs& p, const Cols& c, int t0, int L, int64_t col, float* dst,
                          int ld, bool norm, float scale) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = warp; i < L; i += kWarps) {
        const float* row = p.conv_out + (t0 + i) * c.conv_stride + col;
        float ss = 0.0f;
        for (int a = lane; a < D; a += 32) {
            const float x = row[a];
            dst[i * ld + a] = x;
            ss += x * x;
        }
        if (norm) {
            const float inv = dn::l2_inv(dn::warp_sum(ss)) * scale;
            for (int a = lane; a < D; a += 32) dst[i * ld + a] *= inv;  // this lane's own elements
        }
    }
}

// P[i][j] = f_i (x_i . y_j) exp(gam_i - gam_j) for j < i (or j <= i with diag), else 0; i, j < kC;
// rows >= L are zero. x [kC, ldx] is read as a broadcast (one i per warp), y [kC, ldy] per lane (ldy
// odd: distinct banks); f null = 1.
template <int D>
__device__ void decayed_dots(const float* x, int ldx, const float* y, int ldy, const float* f,
                             const float* gam, int L, bool diag, float* P) {
    for (int idx = threadIdx.x; idx < kC * kC; idx += kThreads) {
        const int i = idx / kC, j = idx % kC;
        float acc = 0.0f;
        if (i < L && (j < i || (diag && j == i))) {
#pragma unroll 8
            for (int a = 0; a < D; ++a) acc = fmaf(x[i * ldx + a], y[j * ldy + a], acc);
            acc *= expf(gam[i] - gam[j]);
            if (f) acc *= f[i];
        }
        P[i * kLA + j] = acc;
    }
}

// ---- prep ---------------------------------------------------------------------------------------

template <int D>
struct PrepCfg {
    static constexpr int LD = D + 1;  // padded row stride of K and V in shared memory
    static constexpr size_t smem = (2 * size_t{kC} * LD + size_t{kC} * kLA + 2 * kC) * sizeof(float);
};

template <int D>
__global__ void __launch_bounds__(kThreads) dn_prep_kernel(const DeltaNetStepArgs p, Scratch sc) {
    constexpr int LD = PrepCfg<D>::LD;
    extern __shared__ float smem[];
    float* Ks = smem;           // [kC, LD]: k (normed), then beta k exp(gamma), then W
    float* Vs = Ks + kC * LD;   // [kC, LD]: v, then beta v, then U
    float* A = Vs + kC * LD;    // [kC, kLA]
    float* gam = A + kC * kLA;  // [kC]
    float* bet = gam + kC;      // [kC]
    const int tid = static_cast<int>(threadIdx.x);
    const int h = static_cast<int>(blockIdx.y), t0 = static_cast<int>(blockIdx.x) * kC;
    const int L = min(kC, p.n_tok - t0);
    const int64_t nv = p.n_v_heads;
    const Cols c = cols_of(p, h, D);
    const float neg_a = -expf(p.a_log[h]);  // weights: before the wait
    const float dt_bias = p.dt_bias[h];

    pdl_wait();  // conv_out, a, b come from earlier kernels; the scratch is read by earlier ones
    load_rows<D>(p, c, t0, L, c.key_dim + int64_t{c.kh} * D, Ks, LD, true, 1.0f);
    load_rows<D>(p, c, t0, L, 2 * c.key_dim + int64_t{h} * D, Vs, LD, false, 1.0f);
    if (tid < L) {
        bet[tid] = dn::gate_beta(p.b[(t0 + tid) * c.b_stride + h]);
        gam[tid] = dn::gate_g(p.a[(t0 + tid) * c.a_stride + h], neg_a, dt_bias);
    }
    __syncthreads();
    if (tid == 0) {  // inclusive cumsum (64 adds)
        float cum = 0.0f;
        for (int i = 0; i < L; ++i) gam[i] = cum += gam[i];
    }
    __syncthreads();
    decayed_dots<D>(Ks, LD, Ks, LD, bet, gam, L, false, A);
    __syncthreads();
    // kd out; right-hand sides in place: beta v and beta k exp(gamma).
    const float g_last = gam[L - 1];
    for (int idx = tid; idx < L * D; idx += kThreads) {
        const int i = idx / D, a = idx % D;
        const float k = Ks[i * LD + a];
        sc.kd[((t0 + i) * nv + h) * D + a] = k * expf(g_last - gam[i]);
        Ks[i * LD + a] = k * (bet[i] * expf(gam[i]));
        Vs[i * LD + a] *= bet[i];
    }
    __syncthreads();
    // (I + A) X = R by forward substitution, one thread per column of [V | K] (its own column only:
    // no barrier inside).
    for (int col = tid; col < 2 * D; col += kThreads) {
        float* R = col < D ? Vs + col : Ks + (col - D);
        for (int i = 1; i < L; ++i) {
            float x = R[i * LD];
            for (int j = 0; j < i; ++j) x = fmaf(-A[i * kLA + j], R[j * LD], x);
            R[i * LD] = x;
        }
    }
    __syncthreads();
    for (int idx = tid; idx < L * D; idx += kThreads) {
        const int i = idx / D, a = idx % D;
        const int64_t o = ((t0 + i) * nv + h) * D + a;
        sc.u[o] = Vs[i * LD + a];
        sc.w[o] = Ks[i * LD + a];
    }
    if (tid < L) sc.gam[(t0 + tid) * nv + h] = gam[tid];
}

// ---- state --------------------------------------------------------------------------------------

template <int D>
struct StateCfg {
    static constexpr int CB = D < 32 ? D : 32;     // state columns per CTA
    static constexpr int RG = kThreads / CB;       // row groups (threads per column)
    static constexpr int RV = (kC + RG - 1) / RG;  // v' rows per thread
    static constexpr int RS = (D + RG - 1) / RG;   // state rows per thread
    static constexpr size_t smem = (size_t{D} * CB + 2 * size_t{kC} * D + size_t{kC} * CB) * sizeof(float);
};

template <int D>
__global__ void __launch_bounds__(kThreads) dn_state_kernel(const DeltaNetStepArgs p, Scratch sc) {
    using Cfg = StateCfg<D>;
    constexpr int CB = Cfg::CB, RG = Cfg::RG;
    extern __shared__ float smem[];
    float* S = smem;          // [D, CB]: this CTA's columns of the state
    float* W = S + D * CB;    // [kC, D]
    float* Kd = W + kC * D;   // [kC, D]
    float* Us = Kd + kC * D;  // [kC, CB]: U, then v'
    const int tid = static_cast<int>(threadIdx.x);
    const int j = tid % CB, rg = tid / CB;
    const int h = static_cast<int>(blockIdx.x), j0 = static_cast<int>(blockIdx.y) * CB;
    const int64_t nv = p.n_v_heads;
    float* state = p.state + int64_t{h} * D * D;  // [D, D] row a = key dim, column = value dim

    pdl_wait();  // the scratch and the state come from earlier kernels
    for (int idx = tid; idx < D * CB; idx += kThreads) S[idx] = state[(idx / CB) * D + j0 + idx % CB];
    const int nc = (p.n_tok + kC - 1) / kC;
    for (int c = 0; c < nc; ++c) {
        const int t0 = c * kC, L = min(kC, p.n_tok - t0);
        __syncthreads();  // S complete; the previous chunk's W / Kd / Us reads done
        float* hs = sc.hs + ((int64_t{c} * nv + h) * D) * D;
        for (int idx = tid; idx < D * CB; idx += kThreads) hs[(idx / CB) * D + j0 + idx % CB] = S[idx];
        for (int idx = tid; idx < L * D; idx += kThreads) {
            const int i = idx / D, a = idx % D;
            const int64_t o = ((t0 + i) * nv + h) * D + a;
            W[idx] = sc.w[o];
            Kd[idx] = sc.kd[o];
        }
        for (int idx = tid; idx < L * CB; idx += kThreads)
            Us[idx] = sc.u[((t0 + idx / CB) * nv + h) * D + j0 + idx % CB];
        const float e_last = expf(sc.gam[(t0 + L - 1) * nv + h]);
        __syncthreads();
        // v'[i][j] = U[i][j] - sum_a W[i][a] S[a][j], rows i = rg + r RG.
        float acc[Cfg::RV];
#pragma unroll
        for (int r = 0; r < Cfg::RV; ++r) acc[r] = 0.0f;
        for (int a = 0; a < D; ++a) {
            const float s = S[a * CB + j];
#pragma unroll
            for (int r = 0; r < Cfg::RV; ++r) {
                const int i = rg + r * RG;
                if (i < L) acc[r] = fmaf(W[i * D + a], s, acc[r]);
            }
        }
        __syncthreads();  // every read of S and Us above is done
#pragma unroll
        for (int r = 0; r < Cfg::RV; ++r) {
            const int i = rg + r * RG;
            if (i < L) {
                const float v = Us[i * CB + j] - acc[r];
                Us[i * CB + j] = v;
                sc.u[((t0 + i) * nv + h) * D + j0 + j] = v;
            }
        }
        __syncthreads();
        // S[a][j] <- exp(gamma_last) S[a][j] + sum_t Kd[t][a] v'[t][j], rows a = rg + r RG.
        float sn[Cfg::RS];
#pragma unroll
        for (int r = 0; r < Cfg::RS; ++r) {
            const int a = rg + r * RG;
            sn[r] = a < D ? e_last * S[a * CB + j] : 0.0f;
        }
        for (int t = 0; t < L; ++t) {
            const float v = Us[t * CB + j];
#pragma unroll
            for (int r = 0; r < Cfg::RS; ++r) {
                const int a = rg + r * RG;
                if (a < D) sn[r] = fmaf(Kd[t * D + a], v, sn[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < Cfg::RS; ++r) {
            const int a = rg + r * RG;
            if (a < D) S[a * CB + j] = sn[r];  // only this thread reads or writes S[a][j] here
        }
    }
    __syncthreads();
    for (int idx = tid; idx < D * CB; idx += kThreads) state[(idx / CB) * D + j0 + idx % CB] = S[idx];
}

// ---- out ----------------------------------------------------------------------------------------

template <int D>
struct OutCfg {
    static constexpr int LD = D + 1;         // padded row stride of K
    static constexpr int RG = kThreads / D;  // row groups (threads per output column)
    static constexpr int RO = kC / RG;       // output rows per thread
    static constexpr size_t smem =
        (size_t{kC} * D + size_t{kC} * LD + size_t{kC} * kLA + size_t{kC} * D + kC) * sizeof(float);
    static_assert(kThreads % D == 0 && kC % RG == 0, "unsupported head width");
};

template <int D>
__global__ void __launch_bounds__(kThreads) dn_out_kernel(const DeltaNetStepArgs p, Scratch sc) {
    using Cfg = OutCfg<D>;
    constexpr int LD = Cfg::LD, RG = Cfg::RG;
    extern __shared__ float smem[];
    float* Qs = smem;          // [kC, D]: q (normed, scaled)
    float* Ks = Qs + kC * D;   // [kC, LD]: k (normed), then the raw outputs o [kC, D]
    float* P = Ks + kC * LD;   // [kC, kLA]
    float* Vn = P + kC * kLA;  // [kC, D]: v'
    float* gam = Vn + kC * D;  // [kC]
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int j = tid % D, rg = tid / D;
    const int h = static_cast<int>(blockIdx.y), c = static_cast<int>(blockIdx.x), t0 = c * kC;
    const int L = min(kC, p.n_tok - t0);
    const int64_t nv = p.n_v_heads;
    const Cols cl = cols_of(p, h, D);
    const float q_scale = 1.0f / sqrtf(static_cast<float>(D));

    pdl_wait();  // conv_out, z, the scratch come from earlier kernels; out is read by earlier ones
    // Q rows unpadded (float4 broadcast reads below); rows >= L zero.
    for (int idx = tid; idx < (kC - L) * D; idx += kThreads) Qs[L * D + idx] = 0.0f;
    load_rows<D>(p, cl, t0, L, int64_t{cl.kh} * D, Qs, D, true, q_scale);
    load_rows<D>(p, cl, t0, L, cl.key_dim + int64_t{cl.kh} * D, Ks, LD, true, 1.0f);
    for (int idx = tid; idx < L * D; idx += kThreads) Vn[idx] = sc.u[((t0 + idx / D) * nv + h) * D + idx % D];
    if (tid < L) gam[tid] = sc.gam[(t0 + tid) * nv + h];
    __syncthreads();
    decayed_dots<D>(Qs, D, Ks, LD, nullptr, gam, L, true,
                    P);  // P[i][t] = (q_i . k_t) exp(gamma_i - gamma_t), t <= i
    __syncthreads();
    // o[i][j] = exp(gamma_i) sum_a q_i[a] S_c[a][j] + sum_t P[i][t] v'[t][j], rows i = rg + r RG.
    const float* S = sc.hs + ((int64_t{c} * nv + h) * D) * D;
    float acc[Cfg::RO];
#pragma unroll
    for (int r = 0; r < Cfg::RO; ++r) acc[r] = 0.0f;
    for (int a = 0; a < D; a += 4) {
        float s[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) s[u] = S[(a + u) * D + j];
#pragma unroll
        for (int r = 0; r < Cfg::RO; ++r) {
            const float4 q4 = *reinterpret_cast<const float4*>(Qs + (rg + r * RG) * D + a);
            acc[r] = fmaf(q4.x, s[0], acc[r]);
            acc[r] = fmaf(q4.y, s[1], acc[r]);
            acc[r] = fmaf(q4.z, s[2], acc[r]);
            acc[r] = fmaf(q4.w, s[3], acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < Cfg::RO; ++r) {
        const int i = rg + r * RG;
        acc[r] *= i < L ? expf(gam[i]) : 0.0f;
    }
    for (int t = 0; t < L; ++t) {
        const float v = Vn[t * D + j];
#pragma unroll
        for (int r = 0; r < Cfg::RO; ++r) acc[r] = fmaf(P[(rg + r * RG) * kLA + t], v, acc[r]);
    }
    __syncthreads();  // Ks is free (P is built): the raw outputs go there
    float* O = Ks;
#pragma unroll
    for (int r = 0; r < Cfg::RO; ++r) O[(rg + r * RG) * D + j] = acc[r];
    __syncthreads();
    // Gated RMSNorm per row (one warp per row), as deltanet_step.
    for (int i = warp; i < L; i += kWarps) {
        float ss = 0.0f;
        for (int a = lane; a < D; a += 32) ss += O[i * D + a] * O[i * D + a];
        const float inv = 1.0f / sqrtf(dn::warp_sum(ss) / static_cast<float>(D) + p.eps);
        for (int a = lane; a < D; a += 32) {
            const float z = p.z[(t0 + i) * cl.z_stride + int64_t{h} * D + a];
            const float silu_z = z / (1.0f + expf(-z));
            p.out[(t0 + i) * cl.out_stride + int64_t{h} * D + a] =
                p.norm_w[a] * (O[i * D + a] * inv) * silu_z;
        }
    }
}

// ---- launches -----------------------------------------------------------------------------------

template <typename Kernel>
void set_smem(Kernel k, size_t bytes, unsigned& configured) {
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 32 && (__atomic_load_n(&configured, __ATOMIC_ACQUIRE) & (1u << dev))) return;
    PELICAN_CUDA_CHECK(
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    if (dev < 32) __atomic_fetch_or(&configured, 1u << dev, __ATOMIC_RELEASE);
}

template <int D>
void launch_chunked(const DeltaNetStepArgs& a, const Scratch& sc, cudaStream_t stream) {
    static unsigned conf_prep = 0, conf_state = 0, conf_out = 0;  // bit per device id (< 32)
    set_smem(dn_prep_kernel<D>, PrepCfg<D>::smem, conf_prep);
    set_smem(dn_state_kernel<D>, StateCfg<D>::smem, conf_state);
    set_smem(dn_out_kernel<D>, OutCfg<D>::smem, conf_out);
    const auto nc = static_cast<unsigned>((a.n_tok + kC - 1) / kC), nv = static_cast<unsigned>(a.n_v_heads);
    launch_pdl(dn_prep_kernel<D>, dim3(nc, nv), dim3(kThreads), PrepCfg<D>::smem, stream, a, sc);
    launch_pdl(dn_state_kernel<D>, dim3(nv, static_cast<unsigned>(D / StateCfg<D>::CB)), dim3(kThreads),
               StateCfg<D>::smem, stream, a, sc);
    launch_pdl(dn_out_kernel<D>, dim3(nc, nv), dim3(kThreads), OutCfg<D>::smem, stream, a, sc);
}

}  // namespace

size_t deltanet_chunk_scratch_bytes(int64_t n_tok, int64_t n_v_heads, int64_t d) {
    return scratch_floats(n_tok, n_v_heads, d) * sizeof(float);
}

void deltanet_chunked(const DeltaNetStepArgs& a, void* scratch, cudaStream_t stream) {
    if (a.n_tok <= 0) return;
    dn::check_step_args(a, "deltanet_chunked");
    if (a.conv_in != nullptr || a.conv_out == nullptr) {
        std::fprintf(stderr,
                     "pelican: cuda::deltanet_chunked: needs conv_out (the folded conv is decode-only)\n");
        std::abort();
    }
    if (!scratch) {
        std::fprintf(stderr, "pelican: cuda::deltanet_chunked: null scratch\n");
        std::abort();
    }
    const Scratch sc = carve(scratch, a.n_tok, a.n_v_heads, a.d_k);
    switch (a.d_k) {
        case 16:
            return launch_chunked<16>(a, sc, stream);
        case 32:
            return launch_chunked<32>(a, sc, stream);
        case 64:
            return launch_chunked<64>(a, sc, stream);
        default:
            return launch_chunked<128>(a, sc, stream);
    }
}

}  // namespace pelican::cuda
