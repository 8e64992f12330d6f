// GPU token sampling with runtime/sampler.cpp's semantics: the batched stage (sampling_batch.h) and
// the one-row call of sampling.h, which is its n_rows = 1 case with the row's parameters as a kernel
// argument and the uniform read from the device word the host staged.
//
// Kernels per call (all on `stream`, grids from n_rows and n_vocab only, no allocation, no sync):
//   prep    (n_rows CTAs): zero the row's histogram and candidate count. Penalties: count the
//           window in an open-addressing hash table in the workspace (2 slots per id of the
//           window, so it never fills), then apply repetition / frequency / presence once per
//           distinct id, in sampler.cpp's fp32 operation order.
//   scan    (G x n_rows CTAs): greedy rows: per-CTA best packed key. Sampling rows: logits /= T in
//           place (+inf -> FLT_MAX, as sampler.cpp), per-CTA best, histogram of the top 12 bits
//           of every finite logit's order key. With logprobs, per-CTA online (max, sum exp(l - max)).
//   filter  (G x n_rows CTAs, sampling rows): each CTA finds from the histogram the bin holding
//           the k-th largest logit and appends every finite logit of that bin or above (>= k
//           candidates, usually a few k) to the row's list of kCandCap packed keys; past the end
//           it only counts.
//   select  (n_rows CTAs of 1024 threads): greedy rows: the best of the row's partials. Sampling
//           rows: exact radix select of the k-th largest packed key over the list (over the whole
//           row when the list overflowed: many logits in one bin, e.g. thousands of equal ones),
//           gather the k winners, bitonic sort in shared memory, then softmax weights, min_p, top_p
//           and the draw with u = sample_uniform(seed, counter), exactly as sampler.cpp. The
//           logprob from the merged (max, sum).
//
// Order keys, packed candidates and the scans: sampling_device.cuh.
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling.h"
#include "backend/cuda/sampling_batch.h"
#include "backend/cuda/sampling_device.cuh"
#include "core/philox.h"

namespace pelican::cuda {
namespace {

using namespace sampling;

constexpr int kSelThreads = 1024;     // select: one sorted candidate per thread
constexpr int kMaxBlocks = 128;       // scan / filter CTAs per row
constexpr int kMinPerBlock = 2048;    // logits per scan CTA at least (a CTA flushes up to 4096 bins)
constexpr int kTargetCtas = 1024;     // scan CTAs of all rows together, when the rows are long enough
constexpr uint32_t kCandCap = 16384;  // candidate list entries per row
constexpr int32_t kNone = -1;         // runtime/sampler.h's kNoToken
static_assert(kSelThreads == kMaxGpuTopK, "select kernel holds one candidate per thread");

struct Partial {    // one scan CTA's summary of its slice of a row
    uint64_t best;  // largest packed key (0: no finite logit)
    float m, s;     // max finite logit and sum of exp(l - m) over the slice (logprobs only)
};
static_assert(sizeof(Partial) == 16, "");

// Workspace layout (byte offsets, each 256-aligned), fixed by the limits.
struct Layout {
    size_t hist, counters, partials, cands, keys, counts, total;
    int64_t table_slots;  // hash table slots: 2 per penalty id
};
constexpr size_t align256(size_t v) { return (v + 255) / 256 * 256; }
Layout layout(const SampleBatchLimits& lim) {
    Layout l{};
    const size_t rows = static_cast<size_t>(std::max(lim.max_rows, 1));
    l.table_slots = 2 * std::max<int64_t>(lim.max_penalty_ids, 0);
    const size_t slots = static_cast<size_t>(l.table_slots);
    l.hist = 0;
    l.counters = align256(l.hist + rows * kHistBins * sizeof(uint32_t));
    l.partials = align256(l.counters + rows * sizeof(uint32_t));
    l.cands = align256(l.partials + rows * kMaxBlocks * sizeof(Partial));
    l.keys = align256(l.cands + rows * kCandCap * sizeof(uint64_t));
    l.counts = align256(l.keys + slots * sizeof(int32_t));
    l.total = align256(l.counts + slots * sizeof(int32_t));
    return l;
}

// Everything a kernel of one call reads (passed by value).
struct KernelArgs {
    float* logits;          // row r at logits + r * stride
    int64_t stride, n;      // row stride and n_vocab, in floats
    const SampleRow* rows;  // [n_rows] device, or nullptr: every row is `row`
    SampleRow row;
    const int32_t*
        offsets;  // [n_rows + 1] device, or nullptr: row r's window is ids[r*dense_len, +dense_len)
    int32_t dense_len;
    const int32_t* ids;  // penalty ids, or nullptr: no windows
    const float* u;      // [n_rows] device uniforms, or nullptr: sample_uniform(seed, counter)
    int32_t* out;        // [n_rows]
    float* logprobs;     // [n_rows] or nullptr
    int blocks;          // scan / filter CTAs per row (G)
    uint32_t* hist;      // [rows, kHistBins]
    uint32_t* counters;  // [rows] candidates listed (may exceed kCandCap)
    Partial* partials;   // [rows, kMaxBlocks]
    uint64_t* cands;     // [rows, kCandCap]
    int32_t* keys;       // [table_slots] hash table ids (-1 = empty)
    int32_t* counts;     // [table_slots] occurrences
    int64_t table_slots;
};

__device__ __forceinline__ SampleRow row_params(const KernelArgs& a, int r) {
    return a.rows ? a.rows[r] : a.row;
}

// The k of a sampling row (top_k clamped to kMaxGpuTopK; off or >= n_vocab: every finite logit)
// and how its kept set is drawn (sampler.cpp walks ids in order without top_k < n_vocab and top_p).
struct RowK {
    int k;
    bool use_top_p, id_order;
};
__device__ __forceinline__ RowK row_k(const SampleRow& p, int64_t n) {
    const bool all = p.top_k <= 0 || p.top_k >= n;
    const int64_t k_req = all ? n : p.top_k;
    RowK r;
    r.k = static_cast<int>(k_req < kMaxGpuTopK ? k_req : kMaxGpuTopK);
    r.use_top_p = p.top_p < 1.0f;
    r.id_order = all && !r.use_top_p;
    return r;
}

// ---- prep: histogram reset, penalties --------------------------------------------------------------

__global__ void __launch_bounds__(kThreads) prep_kernel(const KernelArgs a) {
    const int r = blockIdx.x;
    uint32_t* hist = a.hist + static_cast<size_t>(r) * kHistBins;
    for (int b = threadIdx.x; b < kHistBins; b += blockDim.x) hist[b] = 0;
    if (threadIdx.x == 0) a.counters[r] = 0;

    const SampleRow p = row_params(a, r);
    const float rp = p.repetition_penalty, freq = p.frequency_penalty, pres = p.presence_penalty;
    if (!a.ids || (rp == 1.0f && freq == 0.0f && pres == 0.0f)) return;
    int64_t begin, end;
    if (a.offsets) {
        begin = a.offsets[r];
        end = a.offsets[r + 1];
    } else {
        begin = static_cast<int64_t>(r) * a.dense_len;
        end = begin + a.dense_len;
    }
    if (begin < 0 || end <= begin) return;
    const int64_t len = end - begin;
    // More slots than distinct ids of the vocabulary in the window: the probe always ends.
    const uint32_t cap = static_cast<uint32_t>(2 * (len < a.n ? len : a.n));
    const int64_t base = 2 * begin;
    if (base + cap > a.table_slots) return;  // the caller broke offsets[n_rows] <= max_penalty_ids
    int32_t* keys = a.keys + base;
    int32_t* counts = a.counts + base;
    const int32_t* ids = a.ids + begin;
    for (uint32_t i = threadIdx.x; i < cap; i += blockDim.x) {
        keys[i] = -1;
        counts[i] = 0;
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
        const int32_t t = ids[i];
        if (t < 0 || t >= a.n) continue;  // ids outside this vocab are ignored (sampler.cpp)
        uint32_t h =
            static_cast<uint32_t>((static_cast<uint64_t>(static_cast<uint32_t>(t)) * 2654435761u) % cap);
        for (;;) {
            const int32_t prev = atomicCAS(&keys[h], -1, t);
            if (prev == -1 || prev == t) {
                atomicAdd(&counts[h], 1);
                break;
            }
            h = h + 1 == cap ? 0 : h + 1;
        }
    }
    __syncthreads();
    float* logits = a.logits + static_cast<int64_t>(r) * a.stride;
    for (uint32_t i = threadIdx.x; i < cap; i += blockDim.x) {
        const int32_t t = __ldcg(&keys[i]);  // written by other threads' atomics (at L2)
        if (t < 0) continue;
        const int32_t c = __ldcg(&counts[i]);
        float l = logits[t];
        if (rp != 1.0f) l = l > 0.0f ? __fdiv_rn(l, rp) : __fmul_rn(l, rp);
        l = __fsub_rn(l, __fadd_rn(__fmul_rn(static_cast<float>(c), freq), pres));
        logits[t] = l;
    }
}

// ---- scan: temperature, per-CTA best and (max, sum), histogram --------------------------------------

template <bool kLogprob>
__global__ void __launch_bounds__(kThreads) scan_kernel(const KernelArgs a) {
    __shared__ uint32_t s_hist[kHistBins];
    __shared__ uint64_t s_best[kThreads / 32];
    __shared__ float s_m[kThreads / 32], s_s[kThreads / 32];
    const int r = blockIdx.y;
    const float temp = a.rows ? a.rows[r].temperature : a.row.temperature;
    const bool sample = temp != 0.0f;
    float* logits = a.logits + static_cast<int64_t>(r) * a.stride;
    if (sample)
        for (int b = threadIdx.x; b < kHistBins; b += blockDim.x) s_hist[b] = 0;
    __syncthreads();
    uint64_t best = 0;
    float m = -INFINITY, s = 0.0f;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float l = logits[i];
        if (!isfinite(l)) continue;
        if (sample) {
            l = __fdiv_rn(l, temp);
            if (l == INFINITY) l = FLT_MAX;  // tiny temperature: overflowed logits tie at the top
            logits[i] = l;
            if (!isfinite(l)) continue;  // underflowed to -inf
        }
        const uint32_t key = order_key(l);
        const uint64_t c = pack(key, i);
        best = c > best ? c : best;
        if constexpr (kLogprob) lse_add(m, s, l);
        if (sample) atomicAdd(&s_hist[key >> (32 - kHistBits)], 1u);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    best = warp_max_u64(best);
    if constexpr (kLogprob) warp_lse(m, s);
    if (lane == 0) {
        s_best[warp] = best;
        s_m[warp] = m;
        s_s[warp] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        Partial q{0, -INFINITY, 0.0f};
        for (int w = 0; w < kThreads / 32; ++w) {
            q.best = s_best[w] > q.best ? s_best[w] : q.best;
            if constexpr (kLogprob) lse_merge(q.m, q.s, s_m[w], s_s[w]);
        }
        a.partials[static_cast<size_t>(r) * kMaxBlocks + blockIdx.x] = q;
    }
    if (sample) {
        uint32_t* hist = a.hist + static_cast<size_t>(r) * kHistBins;
        for (int b = threadIdx.x; b < kHistBins; b += blockDim.x)
            if (s_hist[b]) atomicAdd(&hist[b], s_hist[b]);
    }
}

// ---- filter: candidates at or above the k-th largest logit's histogram bin ----------------------

__global__ void __launch_bounds__(kThreads) filter_kernel(const KernelArgs a) {
    const int r = blockIdx.y;
    const SampleRow p = row_params(a, r);
    if (p.temperature == 0.0f) return;
    uint32_t total;
    const uint32_t bin = threshold_bin(a.hist + static_cast<size_t>(r) * kHistBins, row_k(p, a.n).k, &total);
    if (total == 0) return;
    const float* logits = a.logits + static_cast<int64_t>(r) * a.stride;
    uint64_t* cands = a.cands + static_cast<size_t>(r) * kCandCap;
    uint32_t* counter = a.counters + r;
    const int lane = threadIdx.x % 32;
    // Whole warps iterate together so the append can use a warp-aggregated atomic.
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t base = blockIdx.x * static_cast<int64_t>(blockDim.x); base < a.n; base += stride) {
        const int64_t i = base + threadIdx.x;
        uint64_t c = 0;
        bool take = false;
        if (i < a.n) {
            const float l = logits[i];
            if (isfinite(l)) {
                const uint32_t key = order_key(l);
                take = (key >> (32 - kHistBits)) >= bin;
                c = pack(key, i);
            }
        }
        const unsigned mask = __ballot_sync(0xffffffffu, take);
        if (mask == 0) continue;
        uint32_t slot = 0;
        if (lane == __ffs(mask) - 1) slot = atomicAdd(counter, static_cast<uint32_t>(__popc(mask)));
        slot = __shfl_sync(0xffffffffu, slot, __ffs(mask) - 1);
        slot += __popc(mask & ((1u << lane) - 1u));
        if (take && slot < kCandCap) cands[slot] = c;  // past the end: counted only (select reads the row)
    }
}

// ---- select: exact top-k, sort, min_p / top_p / draw ----------------------------------------------

template <bool kLogprob>
__global__ void __launch_bounds__(kSelThreads) select_kernel(const KernelArgs a) {
    __shared__ uint64_t s_sel[kSelThreads];
    __shared__ uint32_t s_cnt[256];
    __shared__ double s_dwarp[32];
    __shared__ uint32_t s_uwarp[32];
    __shared__ uint64_t s_prefix, s_mask, s_best;
    __shared__ uint32_t s_remaining, s_done, s_nsel, s_total;
    __shared__ int s_first, s_last, s_cut;
    __shared__ float s_lmax, s_lsum;
    __shared__ double s_z, s_sum;
    const int r = blockIdx.x;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const SampleRow p = row_params(a, r);
    const float* logits = a.logits + static_cast<int64_t>(r) * a.stride;

    // The row's partials: its best packed key, and (max, sum of exp) for the logprob.
    if (warp == 0) {
        uint64_t best = 0;
        float m = -INFINITY, s = 0.0f;
        for (int j = lane; j < a.blocks; j += 32) {
            const Partial q = a.partials[static_cast<size_t>(r) * kMaxBlocks + j];
            best = q.best > best ? q.best : best;
            if constexpr (kLogprob) lse_merge(m, s, q.m, q.s);
        }
        best = warp_max_u64(best);
        if constexpr (kLogprob) warp_lse(m, s);
        if (lane == 0) {
            s_best = best;
            s_lmax = m;
            s_lsum = s;
        }
    }
    __syncthreads();
    // Thread 0 writes the row's answer: token `tok` whose (rewritten) logit is l.
    const auto finish = [&](int32_t tok, float l) {
        a.out[r] = tok;
        if constexpr (kLogprob) a.logprobs[r] = tok >= 0 ? (l - s_lmax) - logf(s_lsum) : NAN;
    };
    if (p.temperature == 0.0f) {  // greedy: the lowest id among the largest finite logits
        if (tid == 0) {
            const uint64_t b = s_best;
            finish(b ? packed_id(b) : kNone, b ? packed_logit(b) : 0.0f);
        }
        return;
    }

    // Finite logits in all (histogram total).
    {
        const uint32_t* hist = a.hist + static_cast<size_t>(r) * kHistBins;
        uint32_t v = 0;
        for (int b = tid; b < kHistBins; b += blockDim.x) v += hist[b];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) s_uwarp[warp] = v;
        __syncthreads();
        if (tid == 0) {
            uint32_t t = 0;
            for (int w = 0; w < kSelThreads / 32; ++w) t += s_uwarp[w];
            s_total = t;
        }
        __syncthreads();
    }
    const uint32_t total = s_total;
    if (total == 0) {
        if (tid == 0) finish(kNone, 0.0f);
        return;
    }
    const RowK rk = row_k(p, a.n);
    const uint32_t k = total < static_cast<uint32_t>(rk.k) ? total : static_cast<uint32_t>(rk.k);
    // The source of the selection: the row's candidate list, or the row itself when it overflowed.
    const uint32_t n_listed = a.counters[r];
    const bool whole_row = n_listed > kCandCap;
    const uint64_t* cands = a.cands + static_cast<size_t>(r) * kCandCap;
    const uint32_t n_src = whole_row ? static_cast<uint32_t>(a.n) : n_listed;
    const auto src = [&](uint32_t i) -> uint64_t {  // the packed key of entry i, 0 for none
        if (!whole_row) return cands[i];
        const float l = logits[i];
        return isfinite(l) ? pack(order_key(l), i) : 0;
    };

    // Radix select (8 bits per pass, from the top) of the k-th largest packed key: afterwards the
    // entries c with (c & mask) >= prefix are exactly the k largest.
    if (tid == 0) {
        s_prefix = 0;
        s_mask = 0;
        s_remaining = k;
        s_done = (whole_row ? total : n_listed) == k;
    }
    __syncthreads();
    for (int shift = 56; shift >= 0 && !s_done; shift -= 8) {
        if (tid < 256) s_cnt[tid] = 0;
        __syncthreads();
        const uint64_t prefix = s_prefix, mask = s_mask;
        // Whole warps iterate together: lanes with the same digit add once (ties do not serialise).
        for (uint32_t base = static_cast<uint32_t>(warp) * 32; base < n_src; base += kSelThreads) {
            const uint32_t i = base + lane;
            const uint64_t c = i < n_src ? src(i) : 0;
            const bool in = c != 0 && (c & mask) == prefix;
            const uint32_t d = in ? static_cast<uint32_t>(c >> shift) & 255u : 256u;
            const unsigned peers = __match_any_sync(0xffffffffu, d);
            if (in && lane == __ffs(peers) - 1) atomicAdd(&s_cnt[d], static_cast<uint32_t>(__popc(peers)));
        }
        __syncthreads();
        if (warp == 0) {                        // lane l owns digits 255 - 8l .. 248 - 8l (from the top)
            const uint32_t need = s_remaining;  // read by every lane before any lane writes it below
            __syncwarp();                       // (explicit: racecheck does not count the shuffles)
            uint32_t h[8], sum = 0;
            for (int j = 0; j < 8; ++j) sum += h[j] = s_cnt[255 - 8 * lane - j];
            uint32_t incl = sum;
            for (int o = 1; o < 32; o <<= 1) {
                const uint32_t t = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += t;
            }
            const uint32_t above = incl - sum;
            if (above < need && incl >= need) {
                uint32_t acc = above;
                for (int j = 0; j < 8; ++j) {
                    if (acc + h[j] >= need) {
                        const uint32_t d = 255u - 8u * lane - j;
                        s_prefix = prefix | (static_cast<uint64_t>(d) << shift);
                        s_mask = mask | (uint64_t{255} << shift);
                        s_remaining = need - acc;
                        s_done = h[j] == need - acc;  // the whole digit fits: no finer pass needed
                        break;
                    }
                    acc += h[j];
                }
            }
        }
        __syncthreads();
    }
    // Gather the k winners; pad to a power of two with 0 (sorts last).
    if (tid == 0) s_nsel = 0;
    s_sel[tid] = 0;
    __syncthreads();
    {
        const uint64_t prefix = s_prefix, mask = s_mask;
        for (uint32_t i = tid; i < n_src; i += blockDim.x) {
            const uint64_t c = src(i);
            if (c != 0 && (c & mask) >= prefix) s_sel[atomicAdd(&s_nsel, 1u)] = c;
        }
    }
    __syncthreads();
    int p2 = 1;
    while (p2 < static_cast<int>(k)) p2 <<= 1;
    bitonic_desc(s_sel, p2);

    // Weights in sorted order (sampler.cpp: w = exp(l - m) in fp32, m = the largest logit).
    const bool in = tid < static_cast<int>(k);
    const float m = packed_logit(s_sel[0]);
    float w = in ? expf(__fsub_rn(packed_logit(s_sel[tid]), m)) : 0.0f;
    {  // top_p's normaliser: sum of w over the top-k set
        const double s = block_scan_f64(static_cast<double>(w), s_dwarp);
        if (tid == kSelThreads - 1) s_z = s;
        __syncthreads();
    }
    const double z = s_z;
    // min_p keeps w >= min_p: a prefix of the sorted order (w does not increase along it).
    int kept = static_cast<int>(k);
    if (p.min_p > 0.0f) kept = __syncthreads_count(in && w >= p.min_p);
    if (rk.use_top_p) {  // smallest prefix whose cumulative w / z reaches top_p
        const double cum = block_scan_f64(tid < kept ? static_cast<double>(w) / z : 0.0, s_dwarp);
        if (tid == 0) s_cut = kept;
        __syncthreads();
        if (tid < kept && cum >= static_cast<double>(p.top_p)) atomicMin(&s_cut, tid + 1);
        __syncthreads();
        kept = s_cut;
    }
    if (rk.id_order) {  // re-sort the kept set by id ascending: packed (0xffffffff - id) << 32 | key
        const uint64_t c = s_sel[tid];
        __syncthreads();
        s_sel[tid] = tid < kept ? (static_cast<uint64_t>(static_cast<uint32_t>(c)) << 32) | (c >> 32) : 0;
        __syncthreads();
        int q = 1;
        while (q < kept) q <<= 1;
        bitonic_desc(s_sel, q);
        const uint64_t s = s_sel[tid];
        __syncthreads();
        s_sel[tid] = (s << 32) | (s >> 32);  // back to (key << 32) | (0xffffffff - id)
        __syncthreads();
        w = tid < kept ? expf(__fsub_rn(packed_logit(s_sel[tid]), m)) : 0.0f;
    }
    // Draw: the first kept candidate (with w > 0) whose cumulative weight exceeds u * total.
    const double cum = block_scan_f64(tid < kept ? static_cast<double>(w) : 0.0, s_dwarp);
    if (tid == kept - 1) s_sum = cum;
    if (tid == 0) {
        s_first = kSelThreads;
        s_last = 0;
    }
    __syncthreads();
    const float u = a.u ? a.u[r] : sample_uniform(p.seed, p.counter);
    const double target = static_cast<double>(u) * s_sum;
    if (tid < kept && w > 0.0f) {
        if (cum > target) atomicMin(&s_first, tid);
        atomicMax(&s_last, tid);
    }
    __syncthreads();
    if (tid == 0) {
        const int j = s_first < kSelThreads ? s_first : s_last;  // rounding left u >= the total
        finish(packed_id(s_sel[j]), packed_logit(s_sel[j]));
    }
}

// Scan / filter CTAs per row: about kTargetCtas in all, at least kMinPerBlock logits each, at most
// kMaxBlocks (one row alone gets n_vocab / 2048 CTAs, as many as the one-row kernels had).
int blocks_per_row(int n_rows, int64_t n) {
    const int64_t most = std::min<int64_t>(kMaxBlocks, (n + kMinPerBlock - 1) / kMinPerBlock);
    const int64_t want = (kTargetCtas + n_rows - 1) / n_rows;
    return static_cast<int>(std::max<int64_t>(1, std::min(want, most)));
}

KernelArgs workspace_args(const Layout& l, void* workspace) {
    KernelArgs ka{};
    auto* ws = static_cast<uint8_t*>(workspace);
    ka.hist = reinterpret_cast<uint32_t*>(ws + l.hist);
    ka.counters = reinterpret_cast<uint32_t*>(ws + l.counters);
    ka.partials = reinterpret_cast<Partial*>(ws + l.partials);
    ka.cands = reinterpret_cast<uint64_t*>(ws + l.cands);
    ka.keys = reinterpret_cast<int32_t*>(ws + l.keys);
    ka.counts = reinterpret_cast<int32_t*>(ws + l.counts);
    ka.table_slots = l.table_slots;
    return ka;
}

void launch(KernelArgs& ka, int n_rows, cudaStream_t stream) {
    ka.blocks = blocks_per_row(n_rows, ka.n);
    const dim3 grid(static_cast<unsigned>(ka.blocks), static_cast<unsigned>(n_rows));
    prep_kernel<<<n_rows, kThreads, 0, stream>>>(ka);
    PELICAN_CUDA_CHECK_LAUNCH();
    if (ka.logprobs)
        scan_kernel<true><<<grid, kThreads, 0, stream>>>(ka);
    else
        scan_kernel<false><<<grid, kThreads, 0, stream>>>(ka);
    PELICAN_CUDA_CHECK_LAUNCH();
    filter_kernel<<<grid, kThreads, 0, stream>>>(ka);
    PELICAN_CUDA_CHECK_LAUNCH();
    if (ka.logprobs)
        select_kernel<true><<<n_rows, kSelThreads, 0, stream>>>(ka);
    else
        select_kernel<false><<<n_rows, kSelThreads, 0, stream>>>(ka);
    PELICAN_CUDA_CHECK_LAUNCH();
}

SampleBatchLimits one_row_limits(int64_t n_vocab) {
    // The one-row call's window is as long as the caller's (up to its context): its hash table
    // needs 2 slots per distinct id, at most n_vocab of them.
    return SampleBatchLimits{1, n_vocab, n_vocab};
}

}  // namespace

bool gpu_sampling_exact(const GpuSampleParams& p) {
    return p.temperature == 0.0f || (p.top_k >= 1 && p.top_k <= kMaxGpuTopK);
}

bool gpu_sampling_exact(const SampleRow& r) {
    return r.temperature == 0.0f || (r.top_k >= 1 && r.top_k <= kMaxGpuTopK);
}

size_t sampling_workspace_bytes(int64_t n_vocab) { return layout(one_row_limits(n_vocab)).total; }

size_t sample_batch_workspace_bytes(const SampleBatchLimits& limits) { return layout(limits).total; }

void sample_on_gpu(float* logits, int64_t n_vocab, const GpuSampleParams& p, const int32_t* penalty_ids,
                   int n_penalty, const float* u_dev, int32_t* out_token, void* workspace,
                   cudaStream_t stream) {
    if (n_vocab <= 0) {
        PELICAN_CUDA_CHECK(cudaMemsetAsync(out_token, 0xff, sizeof(int32_t), stream));  // -1
        return;
    }
    KernelArgs ka = workspace_args(layout(one_row_limits(n_vocab)), workspace);
    ka.logits = logits;
    ka.stride = n_vocab;
    ka.n = n_vocab;
    ka.rows = nullptr;
    ka.row = sample_row(p, 0, 0);
    ka.offsets = nullptr;
    ka.dense_len = penalty_ids && n_penalty > 0 ? n_penalty : 0;
    ka.ids = ka.dense_len > 0 ? penalty_ids : nullptr;
    ka.u = u_dev;
    ka.out = out_token;
    ka.logprobs = nullptr;
    launch(ka, 1, stream);
}

void sample_batch_on_gpu(const SampleBatchLimits& limits, const SampleBatchArgs& a, cudaStream_t stream) {
    if (a.n_rows <= 0) return;
    if (a.n_rows > limits.max_rows || a.n_rows > 65535 || a.row_stride < limits.n_vocab || !a.logits ||
        !a.rows || !a.out_tokens || !a.workspace || (a.penalty_ids && !a.penalty_offsets)) {
        std::fprintf(
            stderr,
            "pelican: sample_batch_on_gpu: %d rows (workspace for %d, at most 65535), row stride %lld "
            "for %lld logits, rows %p, out %p, workspace %p, penalty ids %p with offsets %p\n",
            a.n_rows, limits.max_rows, static_cast<long long>(a.row_stride),
            static_cast<long long>(limits.n_vocab), static_cast<const void*>(a.rows),
            static_cast<void*>(a.out_tokens), a.workspace, static_cast<const void*>(a.penalty_ids),
            static_cast<const void*>(a.penalty_offsets));
        std::abort();
    }
    const size_t n_rows = static_cast<size_t>(a.n_rows);
    if (limits.n_vocab <= 0) {  // nothing to sample: kNoToken, logprob NaN (all-ones bits)
        PELICAN_CUDA_CHECK(cudaMemsetAsync(a.out_tokens, 0xff, n_rows * sizeof(int32_t), stream));
        if (a.out_logprobs)
            PELICAN_CUDA_CHECK(cudaMemsetAsync(a.out_logprobs, 0xff, n_rows * sizeof(float), stream));
        return;
    }
    KernelArgs ka = workspace_args(layout(limits), a.workspace);
    ka.logits = a.logits;
    ka.stride = a.row_stride;
    ka.n = limits.n_vocab;
    ka.rows = a.rows;
    ka.offsets = a.penalty_ids ? a.penalty_offsets : nullptr;
    ka.dense_len = 0;
    ka.ids = a.penalty_ids;
    ka.u = nullptr;
    ka.out = a.out_tokens;
    ka.logprobs = a.out_logprobs;
    launch(ka, a.n_rows, stream);
}

}  // namespace pelican::cuda
