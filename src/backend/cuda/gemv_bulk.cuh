// Private to the GEMV translation units: the bulk-copy decode GEMV (one token, quantized weights).
// Host-includable for GemvBulkParams; the kernel is CUDA only.
//
// Why: a decode step is a chain of small dependent kernels, and the register-streaming GEMV
// (gemv_kernel.cuh) pays one DRAM round trip per batch of loads after its PDL wait. Here each
// CTA copies its share of the weight rows into a shared-memory ring with cp.async.bulk (the
// Hopper bulk copy engine, completion counted on an mbarrier per ring slot), and issues the first
// ring slots' copies BEFORE its PDL wait: the weights never depend on earlier kernels, so their
// DRAM latency and transfer overlap the previous kernel. After the wait only the activation
// prologue, the dot products from shared memory and further ring refills remain.
//
// Work split: gridDim.x CTAs (one per SM), each takes a contiguous share of the work items:
//   plain    the output rows (glu: gate rows; each brings its up row n_half further),
//   slots    expert slots: items (slot, row) flattened slot-major, split at slot boundaries,
//   combine  the fused moe_combine (decode down projection): a CTA owns output rows [o0, o1) and
//            walks every slot over them, writing y_s[o] and accumulating sum_s w_s y_s[o] in shared
//            memory in slot order, then writes comb_y[o] = comb_res[o] + that sum.
// A CTA's share is cut into chunks of at most chunk_rows rows of one slot; chunk j goes to ring
// slot j % n_stages. Shared memory: [mbarriers | expert ids | prologue partials | activations (x_count
// vectors, the GEMV prologue's int8 layout) | combine sums | ring]. In a ring slot, plane k of the chunk's
// rows sits at plane_off[k] (rows stride[k] apart, as in global memory); glu up rows at up_off + that.
//
// Lanes: a row's units are spread over `lanes` lanes (32, or the next power of two of a shorter
// row, 32 / lanes rows side by side per warp); lane l owns units l, l + lanes, ... and keeps their
// activations in registers (UL = units per lane: 1, 2 or 4; UL = 0 reads them from shared memory
// for longer rows). Every CTA waits (pdl_wait) and triggers (pdl_trigger, right after the wait).
//
// Reading expert ids before the PDL wait (ids_early) is allowed when they were written at least
// two launches earlier (pdl.cuh: every PDL kernel triggers only after its own wait, so when a
// kernel starts, the kernel two launches back has completed and its writes are visible).
#pragma once

#include <cstdint>

#include "backend/cuda/gemv_params.cuh"

#ifdef __CUDACC__
#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/pdl.cuh"
#include "core/env.h"
#endif

namespace pelican::cuda::detail {

inline constexpr int kBulkThreads = 256;
inline constexpr int kBulkWarps = kBulkThreads / 32;
inline constexpr int kBulkMaxStages = 8;
inline constexpr int kBulkMaxSlots = 32;  // expert slots of one call
// Header of the dynamic shared memory: mbarriers (8 B each), expert ids (4 B each), the prologue's
// per-warp partial sums (4 B each). The kernel has no static shared memory, so the whole opt-in
// limit (227 KiB on sm_90) is available to the dynamic part.
inline constexpr int kBulkHeader = 256;
inline constexpr int kBulkIdsOff = 8 * kBulkMaxStages, kBulkPartOff = kBulkIdsOff + 4 * kBulkMaxSlots;
inline constexpr int kBulkMaxSmem = 227 * 1024;
static_assert(kBulkPartOff + 4 * kBulkWarps <= kBulkHeader, "bulk GEMV header too small");

enum BulkMode : int { kBulkPlain = 0, kBulkSlots = 1, kBulkCombine = 2 };

struct GemvBulkParams {
    int mode = kBulkPlain;
    int64_t n_work = 0;  // items split over the CTAs: plain / combine output rows; slots n_slots x width
    int width = 0;       // output rows per slot (glu: gate rows)
    int n_slots = 1;     // expert slots (1 when plain)
    int chunk_rows = 1;  // rows per chunk (glu: gate rows, each with its up row)
    int n_stages = 1;    // ring slots (<= kBulkMaxStages)
    int slot_bytes = 0;  // bytes per ring slot
    int n_planes = 0;
    int plane_off[4] = {0, 0, 0, 0};              // plane k of a chunk inside its ring slot
    int up_off = 0;                               // glu: the up rows' planes inside a ring slot
    int lanes = 32;                               // lanes per row (a power of two)
    int act_off = 0, comb_off = 0, ring_off = 0;  // shared-memory layout (bytes)
    int x_count = 1;                              // activation vectors in the act area
    bool ids_early = false;                       // expert ids may be read before the PDL wait
};

#ifdef __CUDACC__

// ---- PTX helpers (sm_90) ----------------------------------------------------------------------

__device__ __forceinline__ uint32_t bulk_smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The kernel is only launched on sm_90+ (gemv_bulk_plan checks the device); older targets compile
// the helpers to traps.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define PELICAN_BULK_PTX(...) __trap()
#else
#define PELICAN_BULK_PTX(...) __VA_ARGS__
#endif

__device__ __forceinline__ void bulk_mbar_init(uint64_t* bar, uint32_t count) {
    PELICAN_BULK_PTX(
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bulk_smem_u32(bar)), "r"(count)
                     : "memory"));
}

// Makes the initialised barriers visible to the async proxy (the bulk copies complete on them).
__device__ __forceinline__ void bulk_fence_init() {
    PELICAN_BULK_PTX(asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"));
}

// The producer's arrival: the phase completes when `bytes` more bytes have landed.
__device__ __forceinline__ void bulk_mbar_expect(uint64_t* bar, uint32_t bytes) {
    PELICAN_BULK_PTX(asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bulk_smem_u32(bar)), "r"(bytes)
        : "memory"));
}

__device__ __forceinline__ void bulk_mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    __trap();
#else
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n\t.reg .pred p;\n\t"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(done)
            : "r"(bulk_smem_u32(bar)), "r"(parity)
            : "memory");
    } while (!done);
#endif
}

// bytes (a multiple of 16; both addresses 16-byte aligned) from global src to shared dst, counted
// on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    PELICAN_BULK_PTX(asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            bulk_smem_u32(dst)),
        "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bulk_smem_u32(bar))
        : "memory"));
}

// ---- per-type unit loads from a ring slot (layouts: gemv_params.cuh) --------------------------
// pk: this row's plane k in shared memory (unused planes: any pointer).

template <class T>
struct BulkSmem;

template <>
struct BulkSmem<TraitQ4_0> {
    __device__ static void load(TraitQ4_0::W& w, const uint8_t* p0, const uint8_t* p1, const uint8_t* p2,
                                const uint8_t* p3, int u) {
        w.q = *reinterpret_cast<const uint4*>(p0 + 16 * u);
        w.d = *reinterpret_cast<const unsigned short*>(p1 + 2 * u);
    }
};

template <>
struct BulkSmem<TraitQ8_0> {
    __device__ static void load(TraitQ8_0::W& w, const uint8_t* p0, const uint8_t* p1, const uint8_t* p2,
                                const uint8_t* p3, int u) {
        w.a = *reinterpret_cast<const uint4*>(p0 + 16 * u);
        w.b = *reinterpret_cast<const uint4*>(p1 + 16 * u);
        w.d = *reinterpret_cast<const unsigned short*>(p2 + 2 * u);
    }
};

template <>
struct BulkSmem<TraitQ4_K> {
    __device__ static void load(TraitQ4_K::W& w, const uint8_t* p0, const uint8_t* p1, const uint8_t* p2,
                                const uint8_t* p3, int u) {
        w.a = *reinterpret_cast<const uint4*>(p0 + 16 * u);
        w.b = *reinterpret_cast<const uint4*>(p1 + 16 * u);
        w.h = *reinterpret_cast<const uint4*>(p2 + 16 * (u >> 2));
    }
};

template <>
struct BulkSmem<TraitQ6_K> {
    __device__ static void load(TraitQ6_K::W& w, const uint8_t* p0, const uint8_t* p1, const uint8_t* p2,
                                const uint8_t* p3, int u) {
        w.q = *reinterpret_cast<const uint4*>(p0 + 16 * u);
        w.h = *reinterpret_cast<const uint2*>(p1 + 8 * u);
        w.sc = *reinterpret_cast<const unsigned short*>(p2 + 2 * u);
        w.d = *reinterpret_cast<const unsigned short*>(p3 + 2 * (u >> 3));
    }
};

// ---- work split --------------------------------------------------------------------------------

struct BulkChunk {
    int s;   // slot
    int r0;  // first row inside the slot (plain: inside the matrix)
    int n;   // rows
};

// This CTA's items [w0, w1) (combine: its output rows). 32-bit: bulk_plan keeps n_work < 2^31.
__device__ __forceinline__ void bulk_share(const GemvBulkParams& b, int& w0, int& w1) {
    const int64_t g = gridDim.x, c = blockIdx.x;
    w0 = static_cast<int>(c * b.n_work / g);
    w1 = static_cast<int>((c + 1) * b.n_work / g);
}

__device__ __forceinline__ int bulk_chunk_count(const GemvBulkParams& b, int w0, int w1) {
    if (w1 <= w0) return 0;
    const int cr = b.chunk_rows;
    if (b.mode == kBulkPlain) return (w1 - w0 + cr - 1) / cr;
    if (b.mode == kBulkCombine) return b.n_slots * ((w1 - w0 + cr - 1) / cr);
    int n = 0;
    for (int v = w0; v < w1;) {
        const int end = min((v / b.width + 1) * b.width, w1);
        n += (end - v + cr - 1) / cr;
        v = end;
    }
    return n;
}

// Walks a CTA's chunks in order without divisions (the consumers and the producer each keep one):
// plain rows [w0, w1) of slot 0; slots (slot, row) from w0 on, cut at slot ends; combine rows
// [w0, w1) of slot 0, then of slot 1, ...
struct BulkCursor {
    int s = 0, r = 0;
    __device__ void start(const GemvBulkParams& b, int w0) {
        s = b.mode == kBulkSlots ? w0 / b.width : 0;
        r = b.mode == kBulkSlots ? w0 - s * b.width : w0;
    }
    __device__ BulkChunk chunk(const GemvBulkParams& b, int w1) const {
        const int end = b.mode == kBulkSlots ? min(b.width, w1 - s * b.width) : w1;
        return {s, r, min(b.chunk_rows, end - r)};
    }
    __device__ void advance(const GemvBulkParams& b, int w0, int w1, const BulkChunk& c) {
        r += c.n;
        if (b.mode == kBulkSlots && r == b.width) {
            ++s;
            r = 0;
        } else if (b.mode == kBulkCombine && r == w1) {
            ++s;
            r = w0;
        }
    }
};

// Thread 0: the bulk copies of chunk c (the CTA's j-th) into ring slot j % n_stages (ids: the slots'
// experts, clamped).
__device__ __forceinline__ void bulk_issue(const GemvParams& p, const GemvBulkParams& b, uint8_t* smem,
                                           uint64_t* bars, const int* ids, const BulkChunk& c, int j) {
    const int st = j % b.n_stages;
    uint8_t* dst = smem + b.ring_off + st * b.slot_bytes;
    int64_t row = c.r0;
    if (b.mode != kBulkPlain) row += static_cast<int64_t>(ids[c.s]) * p.expert_rows;
    uint32_t bytes = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k)
        if (k < b.n_planes) bytes += static_cast<uint32_t>(c.n * p.stride[k]);
    const int halves = p.glu ? 2 : 1;
    bulk_mbar_expect(&bars[st], bytes * halves);
    for (int h = 0; h < halves; ++h) {
        const int64_t r = row + h * static_cast<int64_t>(p.n_half);
#pragma unroll
        for (int k = 0; k < 4; ++k)
            if (k < b.n_planes)
                bulk_copy(dst + h * b.up_off + b.plane_off[k], p.w + p.off[k] + r * p.stride[k],
                          static_cast<uint32_t>(c.n * p.stride[k]), &bars[st]);
    }
}

// ---- prologue ----------------------------------------------------------------------------------
// The x_count activation vectors (vector i at p.x + i * x_slot_stride) RMS-normed (only with one
// vector) and quantized into act + i * tok_bytes: gemv_prologue_quant's arithmetic and layout. part:
// kBulkWarps floats of shared memory. Loads go kBulkV float4 per thread at a time (one L2 round trip
// per batch); a single vector of at most kBulkV * kBulkThreads float4 (n_in <= 4096) is read once
// and kept in registers between the sum of squares and the quantization.
inline constexpr int kBulkV = 4;

__device__ __forceinline__ float4 bulk_norm4(const GemvParams& p, float4 v, float r, int f) {
    return norm_scale4(p, v, load_x4(p.norm_w, f, p.n_in, p.norm_vec), r);
}

// 1 / sqrt(mean(x^2) + eps) from each thread's partial sum of squares (a CTA-wide reduction).
__device__ __forceinline__ float bulk_rstd(const GemvParams& p, float ss, float* part) {
    const int tid = static_cast<int>(threadIdx.x);
    ss = warp_sum(ss);
    if ((tid & 31) == 0) part[tid >> 5] = ss;
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kBulkWarps; ++k) s += part[k];
    return rstd_of(s, p.n_in, p.norm_eps);
}

template <int kNP>
__device__ void bulk_prologue(const GemvParams& p, const GemvBulkParams& b, uint8_t* act, float* part) {
    const int tid = static_cast<int>(threadIdx.x), nf = p.n_in / 4;  // nf: a multiple of 8
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const auto sumsq = [](float4 v, float ss) {
        return fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, fmaf(v.w, v.w, ss))));
    };
    if (b.x_count == 1 && nf <= kBulkV * kBulkThreads) {  // one vector, one read
        float4 v[kBulkV];
#pragma unroll
        for (int k = 0; k < kBulkV; ++k) {
            const int f = k * kBulkThreads + tid;
            v[k] = f < nf ? load_x4(p.x, f, p.n_in, p.x_vec) : zero;
        }
        if (p.norm_w != nullptr) {
            float ss = 0.0f;
#pragma unroll
            for (int k = 0; k < kBulkV; ++k) ss = sumsq(v[k], ss);
            const float r = bulk_rstd(p, ss, part);
#pragma unroll
            for (int k = 0; k < kBulkV; ++k) {
                const int f = k * kBulkThreads + tid;
                if (f < nf) v[k] = bulk_norm4(p, v[k], r, f);
            }
        }
#pragma unroll
        for (int k = 0; k < kBulkV; ++k) {
            const int f = k * kBulkThreads + tid;
            quantize4<kNP>(p, act, v[k], f, f < nf);  // whole 8-lane groups are active or not
        }
        return;
    }
    float r = 1.0f;
    if (p.norm_w != nullptr) {  // x_count == 1 (bulk_plan)
        float ss = 0.0f;
        for (int f0 = tid; f0 < nf; f0 += kBulkV * kBulkThreads) {
            float4 v[kBulkV];
#pragma unroll
            for (int k = 0; k < kBulkV; ++k) {
                const int f = f0 + k * kBulkThreads;
                v[k] = f < nf ? load_x4(p.x, f, p.n_in, p.x_vec) : zero;
            }
#pragma unroll
            for (int k = 0; k < kBulkV; ++k) ss = sumsq(v[k], ss);
        }
        r = bulk_rstd(p, ss, part);
    }
    const int total = b.x_count * nf;  // a multiple of 8: 8-lane groups are whole
    for (int base = 0; base < total; base += kBulkV * kBulkThreads) {
        float4 v[kBulkV];
#pragma unroll
        for (int k = 0; k < kBulkV; ++k) {
            const int idx = base + k * kBulkThreads + tid;
            const int xv = idx < total ? idx / nf : 0, f = idx - xv * nf;
            v[k] = idx < total ? load_x4(p.x + xv * p.x_slot_stride, f, p.n_in, p.x_vec) : zero;
        }
#pragma unroll
        for (int k = 0; k < kBulkV; ++k) {
            const int idx = base + k * kBulkThreads + tid;
            const bool active = idx < total;
            const int xv = active ? idx / nf : 0, f = active ? idx - xv * nf : 0;
            const float4 x = active && p.norm_w != nullptr ? bulk_norm4(p, v[k], r, f) : v[k];
            quantize4<kNP>(p, act + xv * p.tok_bytes, x, f, active);
        }
    }
}

// Sum over aligned segments of `lanes` lanes (a power of two <= 32, uniform over the warp).
__device__ __forceinline__ float bulk_seg_sum(float v, int lanes) {
    for (int o = lanes >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- kernel ------------------------------------------------------------------------------------

template <class T, int UL>
__global__ void __launch_bounds__(kBulkThreads, 2)
    gemv_bulk_kernel(const GemvParams p, const GemvBulkParams b) {
    extern __shared__ __align__(16) uint8_t bulk_smem[];
    uint8_t* const smem = bulk_smem;
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
    int* ids = reinterpret_cast<int*>(smem + kBulkIdsOff);
    float* part = reinterpret_cast<float*>(smem + kBulkPartOff);
    uint8_t* act = smem + b.act_off;
    float* comb = reinterpret_cast<float*>(smem + b.comb_off);
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    int w0, w1;
    bulk_share(b, w0, w1);
    const int n_chunks = bulk_chunk_count(b, w0, w1);
    BulkCursor prod;  // thread 0's: the next chunk to copy
    prod.start(b, w0);
    const auto issue_next = [&](int j) {
        const BulkChunk c = prod.chunk(b, w1);
        bulk_issue(p, b, smem, bars, ids, c, j);
        prod.advance(b, w0, w1, c);
    };
    const bool expert = b.mode != kBulkPlain;

    if (tid == 0) {
        for (int i = 0; i < b.n_stages; ++i) bulk_mbar_init(&bars[i], 1);
        bulk_fence_init();
    }
    const auto read_ids = [&] {
        if (expert && tid < b.n_slots) {
            int e = __ldcg(p.expert_ids + tid);
            if (e < 0 || e >= p.n_experts) e = 0;  // as gemv_kernel: out-of-range ids read expert 0
            ids[tid] = e;
        }
    };
    const int pre = n_chunks < b.n_stages ? n_chunks : b.n_stages;
    const bool early = !expert || b.ids_early;
    if (early) {
        read_ids();
        __syncthreads();
        if (tid == 0)
            for (int j = 0; j < pre; ++j) issue_next(j);
        pdl_wait();  // x, residual, y belong to neighbouring kernels
    } else {
        pdl_wait();  // the ids come from the router kernel
        read_ids();
        __syncthreads();
        if (tid == 0)
            for (int j = 0; j < pre; ++j) issue_next(j);
    }
    pdl_trigger();

    bulk_prologue<T::kNP>(p, b, act, part);
    if (b.mode == kBulkCombine)
        for (int i = tid; i < w1 - w0; i += kBulkThreads) comb[i] = 0.0f;
    __syncthreads();

    const int L = b.lanes, P = 32 / L, sg = lane / L, sl = lane % L;
    typename T::X xr[UL > 0 ? UL : 1];
    int x_loaded = -1;
    BulkCursor cons;  // every thread's: the chunk being computed
    cons.start(b, w0);
    for (int j = 0; j < n_chunks; ++j) {
        const BulkChunk c = cons.chunk(b, w1);
        cons.advance(b, w0, w1, c);
        const int xv = b.x_count > 1 ? c.s / p.x_slot_div : 0;  // this slot's activation vector
        const uint8_t* xt = act + xv * p.tok_bytes;
        if constexpr (UL > 0) {
            if (xv != x_loaded) {
#pragma unroll
                for (int i = 0; i < UL; ++i) {
                    const int u = sl + L * i;
                    if (u < p.n_units) xr[i] = T::load_x(xt, p, u);
                }
                x_loaded = xv;
            }
        }
        const int st = j % b.n_stages;
        bulk_mbar_wait(&bars[st], static_cast<uint32_t>(j / b.n_stages) & 1u);
        const uint8_t* base = smem + b.ring_off + st * b.slot_bytes;
        // Row i of the chunk: this lane's units dotted with its activations (gate and, with glu, up).
        const auto row_dot = [&](int i, float& acc, float& acc_u) {
            const uint8_t* g0 = base + b.plane_off[0] + i * p.stride[0];
            const uint8_t* g1 = base + b.plane_off[1] + i * p.stride[1];
            const uint8_t* g2 = base + b.plane_off[2] + i * p.stride[2];
            const uint8_t* g3 = base + b.plane_off[3] + i * p.stride[3];
            const int up = b.up_off;
            const auto unit = [&](int u, const typename T::X& x) {
                typename T::W w;
                BulkSmem<T>::load(w, g0, g1, g2, g3, u);
                acc = T::dot(T::unpack(w, u), x, acc);
                if (p.glu) {
                    BulkSmem<T>::load(w, g0 + up, g1 + up, g2 + up, g3 + up, u);
                    acc_u = T::dot(T::unpack(w, u), x, acc_u);
                }
            };
            if constexpr (UL > 0) {
#pragma unroll
                for (int k = 0; k < UL; ++k) {
                    const int u = sl + L * k;
                    if (u < p.n_units) unit(u, xr[k]);
                }
            } else {
                for (int u = sl; u < p.n_units; u += L) unit(u, T::load_x(xt, p, u));
            }
        };
        // Lane 0 of row i's segment: the epilogue (or the combine sum).
        const auto finish = [&](int i, float acc, float acc_u) {
            const int o = c.r0 + i;        // output row inside the slot
            if (b.mode == kBulkCombine) {  // y_s is written too (gemv.h), then summed
                const float v = acc * p.scale;
                p.y[static_cast<int64_t>(c.s) * p.y_slot_stride + o] = v;
                comb[o - w0] = fmaf(__ldg(p.comb_w + c.s), v, comb[o - w0]);
                return;
            }
            float* const y = p.y + static_cast<int64_t>(c.s) * p.y_slot_stride;
            const float* const res =
                p.residual ? p.residual + static_cast<int64_t>(c.s) * p.y_slot_stride : nullptr;
            float out;
            if (!p.glu) {
                out = acc;
                if (p.bias) out += __ldg(p.bias + o);
                out *= p.scale;
            } else {
                float g = acc, v = acc_u;
                if (p.bias) {
                    g += __ldg(p.bias + o);
                    v += __ldg(p.bias + o + p.n_half);
                }
                g *= p.scale;
                v *= p.scale;
                out = silu_mul(g, v);
            }
            if (res) out += res[o];
            y[o] = out;
        };
        // Two rows per warp at a time (rows i and i + kBulkWarps P): twice the loads in flight.
        constexpr int kStep = kBulkWarps;
        for (int i0 = warp * P; i0 < c.n; i0 += 2 * kStep * P) {
            const int ia = i0 + sg, ib = i0 + kStep * P + sg;
            const bool oka = ia < c.n, okb = ib < c.n;
            float acc_a = 0.0f, acc_ua = 0.0f, acc_b = 0.0f, acc_ub = 0.0f;
            if (oka) row_dot(ia, acc_a, acc_ua);
            if (okb) row_dot(ib, acc_b, acc_ub);
            acc_a = bulk_seg_sum(acc_a, L);
            acc_b = bulk_seg_sum(acc_b, L);
            if (p.glu) {
                acc_ua = bulk_seg_sum(acc_ua, L);
                acc_ub = bulk_seg_sum(acc_ub, L);
            }
            if (sl == 0) {
                if (oka) finish(ia, acc_a, acc_ua);
                if (okb) finish(ib, acc_b, acc_ub);
            }
        }
        __syncthreads();  // every warp is done with ring slot st (and with comb's rows of this chunk)
        // The slot's reads are ordered before the refill by the barrier above (the bulk copies of the
        // async proxy only write it after they are issued; no proxy fence: it would wait for the
        // copies in flight).
        if (tid == 0 && j + b.n_stages < n_chunks) issue_next(j + b.n_stages);
    }
    if (b.mode == kBulkCombine)
        for (int i = tid; i < w1 - w0; i += kBulkThreads) p.comb_y[w0 + i] = p.comb_res[w0 + i] + comb[i];
}

// Attributes (dynamic shared-memory limit, shared-memory carveout) of the four instantiations of a
// type on the current device; once per device. Called when a matrix is uploaded (gemv_prepare), so
// that a launch inside a graph capture makes no attribute call.
template <class T>
void gemv_bulk_prepare_type() {
    static uint64_t done = 0;  // bit per device
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 64 && (__atomic_load_n(&done, __ATOMIC_ACQUIRE) >> dev & 1u)) return;
    // PELICAN_GEMV_BULK_CARVEOUT=1: also ask for the largest shared-memory carveout (a hint; a carveout
    // other than the neighbouring kernels' may make the SMs reconfigure between them).
    static const bool carve = env_switch_set("PELICAN_GEMV_BULK_CARVEOUT");
    const auto set = [](auto kernel) {
        PELICAN_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBulkMaxSmem));
        if (carve)
            PELICAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                    cudaSharedmemCarveoutMaxShared));
    };
    set(gemv_bulk_kernel<T, 0>);
    set(gemv_bulk_kernel<T, 1>);
    set(gemv_bulk_kernel<T, 2>);
    set(gemv_bulk_kernel<T, 4>);
    if (dev < 64) __atomic_fetch_or(&done, uint64_t{1} << dev, __ATOMIC_RELEASE);
}

template <class T>
void gemv_bulk_launch_type(const GemvParams& p, const GemvBulkParams& b, int ul, int grid, size_t smem,
                           cudaStream_t stream) {
    gemv_bulk_prepare_type<T>();
    switch (ul) {
        case 1:
            launch_pdl(gemv_bulk_kernel<T, 1>, dim3(grid), dim3(kBulkThreads), smem, stream, p, b);
            break;
        case 2:
            launch_pdl(gemv_bulk_kernel<T, 2>, dim3(grid), dim3(kBulkThreads), smem, stream, p, b);
            break;
        case 4:
            launch_pdl(gemv_bulk_kernel<T, 4>, dim3(grid), dim3(kBulkThreads), smem, stream, p, b);
            break;
        default:
            launch_pdl(gemv_bulk_kernel<T, 0>, dim3(grid), dim3(kBulkThreads), smem, stream, p, b);
            break;
    }
}

#endif  // __CUDACC__

// Per-type launchers (gemv_bulk_*.cu) and attribute setup. ul: units per lane (0, 1, 2, 4).
void gemv_bulk_launch_q4_0(const GemvParams& p, const GemvBulkParams& b, int ul, int grid, size_t smem,
                           cudaStream_t stream);
void gemv_bulk_launch_q8_0(const GemvParams& p, const GemvBulkParams& b, int ul, int grid, size_t smem,
                           cudaStream_t stream);
void gemv_bulk_launch_q4_k(const GemvParams& p, const GemvBulkParams& b, int ul, int grid, size_t smem,
                           cudaStream_t stream);
void gemv_bulk_launch_q6_k(const GemvParams& p, const GemvBulkParams& b, int ul, int grid, size_t smem,
                           cudaStream_t stream);
void gemv_bulk_prepare_q4_0();
void gemv_bulk_prepare_q8_0();
void gemv_bulk_prepare_q4_k();
void gemv_bulk_prepare_q6_k();

}  // namespace pelican::cuda::detail
