// Grouped expert matmul on tensor cores for prompt chunks (moe.h: moe_group_mma), Q4_0 and Q4_K expert
// stacks.
//
// CTA = one group (kMoeGroupRows = 8 token rows of one expert) x kRowsPerCta output rows; 8 warps,
// 16 output rows each (glu: 16 gate rows and the 16 matching up rows). mma.sync m16n8k16 (f16 in,
// f32 accumulate): A = 16 weight rows x 16 k (dequantized in registers), B = 16 k x 8 tokens (x in
// shared memory as f16), C = 16 rows x 8 tokens.
//
// k order: a dot product does not depend on the order of its terms, so A and B use the same
// permutation of k. Per iteration a warp covers 4 consecutive Q4_0 blocks (128 k): lane (g, t)
// (g = lane / 4, t = lane % 4) holds block b + t of rows g and g + 8 (16 quant bytes each, one
// 16-byte load: for Q4_0 4 lanes read 64 contiguous bytes of a row, for Q4_K two 32-byte pieces of its two
// quant planes) and runs 8 mma steps; in step s its
// fragment k slots {2t, 2t+1, 2t+8, 2t+9} carry the block's values 4s .. 4s + 3 (Q4_0: byte j's low
// nibble is value j, its high nibble value j + 16; so step s < 4 reads the low nibbles of quant word
// s, step s >= 4 the high nibbles of word s - 4). x is staged per (block, step) as 8 tokens x 4
// halves, so lane (g, t)'s B fragment of step s is one 8-byte load (token g, values 4s .. 4s + 3 of
// block b + t); each block's 256 halves are followed by 16 halves of padding so that the 16 lanes of
// a half-warp hit distinct bank pairs.
//
// Q4_K: a "block" of the loop above is 16 quant bytes of one plane (gemv_params.cuh: plane 0 holds
// bytes 0..15, plane 1 bytes 16..31 of each 64-value unit u; byte j's low nibble is value j of the
// unit's first 32 (scale / min pair 0), its high nibble value 32 + j (pair 1)), so block 2u + pl's
// value v (< 32) is x column 64 u + 32 (v / 16) + 16 pl + v % 16; the staging of x follows that map.
//
// Dequantization: Q4_0 (q - 8) * d in f16 = one rounding of the exact product; Q4_K the fp32 value of
// dequantize_matrix (d sc q - dmin m, separate roundings) rounded to f16: both equal the f16 weights
// of the dense prompt GEMMs (dequantize_matrix to F16); x rounds to f16 as PrefillMatmul's does.
#include <cstdio>
#include <algorithm>
#include <atomic>
#include <cstdlib>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_traits.cuh"
#include "backend/cuda/moe.h"
#include "backend/cuda/pdl.cuh"

namespace pelican::cuda {
namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 16, kRowsPerCta = kRowsPerWarp * kWarps;
constexpr int kBlkHalves = 8 * 32 + 16;  // one block of x for 8 tokens (8 steps x 8 tokens x 4) + skew
constexpr size_t kMaxSmem = 200 * 1024;

static_assert(kMoeGroupRows == 8, "the mma's n dimension is 8 tokens");

// Two f16 values (n - 8) * d of the nibbles at bits [0, 4) and [16, 20) of v: 0x6400 | n is the
// f16 1024 + n, minus 1032 gives n - 8 exactly, then one rounding of the product.
__device__ __forceinline__ uint32_t q4_pair(uint32_t v, __half2 d) {
    const uint32_t h = v | 0x64006400u;
    const __half2 x = __hsub2(*reinterpret_cast<const __half2*>(&h), __half2half2(__ushort_as_half(0x6408)));
    const __half2 r = __hmul2(x, d);
    return *reinterpret_cast<const uint32_t*>(&r);
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint2 b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

// ---- per-type access: Rows (pointers of rows g and g + 8), Blk (one lane's block of both rows),
// load(rows, b), scales(blk, b) (the block's dequantization scales), frag(blk, scales, s, a) (step s's A
// fragment), stage(c, blk, step) (where x values 4c .. 4c + 3 go: block blk, step = value / 4 inside it) ----

__device__ __forceinline__ const uint8_t* plane_row(const MoeMmaArgs& p, int k, int64_t row) {
    return static_cast<const uint8_t*>(p.w.data) + p.w.off[k] + row * p.w.stride[k];
}

// Nibbles (hi: the high ones) of bytes 0, 1 and 2, 3 of w at bits [0, 4) and [16, 20) of two words.
__device__ __forceinline__ void nibble_pairs(uint32_t w, bool hi, uint32_t& p01, uint32_t& p23) {
    if (hi) {
        p01 = ((w >> 4) & 0xfu) | ((w << 4) & 0xf0000u);
        p23 = ((w >> 20) & 0xfu) | ((w >> 12) & 0xf0000u);
    } else {
        p01 = (w & 0xfu) | ((w & 0xf00u) << 8);
        p23 = ((w >> 16) & 0xfu) | ((w >> 8) & 0xf0000u);
    }
}

struct MmaQ4_0 {
    struct Rows {
        const uint4* qa;
        const uint4* qb;
        const unsigned short* sa;
        const unsigned short* sb;
    };
    struct Blk {
        uint4 qa, qb;
        unsigned short sa, sb;
    };
    __device__ static Rows rows(const MoeMmaArgs& p, int64_t row) {
        return {reinterpret_cast<const uint4*>(plane_row(p, 0, row)),
                reinterpret_cast<const uint4*>(plane_row(p, 0, row + 8)),
                reinterpret_cast<const unsigned short*>(plane_row(p, 1, row)),
                reinterpret_cast<const unsigned short*>(plane_row(p, 1, row + 8))};
    }
    __device__ static Blk load(const Rows& r, int b) {
        return {__ldg(r.qa + b), __ldg(r.qb + b), __ldg(r.sa + b), __ldg(r.sb + b)};
    }
    struct Scales {
        __half2 da, db;
    };
    __device__ static Scales scales(const Blk& w, int /*b*/) {
        return {__half2half2(__ushort_as_half(w.sa)), __half2half2(__ushort_as_half(w.sb))};
    }
    __device__ static void frag(const Blk& w, const Scales& sc, int s, uint32_t (&a)[4]) {
        const uint32_t qa[4] = {w.qa.x, w.qa.y, w.qa.z, w.qa.w}, qb[4] = {w.qb.x, w.qb.y, w.qb.z, w.qb.w};
        uint32_t a01, a23, b01, b23;
        nibble_pairs(qa[s & 3], s >= 4, a01, a23);
        nibble_pairs(qb[s & 3], s >= 4, b01, b23);
        a[0] = q4_pair(a01, sc.da);  // row g,     k 2t, 2t+1
        a[1] = q4_pair(b01, sc.db);  // row g + 8, k 2t, 2t+1
        a[2] = q4_pair(a23, sc.da);  // row g,     k 2t+8, 2t+9
        a[3] = q4_pair(b23, sc.db);  // row g + 8, k 2t+8, 2t+9
    }
    __device__ static void stage(int c, int& blk, int& step) {
        blk = c / 8;  // 32 values = 8 quads per block, value 4 (c % 8)
        step = c % 8;
    }
};

struct MmaQ4_K {
    struct Rows {
        const uint8_t* qa[2];  // row g: planes 0, 1 (selected with a ternary: no local-memory array)
        const uint8_t* qb[2];  // row g + 8
        const uint4* ha;
        const uint4* hb;
    };
    struct Blk {
        uint4 qa, qb, ha, hb;  // quants of rows g, g + 8 (this block's plane), their super-block headers
    };
    __device__ static Rows rows(const MoeMmaArgs& p, int64_t row) {
        return {{plane_row(p, 0, row), plane_row(p, 1, row)},
                {plane_row(p, 0, row + 8), plane_row(p, 1, row + 8)},
                reinterpret_cast<const uint4*>(plane_row(p, 2, row)),
                reinterpret_cast<const uint4*>(plane_row(p, 2, row + 8))};
    }
    __device__ static Blk load(const Rows& r, int b) {
        const int u = b >> 1;
        const uint8_t* qa = (b & 1) ? r.qa[1] : r.qa[0];
        const uint8_t* qb = (b & 1) ? r.qb[1] : r.qb[0];
        return {__ldg(reinterpret_cast<const uint4*>(qa) + u), __ldg(reinterpret_cast<const uint4*>(qb) + u),
                __ldg(r.ha + u / 4), __ldg(r.hb + u / 4)};
    }
    struct Scales {
        float dl[2][2], ml[2][2];  // [row g / g + 8][scale pair]: d sc and dmin m
    };
    __device__ static void pair_scales(const uint4& h, int u, float (&dl)[2], float (&ml)[2]) {
        int sc0, m0, sc1, m1;
        detail::q4k_scale_min(h.y, h.z, h.w, u & 3, sc0, m0, sc1, m1);
        const float d = detail::half_bits_to_float(h.x), dmin = detail::half_bits_to_float(h.x >> 16);
        dl[0] = __fmul_rn(d, static_cast<float>(sc0));
        dl[1] = __fmul_rn(d, static_cast<float>(sc1));
        ml[0] = __fmul_rn(dmin, static_cast<float>(m0));
        ml[1] = __fmul_rn(dmin, static_cast<float>(m1));
    }
    // b: the block index (its unit's position in the super-block picks the scale / min pair).
    __device__ static Scales scales(const Blk& w, int b) {
        Scales s;
        pair_scales(w.ha, b >> 1, s.dl[0], s.ml[0]);
        pair_scales(w.hb, b >> 1, s.dl[1], s.ml[1]);
        return s;
    }
    __device__ static uint32_t h2(float lo, float hi) {
        const __half2 r = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<const uint32_t*>(&r);
    }
    // Values q of byte k's nibble (hi) of w, dequantized: d sc q - dmin m in fp32 (no contraction).
    __device__ static float val(uint32_t w, int k, bool hi, float dl, float ml) {
        const uint32_t q = (w >> (8 * k + (hi ? 4 : 0))) & 15u;
        const float qf = __fsub_rn(__uint_as_float(0x4b000000u | q), 8388608.0f);  // float(q), exactly
        return __fsub_rn(__fmul_rn(dl, qf), ml);
    }
    __device__ static void frag(const Blk& w, const Scales& sc, int s, uint32_t (&a)[4]) {
        const uint32_t qa[4] = {w.qa.x, w.qa.y, w.qa.z, w.qa.w}, qb[4] = {w.qb.x, w.qb.y, w.qb.z, w.qb.w};
        const bool hi = s >= 4;
        const int pr = hi ? 1 : 0;
        const uint32_t wa = qa[s & 3], wb = qb[s & 3];
        const float dla = sc.dl[0][pr], mla = sc.ml[0][pr], dlb = sc.dl[1][pr], mlb = sc.ml[1][pr];
        a[0] = h2(val(wa, 0, hi, dla, mla), val(wa, 1, hi, dla, mla));
        a[1] = h2(val(wb, 0, hi, dlb, mlb), val(wb, 1, hi, dlb, mlb));
        a[2] = h2(val(wa, 2, hi, dla, mla), val(wa, 3, hi, dla, mla));
        a[3] = h2(val(wb, 2, hi, dlb, mlb), val(wb, 3, hi, dlb, mlb));
    }
    __device__ static void stage(int c, int& blk, int& step) {
        const int col = 4 * c, u = col / 64, r = col % 64, hi = r / 32, pl = (r % 32) / 16, j = r % 16;
        blk = 2 * u + pl;
        step = (16 * hi + j) / 4;  // value v = 16 hi + j of the block
    }
};

template <typename T>
__device__ __forceinline__ void mma_blk(const typename T::Blk& w, int b, const __half* xb, float (&c)[4]) {
    const typename T::Scales sc = T::scales(w, b);
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        uint32_t a[4];
        T::frag(w, sc, s, a);
        const uint2 bx = *reinterpret_cast<const uint2*>(xb + s * 32);
        mma16816(c, a, bx);
    }
}

template <typename T, bool GLU>
__global__ void __launch_bounds__(kThreads) moe_mma_kernel(const MoeMmaArgs p) {
    extern __shared__ __align__(16) __half xs[];  // [n_in / 32 blocks][kBlkHalves]
    const int grp = static_cast<int>(blockIdx.y);
    pdl_wait();  // group_expert and x come from earlier kernels; y may be read by earlier ones
    int e = p.group_expert[grp];
    if (e < 0) return;  // an unused group (uniform over the CTA)
    if (e >= p.n_experts) e = 0;
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int n_blk = static_cast<int>(p.w.n_in / 32);

    // Stage x (8 token rows of this group) as f16 in the (block, step, token, 4 values) order.
    const float* x = p.x + static_cast<int64_t>(grp) * kMoeGroupRows * p.x_stride;
    const int quads = static_cast<int>(p.w.n_in / 4);
    // Token fastest: 8 consecutive lanes store one (block, step)'s 64 bytes (no bank conflict).
    for (int i = tid; i < kMoeGroupRows * quads; i += kThreads) {
        const int tok = i % kMoeGroupRows, c = i / kMoeGroupRows;  // values 4c .. 4c + 3 of token tok
        const float4 v = *reinterpret_cast<const float4*>(x + static_cast<int64_t>(tok) * p.x_stride + 4 * c);
        int blk, step;
        T::stage(c, blk, step);
        const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        uint2 h;
        h.x = *reinterpret_cast<const uint32_t*>(&lo);
        h.y = *reinterpret_cast<const uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(xs + blk * kBlkHalves + step * 32 + tok * 4) = h;
    }
    __syncthreads();
    pdl_trigger();  // every input of this CTA but the weights has been read

    const int r0 = static_cast<int>(blockIdx.x) * kRowsPerCta + warp * kRowsPerWarp;  // output row
    if (r0 >= p.n_out) return;                                                        // no barrier below
    const int g = lane >> 2, t = lane & 3;
    const int64_t base = static_cast<int64_t>(e) * p.expert_rows + r0 + g;
    const typename T::Rows ra = T::rows(p, base);
    typename T::Rows rb{};
    if constexpr (GLU) rb = T::rows(p, base + p.n_out);  // the up rows: n_half = n_out rows later
    float ca[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    typename T::Blk wa = T::load(ra, t), wb{};
    if constexpr (GLU) wb = T::load(rb, t);
    for (int b0 = 0; b0 < n_blk; b0 += 4) {
        typename T::Blk na{}, nb{};
        const bool more = b0 + 4 < n_blk;
        if (more) {  // next iteration's weights in flight during this one's mma
            na = T::load(ra, b0 + 4 + t);
            if constexpr (GLU) nb = T::load(rb, b0 + 4 + t);
        }
        const __half* xb = xs + (b0 + t) * kBlkHalves + g * 4;
        mma_blk<T>(wa, b0 + t, xb, ca);
        if constexpr (GLU) mma_blk<T>(wb, b0 + t, xb, cb);
        wa = na;
        if constexpr (GLU) wb = nb;
    }
    // C fragment: ca[0], ca[1] = (row g, tokens 2t, 2t + 1); ca[2], ca[3] = (row g + 8, same tokens).
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = r0 + g + (i >= 2 ? 8 : 0), tok = 2 * t + (i & 1);
        float v = ca[i];
        if constexpr (GLU) v = v / (1.0f + expf(-v)) * cb[i];
        p.y[(static_cast<int64_t>(grp) * kMoeGroupRows + tok) * p.y_stride + row] = v;
    }
}

size_t smem_bytes(int64_t n_in) { return static_cast<size_t>(n_in / 32) * kBlkHalves * sizeof(__half); }

[[noreturn]] void mma_fail(const char* what) {
    std::fprintf(stderr, "pelican: cuda::moe_group_mma: %s\n", what);
    std::abort();
}

template <typename T, bool GLU>
void launch(const MoeMmaArgs& a, cudaStream_t stream) {
    static unsigned configured = 0;  // bit per device id (< 32)
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 32 || !(__atomic_load_n(&configured, __ATOMIC_ACQUIRE) & (1u << dev))) {
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(
            moe_mma_kernel<T, GLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMaxSmem)));
        if (dev < 32) __atomic_fetch_or(&configured, 1u << dev, __ATOMIC_RELEASE);
    }
    const dim3 grid(static_cast<unsigned>((a.n_out + kRowsPerCta - 1) / kRowsPerCta),
                    static_cast<unsigned>(a.n_groups));
    launch_pdl(moe_mma_kernel<T, GLU>, grid, dim3(kThreads), smem_bytes(a.w.n_in), stream, a);
}

// The current device's opt-in shared memory per block (bytes), capped at kMaxSmem; 0 when it cannot be
// read. Queried once per device (moe_mma_supported runs for every layer of every prompt chunk).
size_t smem_limit() {
    static std::atomic<int> cached[32] = {};  // limit + 1 per device id; 0 = not yet queried
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (dev < 32)
        if (const int c = cached[dev].load(std::memory_order_relaxed); c > 0)
            return static_cast<size_t>(c - 1);
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    const size_t limit = std::min(kMaxSmem, static_cast<size_t>(optin));
    if (dev < 32) cached[dev].store(static_cast<int>(limit) + 1, std::memory_order_relaxed);
    return limit;
}

}  // namespace

bool moe_mma_supported(const GpuMatrix& w, bool glu, int64_t expert_rows) {
    const int64_t n_out = glu ? expert_rows / 2 : expert_rows;
    // Q4_K rows are whole 256-value super-blocks (upload_matrix), so n_in % 128 holds for them.
    return (w.type == DType::Q4_0 || w.type == DType::Q4_K) && w.data != nullptr && w.n_in % 128 == 0 &&
           smem_bytes(w.n_in) <= smem_limit() && expert_rows > 0 && (!glu || expert_rows % 2 == 0) &&
           n_out % kRowsPerWarp == 0 && w.n_out >= expert_rows && w.n_out % expert_rows == 0;
}

void moe_group_mma(const MoeMmaArgs& args, cudaStream_t stream) {
    if (args.n_groups <= 0) return;
    MoeMmaArgs a = args;
    if (!moe_mma_supported(a.w, a.glu, a.expert_rows))
        mma_fail("unsupported matrix (Q4_0 / Q4_K, n_in % 128, rows % 16)");
    if (!a.group_expert || !a.x || !a.y) mma_fail("null pointer");
    if (a.x_stride < a.w.n_in || a.y_stride < a.n_out) mma_fail("row stride below the row width");
    if (a.n_out != (a.glu ? a.expert_rows / 2 : a.expert_rows)) mma_fail("n_out does not match expert_rows");
    if (a.x_stride % 4 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0)
        mma_fail("x rows not 16-byte aligned");
    if (a.n_groups > 65535) mma_fail("more than 65535 groups (grid y)");
    a.n_experts = static_cast<int>(a.w.n_out / a.expert_rows);
    if (a.w.type == DType::Q4_K) {
        if (a.glu)
            launch<MmaQ4_K, true>(a, stream);
        else
            launch<MmaQ4_K, false>(a, stream);
    } else if (a.glu) {
        launch<MmaQ4_0, true>(a, stream);
    } else {
        launch<MmaQ4_0, false>(a, stream);
    }
}

}  // namespace pelican::cuda
