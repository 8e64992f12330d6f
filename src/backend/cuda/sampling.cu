// GPU token sampling with runtime/sampler.cpp's semantics (see sampling.h).
//
// Kernels per call (all on `stream`, no allocation, no host sync):
//   [penalty]  1 CTA: counts the penalty window in workspace counts[] (zeroed for the window's
//              ids first, left zero after), applies repetition / frequency / presence once per
//              distinct id, in sampler.cpp's fp32 operation order.
//   greedy:    scan (G CTAs): per-CTA best packed key  ->  argmax (1 CTA): the lowest id among
//              the largest finite logits.
//   sampling:  memset(histogram, counter)
//              scan (G CTAs): logits /= T in place (+inf -> FLT_MAX, as sampler.cpp), histogram of
//                  the top 12 bits of every finite logit's order key
//              filter (G CTAs): each CTA finds from the histogram the bin holding the k-th
//                  largest logit and appends every finite logit of that bin or above (>= k
//                  candidates, usually a few k) to a global list as packed keys
//              select (1 CTA, 1024 threads): exact radix select of the k-th largest packed key
//                  over the list, gather the k winners, bitonic sort in shared memory, then
//                  softmax weights, min_p, top_p and the draw with u, exactly as sampler.cpp.
//
// Order keys: a finite float maps to a uint32 whose unsigned order is the float order (-0 is
// folded to +0 first so that equal logits tie). A candidate is packed as
// (key << 32) | (0xffffffff - id): unsigned order of packed keys is sampler.cpp's order (logit
// descending, then id ascending), every packed key is unique and 0 means "none".
#include <cfloat>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling.h"

namespace pelican::cuda {
namespace {

constexpr int kHistBits = 12;
constexpr int kHistBins = 1 << kHistBits;
constexpr int kScanThreads = 256;
constexpr int kMaxScanBlocks = 256;
constexpr int kSelThreads = 1024;  // == kMaxGpuTopK: one sorted candidate per thread
static_assert(kSelThreads == kMaxGpuTopK, "select kernel holds one candidate per thread");

// Workspace layout (byte offsets, each 256-aligned).
struct Layout {
    size_t hist, counters, partials, cands, counts, total;
};
constexpr size_t align256(size_t v) { return (v + 255) / 256 * 256; }
Layout layout(int64_t n_vocab) {
    Layout l{};
    const size_t n = static_cast<size_t>(n_vocab > 0 ? n_vocab : 1);
    l.hist = 0;
    l.counters = align256(l.hist + kHistBins * sizeof(uint32_t));
    l.partials = align256(l.counters + 64 * sizeof(uint32_t));
    l.cands = align256(l.partials + kMaxScanBlocks * sizeof(uint64_t));
    l.counts = align256(l.cands + n * sizeof(uint64_t));
    l.total = align256(l.counts + n * sizeof(int32_t));
    return l;
}

__device__ __forceinline__ uint32_t order_key(float f) {  // f finite
    if (f == 0.0f) f = 0.0f;                              // -0 -> +0: equal logits tie
    const uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_float(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
__device__ __forceinline__ uint64_t pack(uint32_t key, int64_t id) {
    return (static_cast<uint64_t>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ int32_t packed_id(uint64_t c) {
    return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(c));
}
__device__ __forceinline__ float packed_logit(uint64_t c) {
    return key_float(static_cast<uint32_t>(c >> 32));
}

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
    for (int o = 16; o > 0; o >>= 1) {
        const uint64_t t = __shfl_xor_sync(0xffffffffu, v, o);
        v = t > v ? t : v;
    }
    return v;
}

// ---- penalties ---------------------------------------------------------------------------------

__global__ void penalty_kernel(float* logits, int64_t n, const int32_t* __restrict__ ids, int n_ids,
                               int32_t* counts, float rp, float freq, float pres) {
    for (int i = threadIdx.x; i < n_ids; i += blockDim.x) {
        const int32_t t = ids[i];
        if (t >= 0 && t < n) counts[t] = 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n_ids; i += blockDim.x) {
        const int32_t t = ids[i];
        if (t >= 0 && t < n) atomicAdd(&counts[t], 1);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n_ids; i += blockDim.x) {
        const int32_t t = ids[i];
        if (t < 0 || t >= n) continue;
        const int32_t c = atomicExch(&counts[t], 0);  // exactly one thread per distinct id sees c > 0
        if (c <= 0) continue;
        float l = logits[t];
        if (rp != 1.0f) l = l > 0.0f ? __fdiv_rn(l, rp) : __fmul_rn(l, rp);
        l = __fsub_rn(l, __fadd_rn(__fmul_rn(static_cast<float>(c), freq), pres));
        logits[t] = l;
    }
}

// ---- scan: temperature, per-CTA argmax, histogram ---------------------------------------------

template <bool kSample>
__global__ void __launch_bounds__(kScanThreads)
    scan_kernel(float* logits, int64_t n, float temp, uint32_t* hist, uint64_t* partials) {
    __shared__ uint32_t s_hist[kSample ? kHistBins : 1];
    __shared__ uint64_t s_best[kScanThreads / 32];
    if constexpr (kSample) {
        for (int b = threadIdx.x; b < kHistBins; b += blockDim.x) s_hist[b] = 0;
        __syncthreads();
    }
    uint64_t best = 0;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float l = logits[i];
        if (!isfinite(l)) continue;
        if constexpr (kSample) {
            l = __fdiv_rn(l, temp);
            if (l == INFINITY) l = FLT_MAX;  // tiny temperature: overflowed logits tie at the top
            logits[i] = l;
            if (!isfinite(l)) continue;  // underflowed to -inf
        }
        const uint32_t key = order_key(l);
        const uint64_t c = pack(key, i);
        best = c > best ? c : best;
        if constexpr (kSample) atomicAdd(&s_hist[key >> (32 - kHistBits)], 1u);
    }
    best = warp_max_u64(best);
    if (threadIdx.x % 32 == 0) s_best[threadIdx.x / 32] = best;
    __syncthreads();
    if (threadIdx.x < 32) {
        uint64_t v = threadIdx.x < kScanThreads / 32 ? s_best[threadIdx.x] : 0;
        v = warp_max_u64(v);
        if (threadIdx.x == 0) partials[blockIdx.x] = v;
    }
    if constexpr (kSample) {
        for (int b = threadIdx.x; b < kHistBins; b += blockDim.x)
            if (s_hist[b]) atomicAdd(&hist[b], s_hist[b]);
    }
}

__global__ void argmax_kernel(const uint64_t* partials, int n_partials, int32_t* out) {
    uint64_t best = 0;
    for (int i = threadIdx.x; i < n_partials; i += 32) best = partials[i] > best ? partials[i] : best;
    best = warp_max_u64(best);
    if (threadIdx.x == 0) *out = best ? packed_id(best) : -1;
}

// ---- filter: candidates at or above the k-th largest logit's histogram bin ----------------------

// Block-wide inclusive scan over 256 threads (uint32).
__device__ uint32_t block_scan_u32(uint32_t v, uint32_t* s_warp) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += t;
    }
    if (lane == 31) s_warp[warp] = v;
    __syncthreads();
    if (warp == 0) {
        uint32_t w = lane < static_cast<int>(blockDim.x / 32) ? s_warp[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t t = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += t;
        }
        s_warp[lane] = w;
    }
    __syncthreads();
    if (warp > 0) v += s_warp[warp - 1];
    __syncthreads();
    return v;
}

// The smallest bin b such that at least min(k, total) finite logits have bin >= b. Every thread
// of the (kScanThreads-thread) block returns it; *total_out = number of finite logits.
__device__ uint32_t threshold_bin(const uint32_t* hist, int k, uint32_t* total_out) {
    __shared__ uint32_t s_warp[32];
    __shared__ uint32_t s_bin, s_total;
    constexpr int kPer = kHistBins / kScanThreads;  // 16 bins per thread
    // Thread t owns bins from the top: r = kScanThreads - 1 - t covers [kPer r, kPer r + kPer).
    const int r = kScanThreads - 1 - static_cast<int>(threadIdx.x);
    uint32_t h[kPer], sum = 0;
    for (int j = 0; j < kPer; ++j) sum += h[j] = hist[kPer * r + j];
    const uint32_t incl = block_scan_u32(sum, s_warp);  // count in bins above and including mine
    if (threadIdx.x == kScanThreads - 1) {
        s_total = incl;
        s_bin = 0;
    }
    __syncthreads();
    const uint32_t total = s_total;
    const uint32_t need = total < static_cast<uint32_t>(k) ? total : static_cast<uint32_t>(k);
    const uint32_t above = incl - sum;
    if (need > 0 && above < need && incl >= need) {
        uint32_t acc = above;
        for (int j = kPer - 1; j >= 0; --j) {
            acc += h[j];
            if (acc >= need) {
                s_bin = static_cast<uint32_t>(kPer * r + j);
                break;
            }
        }
    }
    __syncthreads();
    *total_out = total;
    return s_bin;
}

__global__ void __launch_bounds__(kScanThreads)
    filter_kernel(const float* __restrict__ logits, int64_t n, int k, const uint32_t* __restrict__ hist,
                  uint32_t* counters, uint64_t* cands) {
    uint32_t total;
    const uint32_t bin = threshold_bin(hist, k, &total);
    if (total == 0) return;
    const int lane = threadIdx.x % 32;
    // Whole warps iterate together so the append can use a warp-aggregated atomic.
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t base = blockIdx.x * static_cast<int64_t>(blockDim.x); base < n; base += stride) {
        const int64_t i = base + threadIdx.x;
        uint64_t c = 0;
        bool take = false;
        if (i < n) {
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
        if (lane == __ffs(mask) - 1) slot = atomicAdd(&counters[0], static_cast<uint32_t>(__popc(mask)));
        slot = __shfl_sync(0xffffffffu, slot, __ffs(mask) - 1);
        if (take) cands[slot + __popc(mask & ((1u << lane) - 1u))] = c;
    }
}

// ---- select: exact top-k, sort, min_p / top_p / draw ----------------------------------------------

// Inclusive scan over the 1024 threads (double).
__device__ double block_scan_f64(double v, double* s_warp) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 1; o < 32; o <<= 1) {
        const double t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += t;
    }
    if (lane == 31) s_warp[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double w = s_warp[lane];
        for (int o = 1; o < 32; o <<= 1) {
            const double t = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += t;
        }
        s_warp[lane] = w;
    }
    __syncthreads();
    if (warp > 0) v += s_warp[warp - 1];
    __syncthreads();
    return v;
}

// Sorts s[0, p) descending (p a power of two <= blockDim.x); all threads call it.
__device__ void bitonic_desc(uint64_t* s, int p) {
    const int i = threadIdx.x;
    for (int size = 2; size <= p; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            const int partner = i ^ stride;
            if (i < p && partner > i) {
                const uint64_t a = s[i], b = s[partner];
                const bool desc = (i & size) == 0;
                if (desc ? a < b : a > b) {
                    s[i] = b;
                    s[partner] = a;
                }
            }
            __syncthreads();
        }
    }
}

struct SelectArgs {
    int k;           // top_k clamped to [1, kMaxGpuTopK]
    bool id_order;   // draw in id order (sampler.cpp without top_k < n_vocab and without top_p)
    bool use_top_p;  // top_p < 1
    float top_p, min_p;
};

__global__ void __launch_bounds__(kSelThreads)
    select_kernel(const uint32_t* __restrict__ hist, const uint32_t* __restrict__ counters,
                  const uint64_t* __restrict__ cands, SelectArgs a, const float* __restrict__ u_dev,
                  int32_t* out) {
    __shared__ uint64_t s_sel[kSelThreads];
    __shared__ uint32_t s_cnt[256];
    __shared__ double s_dwarp[32];
    __shared__ uint32_t s_uwarp[32];
    __shared__ uint64_t s_prefix, s_mask;
    __shared__ uint32_t s_remaining, s_done, s_nsel, s_total;
    __shared__ int s_first, s_last, s_cut;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

    // Finite logits in all (histogram total).
    {
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
        if (tid == 0) *out = -1;
        return;
    }
    const uint32_t k = total < static_cast<uint32_t>(a.k) ? total : static_cast<uint32_t>(a.k);
    const uint32_t n_cand = counters[0];

    // Radix select (8 bits per pass, from the top) of the k-th largest packed key: afterwards the
    // candidates c with (c & mask) >= prefix are exactly the k largest.
    if (tid == 0) {
        s_prefix = 0;
        s_mask = 0;
        s_remaining = k;
        s_done = n_cand == k;
    }
    __syncthreads();
    for (int shift = 56; shift >= 0 && !s_done; shift -= 8) {
        if (tid < 256) s_cnt[tid] = 0;
        __syncthreads();
        const uint64_t prefix = s_prefix, mask = s_mask;
        for (uint32_t i = tid; i < n_cand; i += blockDim.x) {
            const uint64_t c = cands[i];
            if ((c & mask) == prefix) atomicAdd(&s_cnt[(c >> shift) & 255u], 1u);
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
        for (uint32_t i = tid; i < n_cand; i += blockDim.x) {
            const uint64_t c = cands[i];
            if ((c & mask) >= prefix) s_sel[atomicAdd(&s_nsel, 1u)] = c;
        }
    }
    __syncthreads();
    int p = 1;
    while (p < static_cast<int>(k)) p <<= 1;
    bitonic_desc(s_sel, p);

    // Weights in sorted order (sampler.cpp: w = exp(l - m) in fp32, m = the largest logit).
    const bool in = tid < static_cast<int>(k);
    const float m = packed_logit(s_sel[0]);
    float w = in ? expf(__fsub_rn(packed_logit(s_sel[tid]), m)) : 0.0f;
    __shared__ double s_z, s_sum;
    {  // top_p's normaliser: sum of w over the top-k set
        const double s = block_scan_f64(static_cast<double>(w), s_dwarp);
        if (tid == kSelThreads - 1) s_z = s;
        __syncthreads();
    }
    const double z = s_z;
    // min_p keeps w >= min_p: a prefix of the sorted order (w does not increase along it).
    int kept = static_cast<int>(k);
    if (a.min_p > 0.0f) kept = __syncthreads_count(in && w >= a.min_p);
    if (a.use_top_p) {  // smallest prefix whose cumulative w / z reaches top_p
        const double cum = block_scan_f64(tid < kept ? static_cast<double>(w) / z : 0.0, s_dwarp);
        if (tid == 0) s_cut = kept;
        __syncthreads();
        if (tid < kept && cum >= static_cast<double>(a.top_p)) atomicMin(&s_cut, tid + 1);
        __syncthreads();
        kept = s_cut;
    }
    if (a.id_order) {  // re-sort the kept set by id ascending: packed (0xffffffff - id) << 32 | key
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
    const double target = static_cast<double>(*u_dev) * s_sum;
    if (tid < kept && w > 0.0f) {
        if (cum > target) atomicMin(&s_first, tid);
        atomicMax(&s_last, tid);
    }
    __syncthreads();
    if (tid == 0) {
        const int j = s_first < kSelThreads ? s_first : s_last;  // rounding left u >= the total
        *out = packed_id(s_sel[j]);
    }
}

unsigned scan_blocks(int64_t n) {
    const int64_t b = (n + kScanThreads * 8 - 1) / (kScanThreads * 8);
    return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxScanBlocks ? kMaxScanBlocks : b));
}

}  // namespace

bool gpu_sampling_exact(const GpuSampleParams& p) {
    return p.temperature == 0.0f || (p.top_k >= 1 && p.top_k <= kMaxGpuTopK);
}

size_t sampling_workspace_bytes(int64_t n_vocab) { return layout(n_vocab).total; }

void sample_on_gpu(float* logits, int64_t n_vocab, const GpuSampleParams& p, const int32_t* penalty_ids,
                   int n_penalty, const float* u_dev, int32_t* out_token, void* workspace,
                   cudaStream_t stream) {
    if (n_vocab <= 0) {
        PELICAN_CUDA_CHECK(cudaMemsetAsync(out_token, 0xff, sizeof(int32_t), stream));  // -1
        return;
    }
    const Layout l = layout(n_vocab);
    auto* ws = static_cast<uint8_t*>(workspace);
    auto* hist = reinterpret_cast<uint32_t*>(ws + l.hist);
    auto* counters = reinterpret_cast<uint32_t*>(ws + l.counters);
    auto* partials = reinterpret_cast<uint64_t*>(ws + l.partials);
    auto* cands = reinterpret_cast<uint64_t*>(ws + l.cands);
    auto* counts = reinterpret_cast<int32_t*>(ws + l.counts);

    if (n_penalty > 0 && penalty_ids &&
        (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)) {
        penalty_kernel<<<1, 1024, 0, stream>>>(logits, n_vocab, penalty_ids, n_penalty, counts,
                                               p.repetition_penalty, p.frequency_penalty, p.presence_penalty);
        PELICAN_CUDA_CHECK_LAUNCH();
    }
    const unsigned blocks = scan_blocks(n_vocab);
    if (p.temperature == 0.0f) {
        scan_kernel<false><<<blocks, kScanThreads, 0, stream>>>(logits, n_vocab, 1.0f, hist, partials);
        PELICAN_CUDA_CHECK_LAUNCH();
        argmax_kernel<<<1, 32, 0, stream>>>(partials, static_cast<int>(blocks), out_token);
        PELICAN_CUDA_CHECK_LAUNCH();
        return;
    }
    // top_k: off (0) or >= n_vocab means every finite logit; beyond kMaxGpuTopK the GPU path keeps
    // only the kMaxGpuTopK largest (not exact: see gpu_sampling_exact).
    const bool all = p.top_k <= 0 || p.top_k >= n_vocab;
    const int64_t k_req = all ? n_vocab : p.top_k;
    SelectArgs a{};
    a.k = static_cast<int>(k_req < kMaxGpuTopK ? k_req : kMaxGpuTopK);
    a.use_top_p = p.top_p < 1.0f;
    a.id_order = all && !a.use_top_p;
    a.top_p = p.top_p;
    a.min_p = p.min_p;

    PELICAN_CUDA_CHECK(cudaMemsetAsync(ws, 0, l.partials, stream));  // histogram + counters
    scan_kernel<true><<<blocks, kScanThreads, 0, stream>>>(logits, n_vocab, p.temperature, hist, partials);
    PELICAN_CUDA_CHECK_LAUNCH();
    filter_kernel<<<blocks, kScanThreads, 0, stream>>>(logits, n_vocab, a.k, hist, counters, cands);
    PELICAN_CUDA_CHECK_LAUNCH();
    select_kernel<<<1, kSelThreads, 0, stream>>>(hist, counters, cands, a, u_dev, out_token);
    PELICAN_CUDA_CHECK_LAUNCH();
}

}  // namespace pelican::cuda
