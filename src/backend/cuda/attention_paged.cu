// attention_paged: the query rows of many sequences against their K/V in one paged pool.
//
// Rows kernel (every row that no uniform tile takes). Grid (n_rows * nzh, n_splits, n_kv_head):
// CTA (i * nzh + hb, split, kvh) serves row i's query heads kvh * group + hb * rows_cta .. (at most
// kMaxRowsCta = 8; nzh = ceil(group / 8) head blocks), so each K/V row of the KV head is read once
// per group (once per head block; the repeats hit L2). The row's keys [lo, pos] are cut at run time
// into n_splits chunks of max(ceil(len / n_splits), 64) keys rounded to 64; CTAs past the last
// chunk exit at once, so the grid depends on n_rows and max_kv only. n_splits (host, fixed per
// launch shape): one wave of resident CTAs (occupancy x SMs, at most kMaxSplitPairs) over the
// n_rows * n_kv_head * nzh (row, KV head, head block) triples, at most 128 and max_kv / 64; 1 once
// the triples fill the wave (B = 128 decode rows at 8 KV heads do: no split, no partials).
//   Vectorised kernel (F16 at head_dim 64/128/256, F32 at 64/128, 16-byte aligned pools): the
//   streaming kernel's layout (attention_stream.cu): 4 warps, warp w takes key blocks w, w + 4, ...
//   of KPI keys (4 KiB of K and 4 KiB of V), each lane issues 8 + 8 16-byte ld.global.cg, no shared
//   staging and no CTA barrier in the key loop. The page walk: lane j < KPI computes the pool slot of
//   block key j (one table load and one multiply-shift division per lane and block, a block ahead,
//   with an L2 prefetch of the next block); the lanes that load a key take its slot by shuffle.
//   Scores 4 lanes per key, softmax with a warp-uniform running max, P.V HD / EPC lanes per key.
//   Generic kernel (any other head_dim <= 256, misaligned pools): lane = key for the scores, lane =
//   dims d, d + 32, .. for P.V (slots and p by shuffle), q in shared fp32.
//   Both end alike (finish_row): the 4 warps' (max, sum, acc) merge through shared memory; one
//   active split writes out = acc / sum, else the CTA writes its partial and the last CTA of the
//   (row, KV head, head block) to arrive combines (more than 8 active splits: two levels, groups of
//   ~sqrt(n) splits) as attention_stream.cu does, and resets the counters to zero.
// Tile kernel (uniform tiles, see attention_paged.h): attention_prefill's tensor-core kernel with
// the K/V tile loads walking the block table: one CTA per (64-row tile, query head), 4 warps of 16
// rows, K/V tiles of BN keys through a 2-stage cp.async pipeline; each K/V tile is read once for the
// tile's rows (the rows of one sequence share it; the query heads of a group re-read it from L2).
// A chunk's rows share tiles only where a 64-aligned tile of the batch lies inside the chunk with at
// least 16 rows: the chunk's first and last partial tiles (and chunks of fewer rows) go through the
// rows kernel, row by row. Launched before the rows kernel (both PDL; the rows kernel waits for it).
//
// Bytes moved per launch (compare with the DRAM bandwidth): rows kernel: sum over rows of
// n_keys(row) * n_kv_head * head_dim * elem * 2 (K and V, once per row; the nzh head blocks re-read
// from L2) + q and out (n_rows * n_head * head_dim * 4 each) + tables (4 bytes per block_tokens
// keys) + with splits the partials, written and read once: n_splits * n_rows * n_head * (head_dim +
// 2) * 4 * 2. Tile kernel: per uniform tile, n_keys(last row) * n_kv_head * head_dim * 2 * 2 (group
// heads re-read from L2). Decode B = 1, 32K keys, 8 KV heads x 128, F16: 128 MiB of K/V.
#include "backend/cuda/attention_paged.h"
#include "backend/cuda/attention_impl.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/pdl.cuh"

#include <cstdio>
#include <cstdlib>

namespace pelican::cuda {
namespace {

constexpr int kThreads = 128;  // both kernels
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRowsCta = 8;                // query heads of one row per rows-kernel CTA
constexpr int kMinChunk = 64;                 // fewest keys per split (multiple of every KPI)
constexpr int kMaxSplits = attn::kMaxSplits;  // 128
constexpr int64_t kMaxSplitPairs = 4096;      // splits only below this many (row, kv head, head block)
constexpr int kCombineDirect = attn::kCombineDirect;
constexpr int kCombineGroups = attn::kCombineGroups;
static_assert(kThreads >= kPagedTileRows, "the tile check gives one thread per row");
static_assert(kPagedTileRows == 16 * kWarps, "tile kernel: 16 rows per warp");

constexpr size_t align256(size_t n) { return (n + 255) & ~size_t{255}; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// n / d for 0 <= n < 2^31 by a multiply and a shift (round-up method: m = ceil(2^p / d) with
// p = 31 + ceil(log2 d); n * (m d - 2^p) < 2^31 * d <= 2^p keeps floor(n m / 2^p) = floor(n / d)).
struct FastDiv {
    uint32_t d = 1, m = 0, s = 0;
    FastDiv() = default;
    explicit FastDiv(uint32_t div) : d(div) {
        if (d <= 1) return;
        uint32_t l = 0;
        while ((uint64_t{1} << l) < d) ++l;
        const uint32_t p = 31 + l;
        m = static_cast<uint32_t>(((uint64_t{1} << p) + d - 1) / d);
        s = p - 32;
    }
    __device__ __forceinline__ int div(int n) const {
        return d == 1 ? n : static_cast<int>(__umulhi(static_cast<uint32_t>(n), m) >> s);
    }
};

struct PagedParams {
    const float* q;
    int64_t q_stride;
    int n_rows, n_head, n_kv_head, head_dim, group;
    float scale;
    int64_t window;
    const int32_t* row_pos;
    const int32_t* row_table;
    const int32_t* tables;
    int max_blocks, block_tokens;
    FastDiv bt_div;
    int key_cap;  // keys at or past this (max_blocks * block_tokens, clamped) are never read
    const void* k;
    const void* v;
    float* out;
    int rows_cta, nzh, n_splits;
    bool tiles;  // the tile kernel runs: the rows kernel skips uniform tiles
    // Split partials: slot = split * (n_rows * n_head) + i * n_head + h; acc rows head_dim floats.
    int* counters;        // [kMaxSplitPairs] per (row, kv head, head block); zero between launches
    int* group_counters;  // [kMaxSplitPairs][kCombineGroups]
    float2* ml;           // [slots] (max, sum)
    float* acc;           // [slots][head_dim]
    float2* group_ml;     // [kCombineGroups * n_rows * n_head]
    float* group_acc;     // [same][head_dim]
};

// ---- shared device pieces ----------------------------------------------------------------------

// Whether tile `tile` (rows kPagedTileRows * tile ..) is uniform (attention_paged.h). Called by
// every thread of the CTA (a barrier); the same answer in the tile and the rows kernel.
__device__ __forceinline__ bool tile_uniform(const PagedParams& p, int tile) {
    const int r0 = tile * kPagedTileRows;
    const int n = min(kPagedTileRows, p.n_rows - r0);
    const int tid = threadIdx.x;
    const int t0 = p.row_table[r0];
    const int64_t q0 = p.row_pos[r0];
    bool ok = n >= kPagedTileMinRows && q0 >= 0;
    if (ok && tid > 0 && tid < n)
        ok = p.row_table[r0 + tid] == t0 && static_cast<int64_t>(p.row_pos[r0 + tid]) == q0 + tid;
    return __syncthreads_and(ok) != 0;
}

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// Pool row of key position `key` (0 <= key < key_cap) of the sequence with block table tbl.
__device__ __forceinline__ int key_slot(const PagedParams& p, const int32_t* tbl, int key) {
    const int pg = p.bt_div.div(key);
    return tbl[pg] * p.block_tokens + (key - pg * p.block_tokens);
}

// One rows-kernel CTA's work: row i, query heads kvh * group + g0 .. + R - 1, keys [c0, c1).
struct RowTask {
    int i, hb, g0, R, split, kvh, n_active, c0, c1;
    const int32_t* tbl;
};

// Fills t; false when the CTA has nothing to do (the same in every thread). A padding row's
// split-0 CTA writes its zeros first.
__device__ __forceinline__ bool row_task(const PagedParams& p, RowTask& t) {
    t.i = blockIdx.x / p.nzh;
    t.hb = blockIdx.x - t.i * p.nzh;
    t.split = blockIdx.y;
    t.kvh = blockIdx.z;
    if (p.tiles && tile_uniform(p, t.i / kPagedTileRows)) return false;  // the tile kernel's row
    t.g0 = t.hb * p.rows_cta;
    t.R = min(p.rows_cta, p.group - t.g0);
    const int64_t pos = p.row_pos[t.i];
    int64_t hi = pos + 1;
    if (hi > p.key_cap) hi = p.key_cap;
    int64_t lo = p.window > 0 ? pos - p.window + 1 : 0;
    if (lo < 0) lo = 0;
    const int64_t len = hi - lo;
    if (len <= 0) {  // padding row: zeros, nothing read
        if (t.split == 0) {
            float* o = p.out + (static_cast<size_t>(t.i) * p.n_head + t.kvh * p.group + t.g0) * p.head_dim;
            for (int e = threadIdx.x; e < t.R * p.head_dim; e += kThreads) o[e] = 0.0f;
        }
        return false;
    }
    int64_t chunk = (len + p.n_splits - 1) / p.n_splits;
    if (chunk < kMinChunk) chunk = kMinChunk;
    chunk = (chunk + kMinChunk - 1) / kMinChunk * kMinChunk;
    t.n_active = static_cast<int>((len + chunk - 1) / chunk);
    if (t.split >= t.n_active) return false;
    const int64_t c0 = lo + t.split * chunk;
    t.c0 = static_cast<int>(c0);
    t.c1 = static_cast<int>(c0 + chunk < hi ? c0 + chunk : hi);
    t.tbl = p.tables + static_cast<size_t>(p.row_table[t.i]) * p.max_blocks;
    return true;
}

// The end of a rows-kernel CTA: the warps' state (red [kWarps][RB][HDS] unnormalised acc, wm / wl
// running max / sum per warp and row) is merged; with one active split the CTA writes out, else its
// partial, and the last arrival combines (attention_stream.cu's scheme and memory ordering: every
// thread fences after writing its partials, thread 0 counts the CTA in with a device-scope atomic,
// the last arrival fences again, reads the partials with ld.global.cg and resets the counter).
template <int RB, int HDS>
__device__ __forceinline__ void finish_row(const PagedParams& p, const RowTask& t, float* red,
                                           float (&wm)[kWarps][RB], float (&wl)[kWarps][RB], float* st_m,
                                           float* st_l, int* s_last) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hd = p.head_dim, R = t.R;
    const bool direct = t.n_active == 1;
    const size_t split_slots = static_cast<size_t>(p.n_rows) * p.n_head;
    const size_t row0 = static_cast<size_t>(t.i) * p.n_head + t.kvh * p.group + t.g0;  // (i, head) row
    for (int e = tid; e < R * hd; e += kThreads) {
        const int r = e / hd, d = e - r * hd;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wm[w][r]);
        const float Mu = M == -INFINITY ? 0.0f : M;
        float s = 0.0f, l = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const float f = wm[w][r] == -INFINITY ? 0.0f : expf(wm[w][r] - Mu);
            s = fmaf(f, red[(w * RB + r) * HDS + d], s);
            l = fmaf(f, wl[w][r], l);
        }
        if (direct) {
            p.out[(row0 + r) * hd + d] = s / l;
        } else {
            const size_t slot = static_cast<size_t>(t.split) * split_slots + row0 + r;
            p.acc[slot * hd + d] = s;
            if (d == 0) p.ml[slot] = make_float2(M, l);
        }
    }
    if (direct) return;

    const auto arrive = [&](int* ctr, int expected) {
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            const int prev = atomicAdd(ctr, 1);
            *s_last = prev == expected - 1;
            if (*s_last) *ctr = 0;  // every CTA counted here has arrived
        }
        __syncthreads();
        const bool last = *s_last != 0;
        if (last) __threadfence();  // acquire side
        return last;
    };
    // Combines partial slots [s0, s0 + n) of (ml, acc) for the CTA's R rows: M = max m_s,
    // L = sum_s exp(m_s - M) l_s, A = sum_s exp(m_s - M) acc_s; writes out = A / L (dml null) or the
    // partial (M, L), A into slot dst of (dml, dacc).
    const auto combine = [&](const float2* ml, const float* acc_in, int s0, int n, float2* dml, float* dacc,
                             int dst) {
        for (int r = warp; r < R; r += kWarps) {
            float mm = -INFINITY;
            for (int s = lane; s < n; s += 32)
                mm = fmaxf(mm, __ldcg(&ml[static_cast<size_t>(s0 + s) * split_slots + row0 + r]).x);
            mm = attn::warp_max(mm);
            float l = 0.0f;
            for (int s = lane; s < n; s += 32) {
                const float2 v = __ldcg(&ml[static_cast<size_t>(s0 + s) * split_slots + row0 + r]);
                if (v.x != -INFINITY) l += v.y * expf(v.x - mm);
            }
            l = attn::warp_sum(l);
            if (lane == 0) {
                st_m[r] = mm;
                st_l[r] = l;
            }
        }
        __syncthreads();
        // sum_s exp(m_s - M) acc_s per element, J threads splitting the splits (red holds
        // kWarps * RB * HDS floats).
        const int units = R * hd;
        int J = 1;
        while (J < 16 && units * J * 2 <= kWarps * RB * HDS) J *= 2;
        for (int idx = tid; idx < units * J; idx += kThreads) {
            const int u = idx % units, sl = idx / units;
            const int r = u / hd, d = u - r * hd;
            const float M = st_m[r];
            float a = 0.0f;
            for (int s = sl; s < n; s += J) {
                const size_t slot = static_cast<size_t>(s0 + s) * split_slots + row0 + r;
                const float2 v = __ldcg(&ml[slot]);
                const float w = v.x == -INFINITY ? 0.0f : expf(v.x - M);
                a = fmaf(w, __ldcg(acc_in + slot * hd + d), a);
            }
            red[idx] = a;
        }
        __syncthreads();
        for (int u = tid; u < units; u += kThreads) {
            float a = red[u];
            for (int sl = 1; sl < J; ++sl) a += red[sl * units + u];
            const int r = u / hd, d = u - r * hd;
            if (dml) {  // a partial of the next level (unnormalised, as the splits' own)
                const size_t slot = static_cast<size_t>(dst) * split_slots + row0 + r;
                dacc[slot * hd + d] = a;
                if (d == 0) dml[slot] = make_float2(st_m[r], st_l[r]);
            } else {
                p.out[(row0 + r) * hd + d] = a / st_l[r];
            }
        }
    };

    const size_t triple = (static_cast<size_t>(t.i) * p.n_kv_head + t.kvh) * p.nzh + t.hb;
    int* const top = p.counters + triple;
    if (t.n_active > kCombineDirect) {
        const int G = attn::combine_group_size(t.n_active), n_grp = (t.n_active + G - 1) / G;
        const int grp = t.split / G, g_n = min(G, t.n_active - grp * G);
        if (!arrive(p.group_counters + triple * kCombineGroups + grp, g_n)) return;
        combine(p.ml, p.acc, grp * G, g_n, p.group_ml, p.group_acc, grp);
        if (!arrive(top, n_grp)) return;
        combine(p.group_ml, p.group_acc, 0, n_grp, nullptr, nullptr, 0);
    } else {
        if (!arrive(top, t.n_active)) return;
        combine(p.ml, p.acc, 0, t.n_active, nullptr, nullptr, 0);
    }
}

// ---- rows kernel, vectorised -------------------------------------------------------------------

template <typename KV>
struct Chunk;  // one 16-byte unit of a K/V row as fp32
template <>
struct Chunk<__half> {
    static constexpr int n = 8;
    __device__ static __forceinline__ void cvt(const uint4& u, float (&o)[8]) {
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
            o[2 * i] = f.x;
            o[2 * i + 1] = f.y;
        }
    }
};
template <>
struct Chunk<float> {
    static constexpr int n = 4;
    __device__ static __forceinline__ void cvt(const uint4& u, float (&o)[4]) {
        o[0] = __uint_as_float(u.x);
        o[1] = __uint_as_float(u.y);
        o[2] = __uint_as_float(u.z);
        o[3] = __uint_as_float(u.w);
    }
};

template <typename KV, int HD, int RB>
__global__ void __launch_bounds__(kThreads, RB <= 4 ? 3 : 2) paged_rows_fast(const PagedParams p) {
    constexpr int ES = sizeof(KV);
    constexpr int EPC = Chunk<KV>::n;      // elements per 16-byte chunk
    constexpr int NCH = HD / EPC;          // chunks per key row
    constexpr int KPI = 4096 / (HD * ES);  // keys per warp block: 4 KiB of K + 4 KiB of V
    constexpr int KS = KPI / 8;            // K slots per lane (8 keys per load instruction)
    constexpr int KC = NCH / 4;            // chunks per lane per key (4 lanes per key)
    constexpr int LPV = NCH;               // V layout: lanes per key
    constexpr int KPV = 32 / LPV;          // keys per V load instruction
    constexpr int VS = KPI / KPV;          // V loads per lane
    static_assert(KS >= 1 && KS * KC == 8 && LPV <= 32 && VS == 8 && 8 % KPV == 0 && KPI <= 32,
                  "8 + 8 loads of 16 bytes per lane, a block's keys fit one warp");

    __shared__ __align__(16) float qs[RB * HD];            // query rows, fp32
    __shared__ __align__(16) float red[kWarps * RB * HD];  // per-warp acc, then combine buffer
    __shared__ float wm[kWarps][RB], wl[kWarps][RB];       // per-warp running max / sum
    __shared__ float st_m[RB], st_l[RB];
    __shared__ int s_last;

    pdl_wait();  // q, row data, tables and the pools come from earlier kernels
    RowTask t;
    if (!row_task(p, t)) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int ksub = lane & 3, kkey = lane >> 2;                  // K layout
    const int vch = lane % LPV, vkey = lane / LPV;                // V layout
    const size_t kv_row = static_cast<size_t>(p.n_kv_head) * HD;  // elements between pool rows
    const KV* kbase = static_cast<const KV*>(p.k) + static_cast<size_t>(t.kvh) * HD;
    const KV* vbase = static_cast<const KV*>(p.v) + static_cast<size_t>(t.kvh) * HD;
    const int c0 = t.c0, klast = t.c1 - 1;
    const int n_blocks = (t.c1 - c0 + KPI - 1) / KPI;
    // Lane j < KPI: the pool slot of key j of block b (keys clamped into the range, so every slot
    // is a row of this sequence).
    const auto lane_slot = [&](int b) { return key_slot(p, t.tbl, min(c0 + b * KPI + lane, klast)); };
    // L2 prefetch of the block whose lane slots are `sl` (read later with ld.global.cg).
    const auto prefetch = [&](int sl) {
#pragma unroll
        for (int s = 0; s < KS; ++s) {
            const int slot = __shfl_sync(0xffffffffu, sl, s * 8 + kkey);
#pragma unroll
            for (int c = 0; c < KC; ++c)
                prefetch_l2(kbase + static_cast<size_t>(slot) * kv_row + (ksub + 4 * c) * EPC);
        }
#pragma unroll
        for (int v = 0; v < VS; ++v) {
            const int slot = __shfl_sync(0xffffffffu, sl, v * KPV + vkey);
            prefetch_l2(vbase + static_cast<size_t>(slot) * kv_row + vch * EPC);
        }
    };
    int cur = 0;
    if (warp < n_blocks) {  // warp-uniform
        cur = lane_slot(warp);
        prefetch(cur);
    }

    for (int i = tid; i < RB * HD; i += kThreads) {
        const int r = i / HD, d = i - r * HD;
        float x = 0.0f;
        if (r < t.R)
            x = __ldcg(p.q + t.i * p.q_stride + static_cast<int64_t>(t.kvh * p.group + t.g0 + r) * HD + d);
        qs[i] = x;
    }
    __syncthreads();

    const float scale = p.scale;
    float m[RB], lsum[RB], acc[RB][EPC];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        m[r] = -INFINITY;
        lsum[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPC; ++e) acc[r][e] = 0.0f;
    }

    for (int b = warp; b < n_blocks; b += kWarps) {
        const int k0 = c0 + b * KPI;
        uint4 kr[KS][KC], vr[VS];
#pragma unroll
        for (int s = 0; s < KS; ++s) {
            const int slot = __shfl_sync(0xffffffffu, cur, s * 8 + kkey);
            const uint4* src = reinterpret_cast<const uint4*>(kbase + static_cast<size_t>(slot) * kv_row);
#pragma unroll
            for (int c = 0; c < KC; ++c) kr[s][c] = __ldcg(src + ksub + 4 * c);
        }
#pragma unroll
        for (int v = 0; v < VS; ++v) {
            const int slot = __shfl_sync(0xffffffffu, cur, v * KPV + vkey);
            vr[v] = __ldcg(reinterpret_cast<const uint4*>(vbase + static_cast<size_t>(slot) * kv_row) + vch);
        }
        const bool more = b + kWarps < n_blocks;  // warp-uniform
        const int nxt = more ? lane_slot(b + kWarps) : 0;
        if (more) prefetch(nxt);

        // Scores: lane (kkey, ksub) dots its chunks ksub + 4c of key k0 + 8s + kkey.
        float sc[KS][RB];
#pragma unroll
        for (int s = 0; s < KS; ++s)
#pragma unroll
            for (int r = 0; r < RB; ++r) sc[s][r] = 0.0f;
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            float kf[KS][EPC];
#pragma unroll
            for (int s = 0; s < KS; ++s) Chunk<KV>::cvt(kr[s][c], kf[s]);
            const int d0 = (ksub + 4 * c) * EPC;
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                float qf[EPC];
#pragma unroll
                for (int e = 0; e < EPC; e += 4) {
                    const float4 q4 = *reinterpret_cast<const float4*>(qs + r * HD + d0 + e);
                    qf[e] = q4.x, qf[e + 1] = q4.y, qf[e + 2] = q4.z, qf[e + 3] = q4.w;
                }
#pragma unroll
                for (int s = 0; s < KS; ++s)
#pragma unroll
                    for (int e = 0; e < EPC; ++e) sc[s][r] = fmaf(qf[e], kf[s][e], sc[s][r]);
            }
        }
#pragma unroll
        for (int s = 0; s < KS; ++s)
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                sc[s][r] += __shfl_xor_sync(0xffffffffu, sc[s][r], 1);
                sc[s][r] += __shfl_xor_sync(0xffffffffu, sc[s][r], 2);
            }

            // Online softmax per row; sc becomes p (0 for keys past the range).
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            bool ok[KS];
            float bm = -INFINITY;
#pragma unroll
            for (int s = 0; s < KS; ++s) {
                ok[s] = k0 + s * 8 + kkey <= klast;
                sc[s][r] *= scale;
                if (ok[s]) bm = fmaxf(bm, sc[s][r]);
            }
            bm = attn::warp_max(bm);
            const float m_new = fmaxf(m[r], bm);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = expf(m[r] - m_use);  // m = -inf -> 0
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
            for (int e = 0; e < EPC; ++e) acc[r][e] *= alpha;
        }

        // P.V: lane (vkey, vch) adds p(key v * KPV + vkey) * V[key][vch * EPC .. + EPC]; the p of
        // block key j lives in sc[j / 8] of lanes (j % 8) * 4 + ksub.
#pragma unroll
        for (int v = 0; v < VS; ++v) {
            constexpr int kpv = KPV;
            const int sidx = (v * kpv) / 8;  // compile-time after unrolling
            const int src = ((v * kpv + vkey) & 7) * 4;
            float vf[EPC];
            Chunk<KV>::cvt(vr[v], vf);
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                const float pj = __shfl_sync(0xffffffffu, sc[sidx][r], src);
#pragma unroll
                for (int e = 0; e < EPC; ++e) acc[r][e] = fmaf(pj, vf[e], acc[r][e]);
            }
        }
        cur = nxt;
    }
    pdl_trigger();  // every input of this CTA has been read

    // Warp totals: lanes sharing vch hold partial sums over their keys.
#pragma unroll
    for (int r = 0; r < RB; ++r) {
#pragma unroll
        for (int o = LPV; o < 32; o <<= 1)
#pragma unroll
            for (int e = 0; e < EPC; ++e) acc[r][e] += __shfl_xor_sync(0xffffffffu, acc[r][e], o);
        lsum[r] = attn::warp_sum(lsum[r]);
        if (lane < LPV) {
            float4* dst = reinterpret_cast<float4*>(red + (warp * RB + r) * HD + vch * EPC);
#pragma unroll
            for (int e = 0; e < EPC; e += 4)
                dst[e / 4] = make_float4(acc[r][e], acc[r][e + 1], acc[r][e + 2], acc[r][e + 3]);
        }
        if (lane == 0) {
            wm[warp][r] = m[r];
            wl[warp][r] = lsum[r];
        }
    }
    __syncthreads();
    finish_row<RB, HD>(p, t, red, wm, wl, st_m, st_l, &s_last);
}

// ---- rows kernel, generic ----------------------------------------------------------------------

__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(float x) { return x; }

// Any head_dim <= HDM (128 or 256). Warp w takes keys c0 + 32 w + 128 k ..: lane = key for the
// scores (a dot over head_dim from the key's row), lane = dims lane, lane + 32, .. for P.V.
template <typename KV, int HDM, int RB>
__global__ void __launch_bounds__(kThreads) paged_rows_generic(const PagedParams p) {
    constexpr int DPL = HDM / 32;  // dims per lane in P.V
    __shared__ float qs[RB * HDM];
    __shared__ float red[kWarps * RB * HDM];
    __shared__ float wm[kWarps][RB], wl[kWarps][RB];
    __shared__ float st_m[RB], st_l[RB];
    __shared__ int s_last;

    pdl_wait();
    RowTask t;
    if (!row_task(p, t)) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hd = p.head_dim;
    for (int i = tid; i < RB * HDM; i += kThreads) {
        const int r = i / HDM, d = i - r * HDM;
        float x = 0.0f;
        if (r < t.R && d < hd)
            x = p.q[t.i * p.q_stride + static_cast<int64_t>(t.kvh * p.group + t.g0 + r) * hd + d];
        qs[i] = x;
    }
    __syncthreads();

    const size_t kv_row = static_cast<size_t>(p.n_kv_head) * hd;
    const KV* kbase = static_cast<const KV*>(p.k) + static_cast<size_t>(t.kvh) * hd;
    const KV* vbase = static_cast<const KV*>(p.v) + static_cast<size_t>(t.kvh) * hd;
    const float scale = p.scale;
    float m[RB], lsum[RB], acc[RB][DPL];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        m[r] = -INFINITY;
        lsum[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < DPL; ++e) acc[r][e] = 0.0f;
    }
    for (int k0 = t.c0 + warp * 32; k0 < t.c1; k0 += kWarps * 32) {  // warp-uniform
        const int key = k0 + lane;
        const bool ok = key < t.c1;
        const int slot = key_slot(p, t.tbl, ok ? key : t.c1 - 1);
        const KV* kr = kbase + static_cast<size_t>(slot) * kv_row;
        float s[RB];
#pragma unroll
        for (int r = 0; r < RB; ++r) s[r] = 0.0f;
        for (int d = 0; d < hd; ++d) {
            const float kd = to_f32(kr[d]);
#pragma unroll
            for (int r = 0; r < RB; ++r) s[r] = fmaf(qs[r * HDM + d], kd, s[r]);
        }
        float pr[RB];
#pragma unroll
        for (int r = 0; r < RB; ++r) {
            s[r] *= scale;
            const float bm = attn::warp_max(ok ? s[r] : -INFINITY);
            const float m_new = fmaxf(m[r], bm);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = expf(m[r] - m_use);
            m[r] = m_new;
            pr[r] = ok ? expf(s[r] - m_use) : 0.0f;
            lsum[r] = lsum[r] * alpha + pr[r];
#pragma unroll
            for (int e = 0; e < DPL; ++e) acc[r][e] *= alpha;
        }
        const int nk = min(32, t.c1 - k0);  // warp-uniform
        for (int j = 0; j < nk; ++j) {
            const int vs = __shfl_sync(0xffffffffu, slot, j);
            const KV* vr = vbase + static_cast<size_t>(vs) * kv_row;
            float pj[RB];
#pragma unroll
            for (int r = 0; r < RB; ++r) pj[r] = __shfl_sync(0xffffffffu, pr[r], j);
#pragma unroll
            for (int e = 0; e < DPL; ++e) {
                const int d = lane + 32 * e;
                if (d < hd) {
                    const float vd = to_f32(vr[d]);
#pragma unroll
                    for (int r = 0; r < RB; ++r) acc[r][e] = fmaf(pj[r], vd, acc[r][e]);
                }
            }
        }
    }
    pdl_trigger();

#pragma unroll
    for (int r = 0; r < RB; ++r) {
        lsum[r] = attn::warp_sum(lsum[r]);
#pragma unroll
        for (int e = 0; e < DPL; ++e) {
            const int d = lane + 32 * e;
            if (d < hd) red[(warp * RB + r) * HDM + d] = acc[r][e];
        }
        if (lane == 0) {
            wm[warp][r] = m[r];
            wl[warp][r] = lsum[r];
        }
    }
    __syncthreads();
    finish_row<RB, HDM>(p, t, red, wm, wl, st_m, st_l, &s_last);
}

// ---- tile kernel (tensor cores) ----------------------------------------------------------------

template <int HD>
struct TileCfg {
    static constexpr int BN = HD <= 128 ? 64 : 32;  // keys per tile
    static constexpr int ROW = HD + 8;              // halves per padded shared row
    static constexpr size_t q_bytes = static_cast<size_t>(kPagedTileRows) * ROW * 2;
    static constexpr size_t tile_bytes = static_cast<size_t>(BN) * ROW * 2;
    static constexpr size_t smem = q_bytes + 4 * tile_bytes;  // Q, K[2], V[2]
};

// attention_prefill's tensor-core kernel (see there for the fragment layout and the accuracy) on
// one uniform tile: rows row0 .. row0 + R - 1 at positions pos0 .. pos0 + R - 1 of one sequence.
template <int HD>
__global__ void __launch_bounds__(kThreads) paged_tile_kernel(const PagedParams p) {
    using C = TileCfg<HD>;
    constexpr int BN = C::BN, ROW = C::ROW, BM = kPagedTileRows;
    constexpr int KS = HD / 16;  // k-steps over the head dim
    extern __shared__ __align__(16) unsigned char smem[];
    __half* qs = reinterpret_cast<__half*>(smem);
    __half* kbuf = reinterpret_cast<__half*>(smem + C::q_bytes);
    __half* vbuf = reinterpret_cast<__half*>(smem + C::q_bytes + 2 * C::tile_bytes);

    pdl_wait();                                 // q, row data, tables and the pools come from earlier kernels
    const int qt = gridDim.x - 1 - blockIdx.x;  // later tiles (more keys) first
    if (!tile_uniform(p, qt)) return;           // the rows kernel's rows
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int gid = lane >> 2, tig = lane & 3;
    const int h = blockIdx.y, kvh = h / p.group;
    const int row0 = qt * BM, R = min(BM, p.n_rows - row0);
    const int64_t pos0 = p.row_pos[row0];
    const int32_t* tbl = p.tables + static_cast<size_t>(p.row_table[row0]) * p.max_blocks;
    int64_t hi = pos0 + R;
    if (hi > p.key_cap) hi = p.key_cap;
    int64_t lo = p.window > 0 ? pos0 - p.window + 1 : 0;
    if (lo < 0) lo = 0;
    const int n_tiles = hi > lo ? static_cast<int>((hi - lo + BN - 1) / BN) : 0;
    const size_t kv_row = static_cast<size_t>(p.n_kv_head) * HD;  // halves between pool rows
    const __half* kpool = static_cast<const __half*>(p.k) + static_cast<size_t>(kvh) * HD;
    const __half* vpool = static_cast<const __half*>(p.v) + static_cast<size_t>(kvh) * HD;
    const float scale_log2 = p.scale * 1.4426950408889634f;

    auto load_tile = [&](int tile, int stage) {
        const int64_t k0 = lo + static_cast<int64_t>(tile) * BN;
        __half* ks = kbuf + stage * BN * ROW;
        __half* vs = vbuf + stage * BN * ROW;
        constexpr int per_row = HD / 8;  // 16-byte chunks
        for (int i = tid; i < BN * per_row; i += kThreads) {
            const int j = i / per_row, c = i % per_row;
            const bool ok = k0 + j < hi;
            const int slot = key_slot(p, tbl, static_cast<int>(ok ? k0 + j : lo));
            const size_t g = static_cast<size_t>(slot) * kv_row + c * 8;
            attn::cp_async<16>(ks + j * ROW + c * 8, kpool + g, ok);
            attn::cp_async<16>(vs + j * ROW + c * 8, vpool + g, ok);
        }
    };
    if (n_tiles > 0) load_tile(0, 0);
    attn::cp_async_commit();

    // Q tile -> f16 shared (rows past R are zero).
    for (int i = tid; i < BM * HD / 2; i += kThreads) {
        const int r = i / (HD / 2), c = (i % (HD / 2)) * 2;
        float2 x = make_float2(0.0f, 0.0f);
        if (r < R) {
            const float* src = p.q + (row0 + r) * p.q_stride + static_cast<int64_t>(h) * HD + c;
            x = make_float2(src[0], src[1]);
        }
        *reinterpret_cast<__half2*>(qs + r * ROW + c) = __floats2half2_rn(x.x, x.y);
    }
    __syncthreads();

    // This warp's rows: tile rows tw .. tw + 15 (lane rows gid and gid + 8), positions pos0 + row.
    const int tw = warp * 16;
    uint32_t qf[HD <= 128 ? KS : 1][4];
    if constexpr (HD <= 128) {
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            const int mat = lane >> 3;
            attn::ldmatrix_x4(qf[kk],
                              qs + (tw + (lane & 7) + (mat & 1) * 8) * ROW + kk * 16 + (mat >> 1) * 8);
        }
    }
    float o[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    const int64_t pos_r[2] = {pos0 + tw + gid, pos0 + tw + gid + 8};

    for (int it = 0; it < n_tiles; ++it) {
        if (it + 1 < n_tiles) load_tile(it + 1, (it + 1) & 1);
        attn::cp_async_commit();
        attn::cp_async_wait<1>();
        __syncthreads();
        const int stage = it & 1;
        const __half* ks = kbuf + stage * BN * ROW;
        const __half* vs = vbuf + stage * BN * ROW;
        const int64_t kb = lo + static_cast<int64_t>(it) * BN;
        // Skip tiles this warp cannot see (all keys after its last row, or all before its window)
        // and warps without rows.
        const bool after = kb > pos0 + tw + 15;
        const bool before = p.window > 0 && kb + BN - 1 < pos0 + tw - p.window + 1;
        if (!after && !before && tw < R) {
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
                    attn::ldmatrix_x4(
                        a, qs + (tw + (lane & 7) + (mat & 1) * 8) * ROW + kk * 16 + (mat >> 1) * 8);
                }
#pragma unroll
                for (int nn = 0; nn < BN / 16; ++nn) {
                    uint32_t b[4];
                    const int mat = lane >> 3;
                    attn::ldmatrix_x4(
                        b, ks + (nn * 16 + (lane & 7) + (mat >> 1) * 8) * ROW + kk * 16 + (mat & 1) * 8);
                    attn::mma_16816(s[2 * nn], a, b[0], b[1]);
                    attn::mma_16816(s[2 * nn + 1], a, b[2], b[3]);
                }
            }
            // Mask only where needed: the tile reaches past the warp's first row, the end of the
            // keys, or the window of its last row.
            const bool need_mask = kb + BN - 1 > pos0 + tw || kb + BN > hi ||
                                   (p.window > 0 && kb < pos0 + tw + 15 - p.window + 1);
#pragma unroll
            for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = s[n][e] * scale_log2;
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
                const uint32_t a[4] = {attn::pack_half2(s[2 * kk][0], s[2 * kk][1]),
                                       attn::pack_half2(s[2 * kk][2], s[2 * kk][3]),
                                       attn::pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                       attn::pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int nn = 0; nn < HD / 16; ++nn) {
                    uint32_t b[4];
                    const int mat = lane >> 3;
                    attn::ldmatrix_x4_trans(
                        b, vs + (kk * 16 + (lane & 7) + (mat & 1) * 8) * ROW + nn * 16 + (mat >> 1) * 8);
                    attn::mma_16816(o[2 * nn], a, b[0], b[1]);
                    attn::mma_16816(o[2 * nn + 1], a, b[2], b[3]);
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
        const int r = tw + gid + rh * 8;
        if (r >= R) continue;
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float* dst = p.out + (static_cast<size_t>(row0 + r) * p.n_head + h) * HD + 2 * tig;
#pragma unroll
        for (int n = 0; n < HD / 8; ++n)
            *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][2 * rh] * inv, o[n][2 * rh + 1] * inv);
    }
}

// ---- host --------------------------------------------------------------------------------------

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "pelican: attention_paged: %s\n", what);
    std::abort();
}

int sm_count() {
    static int cached[64] = {};
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 64 && cached[dev]) return cached[dev];
    int n = 0;
    PELICAN_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev < 64) cached[dev] = n;
    return n;
}

// Head blocks per (row, kv head) and query heads per block (none empty: 10 heads -> 2 x 5).
int head_blocks(int group, int* rows_cta) {
    const int nz = static_cast<int>(ceil_div(group, kMaxRowsCta));
    *rows_cta = static_cast<int>(ceil_div(group, nz));
    return static_cast<int>(ceil_div(group, *rows_cta));
}

// Splits of one launch: one wave of `wave` CTAs over the (row, kv head, head block) triples.
int paged_splits(int64_t n_rows, int n_kv_head, int nzh, int64_t max_kv, int64_t wave) {
    if (wave > kMaxSplitPairs) wave = kMaxSplitPairs;
    const int64_t triples = n_rows * n_kv_head * nzh;
    if (triples >= wave) return 1;
    int64_t s = ceil_div(wave, triples);
    const int64_t by_len = ceil_div(max_kv > 0 ? max_kv : 1, kMinChunk);
    if (s > by_len) s = by_len;
    if (s > kMaxSplits) s = kMaxSplits;
    return static_cast<int>(s < 1 ? 1 : s);
}

size_t counter_bytes() {
    return align256(static_cast<size_t>(kMaxSplitPairs) * (1 + kCombineGroups) * sizeof(int32_t));
}

// Partial bytes of a launch with n_splits > 1 (after the counters): [ml: slots float2] [acc: slots
// x head_dim fp32] and with more than kCombineDirect splits [group ml] [group acc], each padded to
// 256 bytes.
size_t partial_bytes(int n_splits, int64_t n_rows, int n_head, int head_dim) {
    const size_t split_slots = static_cast<size_t>(n_rows) * n_head;
    const size_t slots = static_cast<size_t>(n_splits) * split_slots;
    size_t b = align256(slots * sizeof(float2)) + align256(slots * head_dim * sizeof(float));
    if (n_splits > kCombineDirect) {
        const size_t g = static_cast<size_t>(kCombineGroups) * split_slots;
        b += align256(g * sizeof(float2)) + align256(g * head_dim * sizeof(float));
    }
    return b;
}

using RowsKernel = void (*)(PagedParams);
struct RowsPick {
    RowsKernel fn;
    int occupancy;  // resident CTAs per SM
};

template <typename KV, int HD, int RB, bool FAST>
RowsPick pick_rows() {
    RowsKernel fn;
    if constexpr (FAST)
        fn = paged_rows_fast<KV, HD, RB>;
    else
        fn = paged_rows_generic<KV, HD, RB>;
    static int cached[32] = {};
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 32 && cached[dev]) return {fn, cached[dev]};
    int n = 0;
    PELICAN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, kThreads, 0));
    if (n < 1) n = 1;
    if (dev < 32) cached[dev] = n;
    return {fn, n};
}

template <typename KV, int HD>
RowsPick pick_fast(int rows_cta) {
    if (rows_cta <= 1) return pick_rows<KV, HD, 1, true>();
    if (rows_cta <= 2) return pick_rows<KV, HD, 2, true>();
    if (rows_cta <= 4) return pick_rows<KV, HD, 4, true>();
    return pick_rows<KV, HD, 8, true>();
}

template <typename KV, int HDM>
RowsPick pick_generic(int rows_cta) {
    if (rows_cta <= 1) return pick_rows<KV, HDM, 1, false>();
    if (rows_cta <= 4) return pick_rows<KV, HDM, 4, false>();
    return pick_rows<KV, HDM, 8, false>();
}

RowsPick pick(DType type, int hd, bool aligned, int rows_cta) {
    const bool f16 = type == DType::F16;
    if (aligned && f16) {
        if (hd == 64) return pick_fast<__half, 64>(rows_cta);
        if (hd == 128) return pick_fast<__half, 128>(rows_cta);
        if (hd == 256) return pick_fast<__half, 256>(rows_cta);
    }
    if (aligned && !f16) {
        if (hd == 64) return pick_fast<float, 64>(rows_cta);
        if (hd == 128) return pick_fast<float, 128>(rows_cta);
    }
    if (hd <= 128) return f16 ? pick_generic<__half, 128>(rows_cta) : pick_generic<float, 128>(rows_cta);
    return f16 ? pick_generic<__half, 256>(rows_cta) : pick_generic<float, 256>(rows_cta);
}

template <int HD>
void launch_tile(const PagedParams& p, cudaStream_t stream) {
    static unsigned configured = 0;  // bit per device id (< 32)
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 32 || !(__atomic_load_n(&configured, __ATOMIC_ACQUIRE) & (1u << dev))) {
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(paged_tile_kernel<HD>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(TileCfg<HD>::smem)));
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(paged_tile_kernel<HD>,
                                                cudaFuncAttributePreferredSharedMemoryCarveout,
                                                cudaSharedmemCarveoutMaxShared));
        if (dev < 32) __atomic_fetch_or(&configured, 1u << dev, __ATOMIC_RELEASE);
    }
    const dim3 grid(static_cast<unsigned>(ceil_div(p.n_rows, kPagedTileRows)),
                    static_cast<unsigned>(p.n_head));
    launch_pdl(paged_tile_kernel<HD>, grid, dim3(kThreads), TileCfg<HD>::smem, stream, p);
}

bool aligned16(const void* x) { return reinterpret_cast<uintptr_t>(x) % 16 == 0; }

}  // namespace

size_t paged_attention_workspace_counters() {
    return static_cast<size_t>(kMaxSplitPairs) * (1 + kCombineGroups);
}

size_t paged_attention_workspace_bytes(int max_rows, int n_head, int n_kv_head, int head_dim,
                                       int64_t max_kv) {
    if (n_head < 1 || n_kv_head < 1 || n_head % n_kv_head != 0)
        fail("n_head must be a positive multiple of n_kv_head");
    if (head_dim < 1 || head_dim > kPagedMaxHeadDim) fail("head_dim must be 1..256");
    int rows_cta = 0;
    const int nzh = head_blocks(n_head / n_kv_head, &rows_cta);
    size_t most = 0;
    // Any device's launch splits at most as much as a wave of kMaxSplitPairs CTAs would.
    for (int64_t n = 1; n <= max_rows; ++n) {
        const int s = paged_splits(n, n_kv_head, nzh, max_kv, kMaxSplitPairs);
        if (s == 1) break;  // and for every larger n
        const size_t b = partial_bytes(s, n, n_head, head_dim);
        if (b > most) most = b;
    }
    return counter_bytes() + most;
}

void attention_paged(const PagedAttnArgs& a, cudaStream_t stream) {
    if (a.n_rows < 0) fail("n_rows must be >= 0");
    if (a.n_rows == 0) return;
    if (a.n_head < 1 || a.n_kv_head < 1 || a.n_head % a.n_kv_head != 0)
        fail("n_head must be a positive multiple of n_kv_head");
    if (a.n_kv_head > 65535 || a.n_head > 65535) fail("at most 65535 heads");
    if (a.head_dim < 1 || a.head_dim > kPagedMaxHeadDim) fail("head_dim must be 1..256");
    if (a.type != DType::F16 && a.type != DType::F32) fail("KV pool must be F16 or F32");
    if (!a.q || !a.out || !a.row_pos || !a.row_table || !a.tables || !a.k_pool || !a.v_pool)
        fail("q, out, row_pos, row_table, tables, k_pool and v_pool are required");
    if (a.max_blocks < 1 || a.block_tokens < 1) fail("max_blocks and block_tokens must be >= 1");
    const int hd = a.head_dim;
    const int64_t row_floats = static_cast<int64_t>(a.n_head) * hd;
    const int64_t q_stride = a.q_stride ? a.q_stride : row_floats;
    if (q_stride < row_floats) fail("q_stride must be >= n_head * head_dim");
    const int group = a.n_head / a.n_kv_head;
    int rows_cta = 0;
    const int nzh = head_blocks(group, &rows_cta);
    if (static_cast<int64_t>(a.n_rows) * nzh > INT32_MAX) fail("too many rows for one launch");

    const bool aligned = aligned16(a.k_pool) && aligned16(a.v_pool);
    const bool tc = a.type == DType::F16 && (hd == 64 || hd == 128 || hd == 256) && aligned &&
                    reinterpret_cast<uintptr_t>(a.out) % 8 == 0;
    const int seq_rows = a.max_seq_rows > 0 ? a.max_seq_rows : a.n_rows;

    PagedParams p{};
    p.q = a.q;
    p.q_stride = q_stride;
    p.n_rows = a.n_rows;
    p.n_head = a.n_head;
    p.n_kv_head = a.n_kv_head;
    p.head_dim = hd;
    p.group = group;
    p.scale = a.scale;
    p.window = a.window;
    p.row_pos = a.row_pos;
    p.row_table = a.row_table;
    p.tables = a.tables;
    p.max_blocks = a.max_blocks;
    p.block_tokens = a.block_tokens;
    p.bt_div = FastDiv(static_cast<uint32_t>(a.block_tokens));
    // Keys stay below 2^31 - 4096 so that key + a block's lanes never overflow.
    const int64_t cap = static_cast<int64_t>(a.max_blocks) * a.block_tokens;
    p.key_cap = static_cast<int>(cap < INT32_MAX - 4096 ? cap : INT32_MAX - 4096);
    p.k = a.k_pool;
    p.v = a.v_pool;
    p.out = a.out;
    p.rows_cta = rows_cta;
    p.nzh = nzh;
    p.tiles = tc && a.n_rows >= kPagedTileMinRows && seq_rows >= kPagedTileMinRows;

    const RowsPick rk = pick(a.type, hd, aligned, rows_cta);
    p.n_splits =
        paged_splits(a.n_rows, a.n_kv_head, nzh, a.max_kv, static_cast<int64_t>(rk.occupancy) * sm_count());
    if (p.n_splits > 1) {
        const size_t need = counter_bytes() + partial_bytes(p.n_splits, a.n_rows, a.n_head, hd);
        if (!a.workspace || a.workspace_bytes < need)
            fail("workspace missing or smaller than paged_attention_workspace_bytes(n_rows, ...)");
        if (!aligned16(a.workspace)) fail("workspace must be 16-byte aligned");
        const size_t split_slots = static_cast<size_t>(a.n_rows) * a.n_head;
        const size_t slots = static_cast<size_t>(p.n_splits) * split_slots;
        auto* base = static_cast<unsigned char*>(a.workspace);
        p.counters = reinterpret_cast<int*>(base);
        p.group_counters = p.counters + kMaxSplitPairs;
        base += counter_bytes();
        p.ml = reinterpret_cast<float2*>(base);
        base += align256(slots * sizeof(float2));
        p.acc = reinterpret_cast<float*>(base);
        base += align256(slots * hd * sizeof(float));
        if (p.n_splits > kCombineDirect) {
            const size_t g = static_cast<size_t>(kCombineGroups) * split_slots;
            p.group_ml = reinterpret_cast<float2*>(base);
            base += align256(g * sizeof(float2));
            p.group_acc = reinterpret_cast<float*>(base);
        }
    }

    if (p.tiles) {
        if (hd == 64)
            launch_tile<64>(p, stream);
        else if (hd == 128)
            launch_tile<128>(p, stream);
        else
            launch_tile<256>(p, stream);
    }
    const dim3 grid(static_cast<unsigned>(a.n_rows * nzh), static_cast<unsigned>(p.n_splits),
                    static_cast<unsigned>(a.n_kv_head));
    launch_pdl(rk.fn, grid, dim3(kThreads), 0, stream, p);
}

}  // namespace pelican::cuda
