// Grouped expert matmul on tensor cores for prompt chunks (moe.h: moe_group_mma), Q4_0 expert stacks.
//
// CTA = one group (kMoeGroupRows = 8 token rows of one expert) x kRowsPerCta output rows; 8 warps,
// 16 output rows each (glu: 16 gate rows and the 16 matching up rows). mma.sync m16n8k16 (f16 in,
// f32 accumulate): A = 16 weight rows x 16 k (dequantized in registers), B = 16 k x 8 tokens (x in
// shared memory as f16), C = 16 rows x 8 tokens.
//
// k order: a dot product does not depend on the order of its terms, so A and B use the same
// permutation of k. Per iteration a warp covers 4 consecutive Q4_0 blocks (128 k): lane (g, t)
// (g = lane / 4, t = lane % 4) holds block b + t of rows g and g + 8 (16 quant bytes each, one
// 16-byte load: 4 lanes read 64 contiguous bytes of a row) and runs 8 mma steps; in step s its
// fragment k slots {2t, 2t+1, 2t+8, 2t+9} carry the block's values 4s .. 4s + 3 (Q4_0: byte j's low
// nibble is value j, its high nibble value j + 16; so step s < 4 reads the low nibbles of quant word
// s, step s >= 4 the high nibbles of word s - 4). x is staged per (block, step) as 8 tokens x 4
// halves, so lane (g, t)'s B fragment of step s is one 8-byte load (token g, values 4s .. 4s + 3 of
// block b + t); each block's 256 halves are followed by 16 halves of padding so that the 16 lanes of
// a half-warp hit distinct bank pairs.
//
// Dequantization: (q - 8) * d in f16 = one rounding of the exact product, as dequantize_matrix to
// F16 (the dense prompt GEMMs' weights); x rounds to f16 as PrefillMatmul's activations do.
#include <cstdio>
#include <cstdlib>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.h"
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

// The A fragment of step s for rows (g, g + 8): quant words wa, wb (word s & 3), scales da, db.
__device__ __forceinline__ void a_frag(uint32_t wa, uint32_t wb, __half2 da, __half2 db, bool hi,
                                       uint32_t (&a)[4]) {
    // values 4s + {0, 1} -> bits [0,4) / [16,20); values 4s + {2, 3} likewise
    uint32_t a01, a23, b01, b23;
    if (hi) {
        a01 = ((wa >> 4) & 0xfu) | ((wa << 4) & 0xf0000u);
        a23 = ((wa >> 20) & 0xfu) | ((wa >> 12) & 0xf0000u);
        b01 = ((wb >> 4) & 0xfu) | ((wb << 4) & 0xf0000u);
        b23 = ((wb >> 20) & 0xfu) | ((wb >> 12) & 0xf0000u);
    } else {
        a01 = (wa & 0xfu) | ((wa & 0xf00u) << 8);
        a23 = ((wa >> 16) & 0xfu) | ((wa >> 8) & 0xf0000u);
        b01 = (wb & 0xfu) | ((wb & 0xf00u) << 8);
        b23 = ((wb >> 16) & 0xfu) | ((wb >> 8) & 0xf0000u);
    }
    a[0] = q4_pair(a01, da);  // row g,     k 2t, 2t+1
    a[1] = q4_pair(b01, db);  // row g + 8, k 2t, 2t+1
    a[2] = q4_pair(a23, da);  // row g,     k 2t+8, 2t+9
    a[3] = q4_pair(b23, db);  // row g + 8, k 2t+8, 2t+9
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint2 b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

struct RowPair {  // rows g and g + 8 of one 16-row tile: quant and scale row pointers
    const uint4* qa;
    const uint4* qb;
    const unsigned short* sa;
    const unsigned short* sb;
};

__device__ __forceinline__ RowPair row_pair(const MoeMmaArgs& p, int64_t row) {
    const auto* q = static_cast<const uint8_t*>(p.w.data) + p.w.off[0];
    const auto* s = static_cast<const uint8_t*>(p.w.data) + p.w.off[1];
    RowPair r;
    r.qa = reinterpret_cast<const uint4*>(q + row * p.w.stride[0]);
    r.qb = reinterpret_cast<const uint4*>(q + (row + 8) * p.w.stride[0]);
    r.sa = reinterpret_cast<const unsigned short*>(s + row * p.w.stride[1]);
    r.sb = reinterpret_cast<const unsigned short*>(s + (row + 8) * p.w.stride[1]);
    return r;
}

struct Blk {  // one lane's block of rows g and g + 8
    uint4 qa, qb;
    unsigned short sa, sb;
};

__device__ __forceinline__ Blk load_blk(const RowPair& r, int b) {
    return {__ldg(r.qa + b), __ldg(r.qb + b), __ldg(r.sa + b), __ldg(r.sb + b)};
}

__device__ __forceinline__ void mma_blk(const Blk& w, const __half* xb, float (&c)[4]) {
    const __half2 da = __half2half2(__ushort_as_half(w.sa)), db = __half2half2(__ushort_as_half(w.sb));
    const uint32_t qa[4] = {w.qa.x, w.qa.y, w.qa.z, w.qa.w}, qb[4] = {w.qb.x, w.qb.y, w.qb.z, w.qb.w};
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        uint32_t a[4];
        a_frag(qa[s & 3], qb[s & 3], da, db, s >= 4, a);
        const uint2 b = *reinterpret_cast<const uint2*>(xb + s * 32);
        mma16816(c, a, b);
    }
}

template <bool GLU>
__global__ void __launch_bounds__(kThreads) moe_mma_q4_0_kernel(const MoeMmaArgs p) {
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
    for (int i = tid; i < kMoeGroupRows * quads; i += kThreads) {
        const int tok = i / quads, c = i % quads;  // values 4c .. 4c + 3 of token tok
        const float4 v = *reinterpret_cast<const float4*>(x + static_cast<int64_t>(tok) * p.x_stride + 4 * c);
        __half2* d = reinterpret_cast<__half2*>(xs + (c / 8) * kBlkHalves + (c % 8) * 32 + tok * 4);
        d[0] = __floats2half2_rn(v.x, v.y);
        d[1] = __floats2half2_rn(v.z, v.w);
    }
    __syncthreads();

    const int r0 = static_cast<int>(blockIdx.x) * kRowsPerCta + warp * kRowsPerWarp;  // output row
    if (r0 >= p.n_out) return;                                                        // no barrier below
    const int g = lane >> 2, t = lane & 3;
    const int64_t base = static_cast<int64_t>(e) * p.expert_rows + r0 + g;
    const RowPair ra = row_pair(p, base);
    RowPair rb{};
    if constexpr (GLU) rb = row_pair(p, base + p.n_out);  // the up rows: n_half = n_out rows later
    float ca[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    Blk wa = load_blk(ra, t), wb{};
    if constexpr (GLU) wb = load_blk(rb, t);
    for (int b0 = 0; b0 < n_blk; b0 += 4) {
        Blk na{}, nb{};
        const bool more = b0 + 4 < n_blk;
        if (more) {  // next iteration's weights in flight during this one's mma
            na = load_blk(ra, b0 + 4 + t);
            if constexpr (GLU) nb = load_blk(rb, b0 + 4 + t);
        }
        const __half* xb = xs + (b0 + t) * kBlkHalves + g * 4;
        mma_blk(wa, xb, ca);
        if constexpr (GLU) mma_blk(wb, xb, cb);
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

template <bool GLU>
void launch(const MoeMmaArgs& a, cudaStream_t stream) {
    static unsigned configured = 0;  // bit per device id (< 32)
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 32 || !(__atomic_load_n(&configured, __ATOMIC_ACQUIRE) & (1u << dev))) {
        PELICAN_CUDA_CHECK(cudaFuncSetAttribute(moe_mma_q4_0_kernel<GLU>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(kMaxSmem)));
        if (dev < 32) __atomic_fetch_or(&configured, 1u << dev, __ATOMIC_RELEASE);
    }
    const dim3 grid(static_cast<unsigned>((a.n_out + kRowsPerCta - 1) / kRowsPerCta),
                    static_cast<unsigned>(a.n_groups));
    launch_pdl(moe_mma_q4_0_kernel<GLU>, grid, dim3(kThreads), smem_bytes(a.w.n_in), stream, a);
}

}  // namespace

bool moe_mma_supported(const GpuMatrix& w, bool glu, int64_t expert_rows) {
    const int64_t n_out = glu ? expert_rows / 2 : expert_rows;
    return w.type == DType::Q4_0 && w.data != nullptr && w.n_in % 128 == 0 &&
           smem_bytes(w.n_in) <= kMaxSmem && expert_rows > 0 && (!glu || expert_rows % 2 == 0) &&
           n_out % kRowsPerWarp == 0 && w.n_out % expert_rows == 0;
}

void moe_group_mma(const MoeMmaArgs& args, cudaStream_t stream) {
    if (args.n_groups <= 0) return;
    MoeMmaArgs a = args;
    if (!moe_mma_supported(a.w, a.glu, a.expert_rows))
        mma_fail("unsupported matrix (Q4_0, n_in % 128, rows % 16)");
    if (!a.group_expert || !a.x || !a.y) mma_fail("null pointer");
    if (a.x_stride < a.w.n_in || a.y_stride < a.n_out) mma_fail("row stride below the row width");
    if (a.n_out != (a.glu ? a.expert_rows / 2 : a.expert_rows)) mma_fail("n_out does not match expert_rows");
    if (a.x_stride % 4 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0)
        mma_fail("x rows not 16-byte aligned");
    a.n_experts = static_cast<int>(a.w.n_out / a.expert_rows);
    if (a.glu)
        launch<true>(a, stream);
    else
        launch<false>(a, stream);
}

}  // namespace pelican::cuda
