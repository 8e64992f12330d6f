// The CUDA-core attention kernel ("rows" kernel): fp32 math over an F16 or F32 cache.
//
// One CTA per (split, kv head, row block). A row is one (token, query head) of the kv head's GQA
// group, so K/V are read once for every query head and token that uses them. The CTA's key range
// is the causal range of its rows, [lo, hi) (lo > 0 with a sliding window); it is cut at run
// time into gridDim.x splits of `chunk` keys (a multiple of the tile) and CTAs past the last
// split exit at once. So the grid depends on n_ctx only and one captured graph serves every
// position.
//
// Per CTA: query rows -> shared fp32; K/V tiles of T keys stream through a kStages-deep cp.async
// pipeline (16-byte copies at the fast head dims); per tile:
//   scores  thread item = (4 rows, 1 key, 1/G of the head dim), partial dots reduced by shuffles;
//   softmax one warp per row: online max, p = exp(s - m), running sum (all fp32, accurate expf);
//   P.V     thread item = (4 rows, DV dims, 1/J of the keys), accumulators in registers.
// At the end the J key slices are summed through shared memory. With one active split the CTA
// writes out = acc / sum; otherwise it writes (max, sum, acc) partials, and the last CTA of its
// (kv head, row block) to arrive combines them:
//   out = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s,  M = max_s m_s.
// Memory ordering of the combine: every thread __threadfence()s after writing its partials,
// then thread 0 increments the counter (atomicAdd, device scope); the CTA that sees n_active - 1
// fences again and reads the partials with ld.global.cg (L2, never a stale L1 line), then
// resets the counter to 0 so the workspace is ready for the next launch (stream order).
#include "backend/cuda/attention_impl.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/pdl.cuh"

#include <cstdio>
#include <cstdlib>

namespace pelican::cuda::attn {
namespace {

template <typename KV, int HD>
__global__ void __launch_bounds__(kThreads, (HD == 64 || HD == 128) ? 4 : 2)
    attn_rows_kernel(const RowsParams p) {
    constexpr int ES = sizeof(KV);
    constexpr int T = tile_keys(ES, HD);
    constexpr int TU = (T + 31) / 32;     // keys per lane in the softmax
    constexpr int CW = HD ? 16 / ES : 2;  // score chunk (elements per shared load)
    constexpr int DV = HD ? 4 : 2;        // P.V dims per item
    constexpr int CB = HD ? 16 : 4;       // bytes per cp.async
    constexpr int HDMAX = HD ? HD : 256;
    constexpr int KI = (kMaxRows / 4 * (HDMAX / DV) + kThreads - 1) / kThreads;  // P.V items per thread
    constexpr int NW = kThreads / 32;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int s_last;

    pdl_wait();  // q, pos0 and the cache come from earlier kernels
    const int hd = HD ? HD : p.head_dim;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int split = blockIdx.x, kvh = blockIdx.y;
    const int group = p.group;
    const int rows_total = group * p.n_tok;
    const int r_begin = blockIdx.z * p.rows_cta;
    const int R = min(p.rows_cta, rows_total - r_begin);
    const int64_t pos0 = p.pos0_dev ? static_cast<int64_t>(*p.pos0_dev) : p.pos0_host;
    const int t_first = r_begin / group, t_last = (r_begin + R - 1) / group;
    const int64_t hi = pos0 + t_last + 1;
    int64_t lo = p.window > 0 ? pos0 + t_first - p.window + 1 : 0;
    if (lo < 0) lo = 0;
    const int64_t len = hi - lo;
    int64_t chunk = (len + p.n_splits - 1) / p.n_splits;
    if (chunk < p.min_chunk) chunk = p.min_chunk;
    chunk = (chunk + T - 1) / T * T;
    const int n_active = static_cast<int>((len + chunk - 1) / chunk);
    if (split >= n_active) return;  // whole CTA: no work in this split at this length
    const int64_t c0 = lo + split * chunk;
    const int64_t c1 = c0 + chunk < hi ? c0 + chunk : hi;
    const int n_tiles = static_cast<int>((c1 - c0 + T - 1) / T);

    const RowsSmem L = rows_smem(p.rows_cta, hd, ES, T);
    float* qs = reinterpret_cast<float*>(smem + L.q);
    float* sc = reinterpret_cast<float*>(smem + L.sc);
    const int nrb = (R + 3) / 4, rows4 = nrb * 4;
    const int stat_n = (p.rows_cta + 3) & ~3;
    float* st_m = reinterpret_cast<float*>(smem + L.stat);
    float* st_l = st_m + stat_n;
    float* st_a = st_l + stat_n;
    const int row_bytes = L.row_bytes;
    const size_t kv_row = static_cast<size_t>(p.n_kv_head) * hd * ES;  // bytes between positions

    auto load_tile = [&](int tile, int stage) {
        const int64_t k0 = c0 + static_cast<int64_t>(tile) * T;
        unsigned char* ks = smem + L.kv + static_cast<size_t>(stage) * T * row_bytes;
        unsigned char* vs = ks + static_cast<size_t>(kStages) * T * row_bytes;
        const int per_row = hd * ES / CB;
        const size_t head_off = static_cast<size_t>(kvh) * hd * ES;
        for (int i = tid; i < T * per_row; i += kThreads) {
            const int j = i / per_row, c = i - j * per_row;
            const bool ok = k0 + j < c1;
            const size_t g = static_cast<size_t>(ok ? k0 + j : c0) * kv_row + head_off + c * CB;
            cp_async<CB>(ks + j * row_bytes + c * CB, static_cast<const unsigned char*>(p.k) + g, ok);
            cp_async<CB>(vs + j * row_bytes + c * CB, static_cast<const unsigned char*>(p.v) + g, ok);
        }
    };

    // Prologue: start the first tiles, then the query rows (plain loads) and the row state.
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
        if (st < n_tiles) load_tile(st, st);
        cp_async_commit();
    }
    for (int i = tid; i < R * hd; i += kThreads) {
        const int r = i / hd, d = i - r * hd;
        const int rg = r_begin + r, t = rg / group, h = kvh * group + rg % group;
        qs[i] = p.q[t * p.q_stride + static_cast<int64_t>(h) * hd + d];
    }
    for (int r = tid; r < stat_n; r += kThreads) {
        st_m[r] = -INFINITY;
        st_l[r] = 0.0f;
        st_a[r] = 1.0f;
    }

    // Score mapping: item = (row block rb, key j); G threads split the head dim of an item.
    const int items = nrb * T;
    int G = 1;
    while (G < 8 && items * G * 2 <= kThreads) G *= 2;
    const int lpg = 32 / G;  // lanes per dim-slice within a warp
    const int g_sl = lane / lpg;
    const int item_base = warp * lpg + lane % lpg, item_stride = NW * lpg;
    const int n_iter = (items + item_stride - 1) / item_stride;
    const int n_chunks = hd / CW;
    // P.V mapping: item = (row block, DV dims); J threads split the keys of a tile.
    const int dch = hd / DV;
    const int items_pv = nrb * dch;
    int J = 1;
    if (items_pv <= kThreads) {
        while (J * 2 <= T && items_pv * J * 2 <= kThreads) J *= 2;
    }
    const int pv_slice = J > 1 ? tid / items_pv : 0;
    const int pv_base = J > 1 ? tid % items_pv : tid;
    float acc[KI][4][DV];
#pragma unroll
    for (int k = 0; k < KI; ++k)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < DV; ++e) acc[k][i][e] = 0.0f;

    for (int it = 0; it < n_tiles; ++it) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // tile `it` landed for all threads; stage (it - 1) % kStages is free
        if (it + kStages - 1 < n_tiles) load_tile(it + kStages - 1, (it + kStages - 1) % kStages);
        cp_async_commit();
        const int stage = it % kStages;
        const unsigned char* ks = smem + L.kv + static_cast<size_t>(stage) * T * row_bytes;
        const unsigned char* vs = ks + static_cast<size_t>(kStages) * T * row_bytes;
        const int64_t tile_k0 = c0 + static_cast<int64_t>(it) * T;

        // 1. scores sc[r][j] = scale * q_r . k_j
        for (int n = 0; n < n_iter; ++n) {
            const int item = item_base + n * item_stride;
            const bool valid = item < items;
            const int rb = valid ? item / T : 0, j = valid ? item % T : 0;
            const int nr = min(4, R - rb * 4);
            float dot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (valid) {
                const KV* krow = reinterpret_cast<const KV*>(ks + j * row_bytes);
                const float* q0 = qs + rb * 4 * hd;
                for (int c = g_sl; c < n_chunks; c += G) {
                    float kf[CW];
                    load_f32<CW>(krow + c * CW, kf);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        if (i < nr) {
                            float qf[CW];
                            load_f32<CW>(q0 + i * hd + c * CW, qf);
#pragma unroll
                            for (int e = 0; e < CW; ++e) dot[i] = fmaf(qf[e], kf[e], dot[i]);
                        }
                    }
                }
            }
            for (int o = G / 2; o > 0; o >>= 1)
#pragma unroll
                for (int i = 0; i < 4; ++i) dot[i] += __shfl_xor_sync(0xffffffffu, dot[i], o * lpg);
            if (valid && g_sl == 0) {
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    if (i < nr) sc[(rb * 4 + i) * T + j] = dot[i] * p.scale;
            }
        }
        __syncthreads();

        // 2. online softmax, one warp per row (rows R .. rows4 get p = 0, alpha = 1)
        for (int r = warp; r < rows4; r += NW) {
            const int64_t pos = pos0 + (r_begin + r) / group;
            const int64_t first = p.window > 0 ? pos - p.window + 1 : INT64_MIN;
            float s[TU];
            bool ok[TU];
            float mx = -INFINITY;
#pragma unroll
            for (int u = 0; u < TU; ++u) {
                const int jj = lane + 32 * u;
                const int64_t kp = tile_k0 + jj;
                ok[u] = r < R && jj < T && kp < c1 && kp <= pos && kp >= first;
                s[u] = ok[u] ? sc[r * T + jj] : -INFINITY;
                mx = fmaxf(mx, s[u]);
            }
            mx = warp_max(mx);
            const float m_old = st_m[r];
            const float m_new = fmaxf(m_old, mx);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: p = 0
            const float alpha = expf(m_old - m_use);                // m_old = -inf -> 0
            float sum = 0.0f;
#pragma unroll
            for (int u = 0; u < TU; ++u) {
                const int jj = lane + 32 * u;
                const float pj = ok[u] ? expf(s[u] - m_use) : 0.0f;
                sum += pj;
                if (jj < T) sc[r * T + jj] = pj;
            }
            sum = warp_sum(sum);
            __syncwarp();  // every lane has read st_m / st_l before lane 0 updates them
            if (lane == 0) {
                st_m[r] = m_new;
                st_l[r] = st_l[r] * alpha + sum;
                st_a[r] = alpha;
            }
        }
        __syncthreads();

        // 3. acc = acc * alpha + P V
#pragma unroll
        for (int k = 0; k < KI; ++k) {
            const int item = pv_base + k * kThreads;
            if (item >= items_pv || pv_slice >= J) continue;
            const int rb = item / dch, dc = item - rb * dch;
            const int nr = min(4, R - rb * 4);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float a = i < nr ? st_a[rb * 4 + i] : 1.0f;
#pragma unroll
                for (int e = 0; e < DV; ++e) acc[k][i][e] *= a;
            }
            const float* pr = sc + rb * 4 * T;
            for (int j = pv_slice; j < T; j += J) {
                float vf[DV];
                load_f32<DV>(reinterpret_cast<const KV*>(vs + j * row_bytes) + dc * DV, vf);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    if (i < nr) {
                        const float pj = pr[i * T + j];
#pragma unroll
                        for (int e = 0; e < DV; ++e) acc[k][i][e] = fmaf(pj, vf[e], acc[k][i][e]);
                    }
                }
            }
        }
    }

    // Sum the J key slices through shared memory (the stage region is free now).
    cp_async_wait<0>();
    __syncthreads();
    pdl_trigger();  // every input has been read
    float* red = reinterpret_cast<float*>(smem + L.kv);
#pragma unroll
    for (int k = 0; k < KI; ++k) {
        const int item = pv_base + k * kThreads;
        if (item >= items_pv || pv_slice >= J) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < DV; ++e) red[((pv_slice * items_pv + item) * 4 + i) * DV + e] = acc[k][i][e];
    }
    __syncthreads();
    const bool direct = n_active == 1;
    const size_t slot0 = (static_cast<size_t>(split) * p.n_kv_head + kvh) * rows_total + r_begin;
    for (int e = tid; e < R * hd; e += kThreads) {
        const int r = e / hd, d = e - r * hd;
        const int item = (r >> 2) * dch + d / DV, inner = (r & 3) * DV + d % DV;
        float s = 0.0f;
        for (int sl = 0; sl < J; ++sl) s += red[(sl * items_pv + item) * 4 * DV + inner];
        if (direct) {
            const int rg = r_begin + r, t = rg / group, h = kvh * group + rg % group;
            p.out[(static_cast<size_t>(t) * p.n_head + h) * hd + d] = s / st_l[r];
        } else {
            p.acc[(slot0 + r) * p.acc_stride + d] = s;
        }
    }
    if (direct) return;
    if (tid < R) p.ml[slot0 + tid] = make_float2(st_m[tid], st_l[tid]);

    // Arrival: publish the partials, then count this split in.
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        int* ctr = p.counters + kvh * gridDim.z + blockIdx.z;
        const int prev = atomicAdd(ctr, 1);
        s_last = prev == n_active - 1;
        if (s_last) *ctr = 0;  // every active split has arrived: nothing else touches it this launch
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();  // acquire side: the other splits' partials are visible from here on

    // Combine: per row M = max_s m_s and L = sum_s exp(m_s - M) l_s ...
    for (int r = warp; r < R; r += NW) {
        float m = -INFINITY;
        for (int s = lane; s < n_active; s += 32) {
            const size_t slot = (static_cast<size_t>(s) * p.n_kv_head + kvh) * rows_total + r_begin + r;
            m = fmaxf(m, __ldcg(&p.ml[slot]).x);
        }
        m = warp_max(m);
        float l = 0.0f;
        for (int s = lane; s < n_active; s += 32) {
            const size_t slot = (static_cast<size_t>(s) * p.n_kv_head + kvh) * rows_total + r_begin + r;
            const float2 ml = __ldcg(&p.ml[slot]);
            if (ml.x != -INFINITY) l += ml.y * expf(ml.x - m);
        }
        l = warp_sum(l);
        if (lane == 0) {
            st_m[r] = m;
            st_l[r] = l;
        }
    }
    __syncthreads();
    // ... then sum_s exp(m_s - M) acc_s in float4 units, J2 threads splitting the splits.
    const int hd4 = (hd + 3) / 4;
    const int units = R * hd4;
    int J2 = 1;
    if (units <= kThreads) {
        while (J2 < 32 && units * J2 * 2 <= kThreads) J2 *= 2;
    }
    float4* red4 = reinterpret_cast<float4*>(smem + L.kv);
    for (int idx = tid; idx < units * J2; idx += kThreads) {
        const int u = idx % units, sl = idx / units;
        const int r = u / hd4, c = u - r * hd4;
        const float M = st_m[r];
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
        for (int s = sl; s < n_active; s += J2) {
            const size_t slot = (static_cast<size_t>(s) * p.n_kv_head + kvh) * rows_total + r_begin + r;
            const float2 ml = __ldcg(&p.ml[slot]);
            const float w = ml.x == -INFINITY ? 0.0f : expf(ml.x - M);
            const float4 x = __ldcg(reinterpret_cast<const float4*>(p.acc + slot * p.acc_stride) + c);
            a.x = fmaf(w, x.x, a.x);
            a.y = fmaf(w, x.y, a.y);
            a.z = fmaf(w, x.z, a.z);
            a.w = fmaf(w, x.w, a.w);
        }
        red4[idx] = a;
    }
    __syncthreads();
    for (int u = tid; u < units; u += kThreads) {
        float4 a = red4[u];
        for (int sl = 1; sl < J2; ++sl) {
            const float4 b = red4[sl * units + u];
            a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
        }
        const int r = u / hd4, c = u - r * hd4;
        const int rg = r_begin + r, t = rg / group, h = kvh * group + rg % group;
        const float inv = 1.0f / st_l[r];
        float* o = p.out + (static_cast<size_t>(t) * p.n_head + h) * hd;
        const float v[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (c * 4 + e < hd) o[c * 4 + e] = v[e] * inv;
    }
}

template <typename KV, int HD>
void launch_typed(const RowsParams& p, int nz, cudaStream_t stream) {
    constexpr int T = tile_keys(sizeof(KV), HD);
    const size_t smem = rows_smem(p.rows_cta, p.head_dim, sizeof(KV), T).total;
    // Opt in to > 48 KiB once per device for the largest configuration this instantiation serves.
    static unsigned configured = 0;  // bit per device id (< 32)
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 32 || !(__atomic_load_n(&configured, __ATOMIC_ACQUIRE) & (1u << dev))) {
        const size_t max_smem = rows_smem(kMaxRows, HD ? HD : 256, sizeof(KV), T).total;
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(attn_rows_kernel<KV, HD>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(max_smem)));
        // Up to 4 CTAs of ~54 KiB per SM at hd 128: ask for the largest shared-memory carveout.
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(attn_rows_kernel<KV, HD>,
                                                cudaFuncAttributePreferredSharedMemoryCarveout,
                                                cudaSharedmemCarveoutMaxShared));
        if (dev < 32) __atomic_fetch_or(&configured, 1u << dev, __ATOMIC_RELEASE);
    }
    const dim3 grid(static_cast<unsigned>(p.n_splits), static_cast<unsigned>(p.n_kv_head),
                    static_cast<unsigned>(nz));
    launch_pdl(attn_rows_kernel<KV, HD>, grid, dim3(kThreads), smem, stream, p);
}

template <typename KV>
void launch_hd(const RowsParams& p, int nz, cudaStream_t stream) {
    const bool aligned =
        (reinterpret_cast<uintptr_t>(p.k) % 16 == 0) && (reinterpret_cast<uintptr_t>(p.v) % 16 == 0);
    if (aligned && p.head_dim == 64) return launch_typed<KV, 64>(p, nz, stream);
    if (aligned && p.head_dim == 128) return launch_typed<KV, 128>(p, nz, stream);
    if (aligned && p.head_dim == 256) return launch_typed<KV, 256>(p, nz, stream);
    launch_typed<KV, 0>(p, nz, stream);
}

}  // namespace

void launch_rows(const RowsParams& p, bool kv_f16, int nz, cudaStream_t stream) {
    if (p.head_dim <= 0 || p.head_dim % 2 != 0 || p.head_dim > 256 || p.rows_cta < 1 ||
        p.rows_cta > kMaxRows) {
        std::fprintf(stderr, "pelican: attention: unsupported head_dim %d / rows per CTA %d\n", p.head_dim,
                     p.rows_cta);
        std::abort();
    }
    if (kv_f16)
        launch_hd<__half>(p, nz, stream);
    else
        launch_hd<float>(p, nz, stream);
}

}  // namespace pelican::cuda::attn
