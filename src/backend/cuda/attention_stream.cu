// The streaming decode kernel: split-KV flash-decoding for an F16 cache at head_dim 64/128/256,
// n_tok <= 8 (attention_decode's fast path; the rows kernel serves F32 caches and other dims).
//
// Grid (row block z, split, kv head): z varies fastest so the CTAs that share a split's K/V rows
// (n_tok > 1: rows_total = group * n_tok > 8 rows are cut into row blocks of <= 8) run together
// and the repeated reads hit L2. One CTA = 4 warps; the CTA's key range [c0, c1) is cut into
// blocks of KPI keys (8 KiB of K + V each) and warp w takes blocks w, w + 4, ... No CTA barrier
// and no shared-memory staging in the key loop: each lane issues its 8 + 8 16-byte loads
// (ld.global.cg) of a block up front, then
//   scores  K layout: 4 lanes per key (8 keys per load instruction, each lane HD/4 dims, q from
//           shared fp32), partial dots summed by 2 shuffles;
//   softmax per row a warp-uniform running max m (one warp_max per block), p = exp(s - m)
//           (accurate expf; masked keys get p = 0 exactly), lane-local running sums;
//   P.V     V layout: HD/8 lanes per key, each lane 8 dims; p fetched from the K layout lane by
//           shuffle; fp32 accumulators acc[row][8] per lane.
// Masked / out-of-range key slots load the last row of the range (finite data) and get p = 0.
// At the end the lanes sharing dims are summed by shuffles, the 4 warps through shared memory
// (weights exp(m_w - M)), and the CTA writes out = acc / l (one active split) or its partials;
// the last CTA of a (kv head, row block) combines the n_active partials exactly as the rows
// kernel does (see attention_rows.cu for the memory-ordering argument), or, with many splits,
// two levels of combines (groups of ~sqrt(n_active) splits; see the arrival code).
// PDL: pdl_wait() first (q, pos0 and the cache come from earlier kernels), pdl_trigger() once
// the key loop has read all its inputs.
#include "backend/cuda/attention_impl.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/pdl.cuh"

#include <cstdio>
#include <cstdlib>

namespace pelican::cuda::attn {
namespace {

constexpr int kSWarps = kStreamThreads / 32;

__device__ __forceinline__ void h8_to_f32(const uint4& u, float (&o)[8]) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        o[2 * i] = f.x;
        o[2 * i + 1] = f.y;
    }
}

template <int HD, int RB>
__global__ void __launch_bounds__(kStreamThreads, RB <= 4 ? 3 : 2) attn_stream_kernel(const RowsParams p) {
    constexpr int KPI = 2048 / HD;  // keys per warp block: KPI * HD * 2 B * (K + V) = 8 KiB
    constexpr int NCH = HD / 8;     // 16-byte chunks per row
    constexpr int KS = KPI / 8;     // K slots per lane (8 keys per load instruction)
    constexpr int KC = NCH / 4;     // chunks per lane per key (4 lanes per key)
    constexpr int LPV = NCH;        // V layout: lanes per key
    constexpr int KPV = 32 / LPV;   // keys per V load instruction
    constexpr int VS = KPI / KPV;   // V loads per lane
    static_assert(KS * KC == 8 && VS == 8 && 8 % KPV == 0, "8 + 8 loads of 16 bytes per lane");

    __shared__ __align__(16) float qs[RB * HD];             // query rows, fp32
    __shared__ __align__(16) float red[kSWarps * RB * HD];  // per-warp acc, then combine buffer
    __shared__ float wm[kSWarps][RB], wl[kSWarps][RB];      // per-warp running max / sum
    __shared__ float st_m[RB], st_l[RB];
    __shared__ int s_last;

    pdl_wait();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int zb = blockIdx.x, split = blockIdx.y, kvh = blockIdx.z;
    const int nz = gridDim.x;
    const int group = p.group;
    const int rows_total = group * p.n_tok;
    const int r_begin = zb * p.rows_cta;
    const int R = min(p.rows_cta, rows_total - r_begin);
    const int64_t pos0 = static_cast<int64_t>(*p.pos0_dev);
    const int t_first = r_begin / group, t_last = (r_begin + R - 1) / group;
    const int64_t hi = pos0 + t_last + 1;
    int64_t lo = p.window > 0 ? pos0 + t_first - p.window + 1 : 0;
    if (lo < 0) lo = 0;
    const int64_t len = hi - lo;
    int64_t chunk = (len + p.n_splits - 1) / p.n_splits;
    if (chunk < p.min_chunk) chunk = p.min_chunk;
    chunk = (chunk + 63) / 64 * 64;
    const int n_active = static_cast<int>((len + chunk - 1) / chunk);
    if (split >= n_active) return;  // whole CTA
    const int64_t c0 = lo + split * chunk;
    const int64_t c1 = c0 + chunk < hi ? c0 + chunk : hi;

    const int ksub = lane & 3, kkey = lane >> 2;                  // K layout
    const int vch = lane % LPV, vkey = lane / LPV;                // V layout
    const size_t kv_row = static_cast<size_t>(p.n_kv_head) * HD;  // halves between positions
    const __half* kbase = static_cast<const __half*>(p.k) + static_cast<size_t>(kvh) * HD;
    const __half* vbase = static_cast<const __half*>(p.v) + static_cast<size_t>(kvh) * HD;
    const int klast = static_cast<int>(c1 - 1);
    const int64_t n_blocks = (c1 - c0 + KPI - 1) / KPI;
    // The 16-byte units this lane loads for block b (keys clamped into the range).
    auto k_src = [&](int64_t b, int s, int c) {
        const int key = min(static_cast<int>(c0 + b * KPI) + s * 8 + kkey, klast);
        return reinterpret_cast<const uint4*>(kbase + static_cast<size_t>(key) * kv_row) + ksub + 4 * c;
    };
    auto v_src = [&](int64_t b, int v) {
        const int key = min(static_cast<int>(c0 + b * KPI) + v * KPV + vkey, klast);
        return reinterpret_cast<const uint4*>(vbase + static_cast<size_t>(key) * kv_row) + vch;
    };
    // L2 prefetch of block b: the warp's next block streams in while it computes this one (and the
    // first block while the query rows load). The data are read later with ld.global.cg.
    auto prefetch = [&](int64_t b) {
        if (b >= n_blocks) return;
#pragma unroll
        for (int s = 0; s < KS; ++s)
#pragma unroll
            for (int c = 0; c < KC; ++c) asm volatile("prefetch.global.L2 [%0];" ::"l"(k_src(b, s, c)));
#pragma unroll
        for (int v = 0; v < VS; ++v) asm volatile("prefetch.global.L2 [%0];" ::"l"(v_src(b, v)));
    };
    prefetch(warp);

    for (int i = tid; i < RB * HD; i += kStreamThreads) {
        const int r = i / HD, d = i - r * HD;
        float x = 0.0f;
        if (r < R) {
            const int rg = r_begin + r, t = rg / group, h = kvh * group + rg % group;
            x = __ldcg(p.q + t * p.q_stride + static_cast<int64_t>(h) * HD + d);
        }
        qs[i] = x;
    }
    // Keys row r may see inside [c0, c1): [kmin[r], kmax[r]] (empty for padding rows).
    // Positions fit int32 (n_ctx <= INT32_MAX).
    int kmin[RB], kmax[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        const int64_t pos = pos0 + (r_begin + r) / group;
        const int64_t first = p.window > 0 ? pos - p.window + 1 : 0;
        kmin[r] = static_cast<int>(first > c0 ? first : c0);
        kmax[r] = r < R ? static_cast<int>(pos < c1 - 1 ? pos : c1 - 1) : -1;
    }
    __syncthreads();

    const float scale = p.scale;

    float m[RB], lsum[RB], acc[RB][8];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        m[r] = -INFINITY;
        lsum[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][e] = 0.0f;
    }

    for (int64_t b = warp; b < n_blocks; b += kSWarps) {
        const int k0 = static_cast<int>(c0 + b * KPI);
        uint4 kr[KS][KC], vr[VS];
#pragma unroll
        for (int s = 0; s < KS; ++s)
#pragma unroll
            for (int c = 0; c < KC; ++c) kr[s][c] = __ldcg(k_src(b, s, c));
#pragma unroll
        for (int v = 0; v < VS; ++v) vr[v] = __ldcg(v_src(b, v));
        prefetch(b + kSWarps);

        // Scores: lane (kkey, ksub) dots its chunks ksub + 4c of key k0 + 8s + kkey.
        float sc[KS][RB];
#pragma unroll
        for (int s = 0; s < KS; ++s)
#pragma unroll
            for (int r = 0; r < RB; ++r) sc[s][r] = 0.0f;
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            float kf[KS][8];
#pragma unroll
            for (int s = 0; s < KS; ++s) h8_to_f32(kr[s][c], kf[s]);
            const int d0 = (ksub + 4 * c) * 8;
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                const float4 qa = *reinterpret_cast<const float4*>(qs + r * HD + d0);
                const float4 qb = *reinterpret_cast<const float4*>(qs + r * HD + d0 + 4);
                const float qf[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                for (int s = 0; s < KS; ++s)
#pragma unroll
                    for (int e = 0; e < 8; ++e) sc[s][r] = fmaf(qf[e], kf[s][e], sc[s][r]);
            }
        }
#pragma unroll
        for (int s = 0; s < KS; ++s)
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                sc[s][r] += __shfl_xor_sync(0xffffffffu, sc[s][r], 1);
                sc[s][r] += __shfl_xor_sync(0xffffffffu, sc[s][r], 2);
            }

            // Online softmax per row; sc becomes p (0 for masked keys).
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            bool ok[KS];
            float bm = -INFINITY;
#pragma unroll
            for (int s = 0; s < KS; ++s) {
                const int key = k0 + s * 8 + kkey;
                ok[s] = key >= kmin[r] && key <= kmax[r];
                sc[s][r] *= scale;
                if (ok[s]) bm = fmaxf(bm, sc[s][r]);
            }
            bm = warp_max(bm);
            const float m_new = fmaxf(m[r], bm);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: p = 0
            const float alpha = expf(m[r] - m_use);                 // m = -inf -> 0
            m[r] = m_new;
            float ls = 0.0f;
#pragma unroll
            for (int s = 0; s < KS; ++s) {
                const float pj = ok[s] ? expf(sc[s][r] - m_use) : 0.0f;
                sc[s][r] = pj;
                ls += pj;
            }
            lsum[r] = lsum[r] * alpha + (ksub == 0 ? ls : 0.0f);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[r][e] *= alpha;
        }

        // P.V: lane (vkey, vch) adds p(key v * KPV + vkey) * V[key][8 vch .. 8 vch + 8].
#pragma unroll
        for (int v = 0; v < VS; ++v) {
            constexpr int kpv = KPV;
            const int slot = (v * kpv) / 8;  // compile-time after unrolling
            const int src = ((v * kpv + vkey) & 7) * 4;
            float vf[8];
            h8_to_f32(vr[v], vf);
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                const float pj = __shfl_sync(0xffffffffu, sc[slot][r], src);
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[r][e] = fmaf(pj, vf[e], acc[r][e]);
            }
        }
    }
    pdl_trigger();  // every input of this CTA has been read

    // Warp totals: lanes sharing vch hold partial sums over their keys.
#pragma unroll
    for (int r = 0; r < RB; ++r) {
#pragma unroll
        for (int o = LPV; o < 32; o <<= 1)
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[r][e] += __shfl_xor_sync(0xffffffffu, acc[r][e], o);
        lsum[r] = warp_sum(lsum[r]);
        if (lane < LPV) {
            float4* dst = reinterpret_cast<float4*>(red + (warp * RB + r) * HD + vch * 8);
            dst[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
            dst[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
        }
        if (lane == 0) {
            wm[warp][r] = m[r];
            wl[warp][r] = lsum[r];
        }
    }
    __syncthreads();

    // CTA total per row: M = max_w m_w, L = sum_w exp(m_w - M) l_w, acc = sum_w exp(m_w - M) acc_w.
    const bool direct = n_active == 1;
    const size_t slot0 = (static_cast<size_t>(split) * p.n_kv_head + kvh) * rows_total + r_begin;
    for (int e = tid; e < R * HD; e += kStreamThreads) {
        const int r = e / HD, d = e - r * HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < kSWarps; ++w) M = fmaxf(M, wm[w][r]);
        const float Mu = M == -INFINITY ? 0.0f : M;
        float s = 0.0f, l = 0.0f;
#pragma unroll
        for (int w = 0; w < kSWarps; ++w) {
            const float f = wm[w][r] == -INFINITY ? 0.0f : expf(wm[w][r] - Mu);
            s = fmaf(f, red[(w * RB + r) * HD + d], s);
            l = fmaf(f, wl[w][r], l);
        }
        if (direct) {
            const int rg = r_begin + r, t = rg / group, h = kvh * group + rg % group;
            p.out[(static_cast<size_t>(t) * p.n_head + h) * HD + d] = s / l;
        } else {
            p.acc[(slot0 + r) * p.acc_stride + d] = s;
            if (d == 0) p.ml[slot0 + r] = make_float2(M, l);
        }
    }
    if (direct) return;

    // Arrival. Two levels when p.group_ml is set and there are more than kCombineDirect active
    // splits: the splits form groups of G (the same G in every CTA: it depends on n_active only);
    // the last CTA of a group to arrive combines its group's partials into a group partial, the last
    // group to finish combines the group partials into the output. The serial combine reads
    // G + n_active / G partials instead of n_active (at 128 splits: 12 + 11 instead of 128).
    // One level otherwise: the last split combines every partial. Each level publishes its partials
    // (__threadfence) before counting itself in; the last arrival fences again before reading.
    const size_t split_slots = static_cast<size_t>(p.n_kv_head) * rows_total;
    const size_t row0 = static_cast<size_t>(kvh) * rows_total + r_begin;
    const auto arrive = [&](int* ctr, int expected) {
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            const int prev = atomicAdd(ctr, 1);
            s_last = prev == expected - 1;
            if (s_last) *ctr = 0;  // everyone counted here has arrived: nothing else touches it this launch
        }
        __syncthreads();
        const bool last = s_last != 0;
        if (last) __threadfence();  // acquire side
        return last;
    };
    // Combines partial slots [s0, s0 + n) of (ml, acc) for this CTA's R rows: M = max m_s,
    // L = sum_s exp(m_s - M) l_s, A = sum_s exp(m_s - M) acc_s; writes out = A / L (dml null) or the
    // partial (M, L), A into slot dst of (dml, dacc).
    const auto combine = [&](const float2* ml, const float* acc_in, int s0, int n, float2* dml, float* dacc,
                             int dst) {
        for (int r = warp; r < R; r += kSWarps) {
            float mm = -INFINITY;
            for (int s = lane; s < n; s += 32)
                mm = fmaxf(mm, __ldcg(&ml[(s0 + s) * split_slots + row0 + r]).x);
            mm = warp_max(mm);
            float l = 0.0f;
            for (int s = lane; s < n; s += 32) {
                const float2 v = __ldcg(&ml[(s0 + s) * split_slots + row0 + r]);
                if (v.x != -INFINITY) l += v.y * expf(v.x - mm);
            }
            l = warp_sum(l);
            if (lane == 0) {
                st_m[r] = mm;
                st_l[r] = l;
            }
        }
        __syncthreads();
        // sum_s exp(m_s - M) acc_s in float4 units, J2 threads splitting the splits.
        constexpr int hd4 = HD / 4;
        const int units = R * hd4;
        int J2 = 1;
        while (J2 < 16 && units * J2 * 2 <= RB * HD) J2 *= 2;  // red holds kSWarps * RB * HD floats
        float4* red4 = reinterpret_cast<float4*>(red);
        for (int idx = tid; idx < units * J2; idx += kStreamThreads) {
            const int u = idx % units, sl = idx / units;
            const int r = u / hd4, c = u - r * hd4;
            const float M = st_m[r];
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
            for (int s = sl; s < n; s += J2) {
                const size_t slot = (s0 + s) * split_slots + row0 + r;
                const float2 v = __ldcg(&ml[slot]);
                const float w = v.x == -INFINITY ? 0.0f : expf(v.x - M);
                const float4 x = __ldcg(reinterpret_cast<const float4*>(acc_in + slot * p.acc_stride) + c);
                a.x = fmaf(w, x.x, a.x);
                a.y = fmaf(w, x.y, a.y);
                a.z = fmaf(w, x.z, a.z);
                a.w = fmaf(w, x.w, a.w);
            }
            red4[idx] = a;
        }
        __syncthreads();
        for (int u = tid; u < units; u += kStreamThreads) {
            float4 a = red4[u];
            for (int sl = 1; sl < J2; ++sl) {
                const float4 b2 = red4[sl * units + u];
                a.x += b2.x, a.y += b2.y, a.z += b2.z, a.w += b2.w;
            }
            const int r = u / hd4, c = u - r * hd4;
            if (dml) {  // a partial of the next level (unnormalised, as the splits' own)
                const size_t slot = static_cast<size_t>(dst) * split_slots + row0 + r;
                reinterpret_cast<float4*>(dacc + slot * p.acc_stride)[c] = a;
                if (c == 0) dml[slot] = make_float2(st_m[r], st_l[r]);
                continue;
            }
            const int rg = r_begin + r, t = rg / group, h = kvh * group + rg % group;
            const float inv = 1.0f / st_l[r];
            float* o = p.out + (static_cast<size_t>(t) * p.n_head + h) * HD + c * 4;  // any alignment
            o[0] = a.x * inv;
            o[1] = a.y * inv;
            o[2] = a.z * inv;
            o[3] = a.w * inv;
        }
    };

    int* const top = p.counters + kvh * nz + zb;
    if (p.group_ml != nullptr && n_active > kCombineDirect) {
        const int G = combine_group_size(n_active), n_grp = (n_active + G - 1) / G, grp = split / G;
        const int g_n = min(G, n_active - grp * G);
        if (!arrive(p.group_counters + (kvh * nz + zb) * kCombineGroups + grp, g_n)) return;
        combine(p.ml, p.acc, grp * G, g_n, p.group_ml, p.group_acc, grp);
        if (!arrive(top, n_grp)) return;
        combine(p.group_ml, p.group_acc, 0, n_grp, nullptr, nullptr, 0);
    } else {
        if (!arrive(top, n_active)) return;
        combine(p.ml, p.acc, 0, n_active, nullptr, nullptr, 0);
    }
}

template <int HD, int RB>
int stream_occupancy() {
    static int cached[32] = {};
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 32 && cached[dev]) return cached[dev];
    int n = 0;
    PELICAN_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, attn_stream_kernel<HD, RB>, kStreamThreads, 0));
    if (n < 1) n = 1;
    if (dev < 32) cached[dev] = n;
    return n;
}

template <int HD, int RB>
void launch_typed(RowsParams p, int nz, int sms, int max_splits, cudaStream_t stream) {
    // One wave: resident CTAs per SM x SMs, shared by the kv heads and row blocks.
    const int64_t ctas = static_cast<int64_t>(stream_occupancy<HD, RB>()) * sms;
    const int64_t per = static_cast<int64_t>(p.n_kv_head) * nz;
    int64_t s = (ctas + per - 1) / per;
    if (s > max_splits) s = max_splits;
    if (s < 1) s = 1;
    p.n_splits = static_cast<int>(s);
    const dim3 grid(static_cast<unsigned>(nz), static_cast<unsigned>(p.n_splits),
                    static_cast<unsigned>(p.n_kv_head));
    launch_pdl(attn_stream_kernel<HD, RB>, grid, dim3(kStreamThreads), 0, stream, p);
}

template <int HD>
void launch_rb(const RowsParams& p, int nz, int sms, int max_splits, cudaStream_t stream) {
    if (p.rows_cta <= 1) return launch_typed<HD, 1>(p, nz, sms, max_splits, stream);
    if (p.rows_cta <= 2) return launch_typed<HD, 2>(p, nz, sms, max_splits, stream);
    if (p.rows_cta <= 4) return launch_typed<HD, 4>(p, nz, sms, max_splits, stream);
    launch_typed<HD, 8>(p, nz, sms, max_splits, stream);
}

}  // namespace

bool stream_supported(int head_dim, const void* k, const void* v) {
    return (head_dim == 64 || head_dim == 128 || head_dim == 256) &&
           reinterpret_cast<uintptr_t>(k) % 16 == 0 && reinterpret_cast<uintptr_t>(v) % 16 == 0;
}

void launch_stream(const RowsParams& p, int nz, int sms, int max_splits, cudaStream_t stream) {
    if (!stream_supported(p.head_dim, p.k, p.v) || p.rows_cta < 1 || p.rows_cta > kStreamMaxRows ||
        !p.pos0_dev) {
        std::fprintf(stderr, "pelican: attention_decode: stream kernel cannot take head_dim %d / %d rows\n",
                     p.head_dim, p.rows_cta);
        std::abort();
    }
    if (p.head_dim == 64) return launch_rb<64>(p, nz, sms, max_splits, stream);
    if (p.head_dim == 128) return launch_rb<128>(p, nz, sms, max_splits, stream);
    launch_rb<256>(p, nz, sms, max_splits, stream);
}

}  // namespace pelican::cuda::attn
