// attention_prefill: causal flash attention for a batch of tokens at a host-known pos0.
//
//   F16 cache, head_dim 64/128/256: tensor cores (mma.sync m16n8k16, fp32 accumulation). One CTA
//     per (64-token query tile, query head), 4 warps of 16 query rows. Q is rounded to f16 once
//     (unscaled); K/V tiles of BN keys stream through a 2-stage cp.async pipeline into padded
//     shared rows (hd * 2 + 16 bytes: ldmatrix reads 8 rows without bank conflicts). Per tile:
//     S = Q K^T (fp32), masked, online softmax in the log2 domain (exp2f of fp32 scores), P
//     rounded to f16 as the A operand of O += P V. The running sum uses the fp32 p. Tiles the
//     warp cannot see (past its last token, or before its window) are skipped.
//     Accuracy: q and p carry one f16 rounding each (relative 2^-11); everything else is fp32.
//   Otherwise (F32 cache, other head dims): the fp32 rows kernel with one split.
// Both are launched with PDL (pdl_wait() before any read; the implicit trigger at exit).
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_impl.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/pdl.cuh"

#include <cstdio>
#include <cstdlib>

namespace pelican::cuda {
namespace {

using attn::ldmatrix_x4;
using attn::ldmatrix_x4_trans;
using attn::mma_16816;
using attn::pack_half2;

constexpr int kTcThreads = 128;
constexpr int kTcBM = 64;  // query tokens per CTA (16 per warp)

template <int HD>
struct TcCfg {
    static constexpr int BN = HD <= 128 ? 64 : 32;  // keys per tile
    static constexpr int ROW = HD + 8;              // halves per padded shared row
    static constexpr size_t q_bytes = static_cast<size_t>(kTcBM) * ROW * 2;
    static constexpr size_t tile_bytes = static_cast<size_t>(BN) * ROW * 2;
    static constexpr size_t smem = q_bytes + 4 * tile_bytes;  // Q, K[2], V[2]
};

struct TcParams {
    const float* q;
    int64_t q_stride;
    int n_tok, n_head, group;
    int n_kv_head;
    float scale_log2;  // scale * log2(e)
    int64_t window;
    int64_t pos0;
    const __half* k;
    const __half* v;
    float* out;
};

template <int HD>
__global__ void __launch_bounds__(kTcThreads) attn_prefill_tc_kernel(const TcParams p) {
    using C = TcCfg<HD>;
    constexpr int BN = C::BN, ROW = C::ROW;
    constexpr int KS = HD / 16;  // k-steps over the head dim
    extern __shared__ __align__(16) unsigned char smem[];
    __half* qs = reinterpret_cast<__half*>(smem);
    __half* kbuf = reinterpret_cast<__half*>(smem + C::q_bytes);
    __half* vbuf = reinterpret_cast<__half*>(smem + C::q_bytes + 2 * C::tile_bytes);

    pdl_wait();  // q and the cache come from earlier kernels (PDL launch)
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3;
    const int qt = gridDim.x - 1 - blockIdx.x;  // heaviest (latest) tiles first
    const int h = blockIdx.y, kvh = h / p.group;
    const int t0 = qt * kTcBM;
    const int t_hi = min(t0 + kTcBM, p.n_tok) - 1;
    const int64_t hi = p.pos0 + t_hi + 1;
    int64_t lo = p.window > 0 ? p.pos0 + t0 - p.window + 1 : 0;
    if (lo < 0) lo = 0;
    const int n_tiles = static_cast<int>((hi - lo + BN - 1) / BN);
    const size_t kv_row = static_cast<size_t>(p.n_kv_head) * HD;  // halves between positions

    auto load_tile = [&](int tile, int stage) {
        const int64_t k0 = lo + static_cast<int64_t>(tile) * BN;
        __half* ks = kbuf + stage * BN * ROW;
        __half* vs = vbuf + stage * BN * ROW;
        constexpr int per_row = HD / 8;  // 16-byte chunks
        for (int i = tid; i < BN * per_row; i += kTcThreads) {
            const int j = i / per_row, c = i % per_row;
            const bool ok = k0 + j < hi;
            const size_t g =
                static_cast<size_t>(ok ? k0 + j : lo) * kv_row + static_cast<size_t>(kvh) * HD + c * 8;
            attn::cp_async<16>(ks + j * ROW + c * 8, p.k + g, ok);
            attn::cp_async<16>(vs + j * ROW + c * 8, p.v + g, ok);
        }
    };
    load_tile(0, 0);
    attn::cp_async_commit();

    // Q tile -> f16 shared (rows past n_tok are zero).
    for (int i = tid; i < kTcBM * HD / 2; i += kTcThreads) {
        const int r = i / (HD / 2), c = (i % (HD / 2)) * 2;
        const int t = t0 + r;
        float2 x = make_float2(0.0f, 0.0f);
        if (t < p.n_tok) {
            const float* src = p.q + t * p.q_stride + static_cast<int64_t>(h) * HD + c;
            x = make_float2(src[0], src[1]);
        }
        *reinterpret_cast<__half2*>(qs + r * ROW + c) = __floats2half2_rn(x.x, x.y);
    }
    __syncthreads();

    // This warp's rows: tokens tw .. tw + 15 (lane rows gid and gid + 8).
    const int tw = t0 + warp * 16;
    uint32_t qf[HD <= 128 ? KS : 1][4];
    if constexpr (HD <= 128) {
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            const int mat = lane >> 3;
            ldmatrix_x4(qf[kk],
                        qs + (warp * 16 + (lane & 7) + (mat & 1) * 8) * ROW + kk * 16 + (mat >> 1) * 8);
        }
    }
    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    const int64_t pos_r[2] = {p.pos0 + tw + gid, p.pos0 + tw + gid + 8};

    for (int it = 0; it < n_tiles; ++it) {
        if (it + 1 < n_tiles) load_tile(it + 1, (it + 1) & 1);
        attn::cp_async_commit();
        attn::cp_async_wait<1>();
        __syncthreads();
        const int stage = it & 1;
        const __half* ks = kbuf + stage * BN * ROW;
        const __half* vs = vbuf + stage * BN * ROW;
        const int64_t kb = lo + static_cast<int64_t>(it) * BN;
        // Skip tiles this warp cannot see: all keys after its last token, or all before its window.
        const bool after = kb > p.pos0 + tw + 15;
        const bool before = p.window > 0 && kb + BN - 1 < p.pos0 + tw - p.window + 1;
        if (!after && !before) {
            float s[BN / 8][4];
#pragma unroll
            for (int n = 0; n < BN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KS; ++kk) {
                uint32_t a[4];
                if constexpr (HD <= 128) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) a[i] = qf[kk][i];
                } else {
                    const int mat = lane >> 3;
                    ldmatrix_x4(
                        a, qs + (warp * 16 + (lane & 7) + (mat & 1) * 8) * ROW + kk * 16 + (mat >> 1) * 8);
                }
#pragma unroll
                for (int nn = 0; nn < BN / 16; ++nn) {
                    uint32_t b[4];
                    const int mat = lane >> 3;
                    ldmatrix_x4(b,
                                ks + (nn * 16 + (lane & 7) + (mat >> 1) * 8) * ROW + kk * 16 + (mat & 1) * 8);
                    mma_16816(s[2 * nn], a, b[0], b[1]);
                    mma_16816(s[2 * nn + 1], a, b[2], b[3]);
                }
            }
            // Mask only where needed: the tile reaches past the warp's first token, the end of
            // the keys, or the window of its last token.
            const bool need_mask = kb + BN - 1 > p.pos0 + tw || kb + BN > hi ||
                                   (p.window > 0 && kb < p.pos0 + tw + 15 - p.window + 1);
#pragma unroll
            for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = s[n][e] * p.scale_log2;
                    if (need_mask) {
                        const int64_t key = kb + n * 8 + 2 * tig + (e & 1);
                        const int64_t pos = pos_r[e >> 1];
                        const bool ok = key < hi && key <= pos && (p.window <= 0 || key > pos - p.window);
                        if (!ok) x = -INFINITY;
                    }
                    s[n][e] = x;
                }
            }
            // Online softmax per lane row (gid, gid + 8); a row's 4 lanes are one quad.
#pragma unroll
            for (int rh = 0; rh < 2; ++rh) {
                float mx = -INFINITY;
#pragma unroll
                for (int n = 0; n < BN / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * rh], s[n][2 * rh + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m_run[rh], mx);
                const float m_use = m_new == -INFINITY ? 0.0f : m_new;
                const float alpha = exp2f(m_run[rh] - m_use);
                m_run[rh] = m_new;
                float sum = 0.0f;
#pragma unroll
                for (int n = 0; n < BN / 8; ++n) {
                    s[n][2 * rh] = exp2f(s[n][2 * rh] - m_use);
                    s[n][2 * rh + 1] = exp2f(s[n][2 * rh + 1] - m_use);
                    sum += s[n][2 * rh] + s[n][2 * rh + 1];
                }
                l_run[rh] = l_run[rh] * alpha + sum;  // lane-partial; quad-summed at the end
#pragma unroll
                for (int n = 0; n < HD / 8; ++n) {
                    o[n][2 * rh] *= alpha;
                    o[n][2 * rh + 1] *= alpha;
                }
            }
            // O += P V
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                const uint32_t a[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]),
                                       pack_half2(s[2 * kk][2], s[2 * kk][3]),
                                       pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                       pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int nn = 0; nn < HD / 16; ++nn) {
                    uint32_t b[4];
                    const int mat = lane >> 3;
                    ldmatrix_x4_trans(
                        b, vs + (kk * 16 + (lane & 7) + (mat & 1) * 8) * ROW + nn * 16 + (mat >> 1) * 8);
                    mma_16816(o[2 * nn], a, b[0], b[1]);
                    mma_16816(o[2 * nn + 1], a, b[2], b[3]);
                }
            }
        }
        __syncthreads();  // everyone is done with this stage before it is refilled
    }
    attn::cp_async_wait<0>();

#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
        float l = l_run[rh];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int t = tw + gid + rh * 8;
        if (t >= p.n_tok) continue;
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float* dst = p.out + (static_cast<size_t>(t) * p.n_head + h) * HD + 2 * tig;
#pragma unroll
        for (int n = 0; n < HD / 8; ++n)
            *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][2 * rh] * inv, o[n][2 * rh + 1] * inv);
    }
}

template <int HD>
void launch_tc(const TcParams& p, cudaStream_t stream) {
    static unsigned configured = 0;  // bit per device id (< 32)
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 32 || !(__atomic_load_n(&configured, __ATOMIC_ACQUIRE) & (1u << dev))) {
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_tc_kernel<HD>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(TcCfg<HD>::smem)));
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(attn_prefill_tc_kernel<HD>,
                                                cudaFuncAttributePreferredSharedMemoryCarveout,
                                                cudaSharedmemCarveoutMaxShared));
        if (dev < 32) __atomic_fetch_or(&configured, 1u << dev, __ATOMIC_RELEASE);
    }
    const dim3 grid(static_cast<unsigned>((p.n_tok + kTcBM - 1) / kTcBM), static_cast<unsigned>(p.n_head));
    launch_pdl(attn_prefill_tc_kernel<HD>, grid, dim3(kTcThreads), TcCfg<HD>::smem, stream, p);
}

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "pelican: attention_prefill: %s\n", what);
    std::abort();
}

}  // namespace

void attention_prefill(const AttnArgs& a, int64_t pos0, cudaStream_t stream) {
    if (a.n_tok < 1) return;
    if (a.n_kv_head <= 0 || a.n_head % a.n_kv_head != 0) fail("n_head must be a multiple of n_kv_head");
    if (a.kv.type != DType::F16 && a.kv.type != DType::F32) fail("KV cache must be F16 or F32");
    const int group = a.n_head / a.n_kv_head;
    const int64_t q_stride = a.q_stride ? a.q_stride : static_cast<int64_t>(a.n_head) * a.head_dim;
    const bool aligned =
        reinterpret_cast<uintptr_t>(a.kv.k) % 16 == 0 && reinterpret_cast<uintptr_t>(a.kv.v) % 16 == 0;
    const int hd = a.head_dim;
    if (a.kv.type == DType::F16 && aligned && (hd == 64 || hd == 128 || hd == 256)) {
        TcParams p{};
        p.q = a.q;
        p.q_stride = q_stride;
        p.n_tok = a.n_tok;
        p.n_head = a.n_head;
        p.group = group;
        p.n_kv_head = a.n_kv_head;
        p.scale_log2 = a.scale * 1.4426950408889634f;
        p.window = a.window;
        p.pos0 = pos0;
        p.k = static_cast<const __half*>(a.kv.k);
        p.v = static_cast<const __half*>(a.kv.v);
        p.out = a.out;
        if (hd == 64)
            launch_tc<64>(p, stream);
        else if (hd == 128)
            launch_tc<128>(p, stream);
        else
            launch_tc<256>(p, stream);
        return;
    }
    // fp32 path: rows kernel, one split (no workspace), kMaxRows rows per CTA.
    const int64_t rows_total = static_cast<int64_t>(group) * a.n_tok;
    const int rows_cta = rows_total < attn::kMaxRows ? static_cast<int>(rows_total) : attn::kMaxRows;
    const int64_t nz = (rows_total + rows_cta - 1) / rows_cta;
    if (nz > 65535) fail("too many query rows for one launch (split the prefill)");
    attn::RowsParams p{};
    p.q = a.q;
    p.q_stride = q_stride;
    p.n_tok = a.n_tok;
    p.n_head = a.n_head;
    p.n_kv_head = a.n_kv_head;
    p.head_dim = hd;
    p.group = group;
    p.scale = a.scale;
    p.window = a.window;
    p.pos0_dev = nullptr;
    p.pos0_host = pos0;
    p.k = a.kv.k;
    p.v = a.kv.v;
    p.out = a.out;
    p.rows_cta = rows_cta;
    p.n_splits = 1;
    p.min_chunk = INT64_MAX / 4;
    attn::launch_rows(p, a.kv.type == DType::F16, static_cast<int>(nz), stream);
}

}  // namespace pelican::cuda
