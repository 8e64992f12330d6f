// Private to the attention .cu files: small device helpers (cp.async, vector loads, warp
// reductions, mma.sync) and the CUDA-core "rows" attention kernel's parameters and shared-memory
// layout. The rows kernel (attention_rows.cu) serves decode (split-KV, graph-capturable) and the
// fp32 prefill path; the tensor-core prefill kernel lives in attention_prefill.cu.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pelican::cuda::attn {

// ---- rows kernel configuration ---------------------------------------------------------------
inline constexpr int kThreads = 256;    // threads per CTA
inline constexpr int kStages = 3;       // cp.async pipeline depth (K/V tiles in flight)
inline constexpr int kMaxRows = 32;     // query rows (token, group head) per CTA
inline constexpr int kMaxTok = 8;       // decode: n_tok <= kMaxTok
inline constexpr int kMinChunk = 128;   // decode: fewest keys per split
inline constexpr int kMaxSplits = 128;  // decode: most splits per (kv head, row block)

// Keys per K/V tile: 8 KiB of K (and of V) per stage at the fast head dims; the generic path
// (HD == 0, any even head_dim <= 256) sizes for 256.
__host__ __device__ constexpr int tile_keys(int es, int HD) {
    return HD ? 8192 / (HD * es) : 8192 / (256 * es);
}

__host__ __device__ constexpr size_t align16(size_t n) { return (n + 15) & ~size_t{15}; }

// Dynamic shared memory of one rows CTA (byte offsets). The K/V stage region is reused after the
// last tile as the reduction buffer (j-slice partials, then the split combine).
struct RowsSmem {
    size_t q;     // [rows][hd] fp32 query rows
    size_t kv;    // K stages [kStages][T][row_bytes], then V stages; or the reduction buffer
    size_t sc;    // [rows4][T] fp32 scores, then probabilities
    size_t stat;  // [3][rows4] fp32 running max, running sum, rescale factor
    size_t total;
    int row_bytes;  // one key's row in a stage: hd * es + 16 (the pad staggers banks)
};

__host__ __device__ inline RowsSmem rows_smem(int rows, int hd, int es, int T) {
    const size_t rows4 = static_cast<size_t>((rows + 3) & ~3);
    const size_t hd4 = static_cast<size_t>((hd + 3) & ~3);
    RowsSmem s{};
    s.row_bytes = hd * es + 16;
    size_t off = 0;
    s.q = off;
    off += align16(static_cast<size_t>(rows) * hd * 4);
    s.kv = off;
    const size_t stage = 2ull * kStages * T * static_cast<size_t>(s.row_bytes);
    const size_t red =
        4 *
        (static_cast<size_t>(kThreads) * 16 > rows4 * hd4 ? static_cast<size_t>(kThreads) * 16 : rows4 * hd4);
    off += align16(stage > red ? stage : red);
    s.sc = off;
    off += align16(rows4 * T * 4);
    s.stat = off;
    off += align16(3 * rows4 * 4);
    s.total = off;
    return s;
}

// One rows-kernel launch. Row r of a kv head's group is (token r / group, head kvh * group +
// r % group); CTA (split, kvh, z) takes rows z * rows_cta .. + rows_cta and the keys of its
// split of the rows' causal range.
struct RowsParams {
    const float* q;    // [n_tok][q_stride] fp32
    int64_t q_stride;  // floats between tokens
    int n_tok, n_head, n_kv_head, head_dim, group;
    float scale;
    int64_t window;
    const int32_t* pos0_dev;  // if set, pos0 = *pos0_dev (decode); else pos0_host
    int64_t pos0_host;
    const void* k;  // cache [n_ctx][n_kv_head][head_dim] (F16 or F32)
    const void* v;
    float* out;         // [n_tok][n_head][head_dim]
    int rows_cta;       // rows per CTA (<= kMaxRows)
    int n_splits;       // == gridDim.x
    int64_t min_chunk;  // fewest keys per split
    // Split partials (decode with n_splits > 1): slot = (split * n_kv_head + kvh) * group * n_tok + row.
    int* counters;   // [n_kv_head * row blocks] arrival counters (zero between launches)
    float2* ml;      // [slots] (running max, running sum)
    float* acc;      // [slots][acc_stride] unnormalised output
    int acc_stride;  // floats, multiple of 4, >= head_dim
    // Two-level combine (streaming kernel; null group_ml: one level): group partials laid out as the
    // split partials with the group index in place of the split, and per (kv head, row block)
    // kCombineGroups arrival counters (zero between launches).
    int* group_counters;  // [n_kv_head * nz * kCombineGroups]
    float2* group_ml;     // [kCombineGroups * n_kv_head * group * n_tok]
    float* group_acc;     // [same slots][acc_stride]
};

// Two-level combine of the streaming decode kernel: used above kCombineDirect active splits, with
// groups of combine_group_size(n) splits, at most kCombineGroups groups (kMaxSplits = 128: 11 groups of
// 12, the last one of 8).
inline constexpr int kCombineDirect = 8;
inline constexpr int kCombineGroups = 16;
__host__ __device__ constexpr int combine_group_size(int n_active) {
    int g = 4;
    while (g * g < n_active) ++g;  // ceil(sqrt(n)), at least 4
    return g;
}
constexpr bool combine_groups_fit() {  // every n in (kCombineDirect, kMaxSplits]
    for (int n = kCombineDirect + 1; n <= kMaxSplits; ++n)
        if ((n + combine_group_size(n) - 1) / combine_group_size(n) > kCombineGroups) return false;
    return true;
}
static_assert(combine_groups_fit(), "the groups of every split count fit the group slots");

// Launches attn_rows_kernel for (kv type, head_dim) with grid (n_splits, n_kv_head, nz) (PDL).
void launch_rows(const RowsParams& p, bool kv_f16, int nz, cudaStream_t stream);

// ---- streaming decode kernel (attention_stream.cu) ---------------------------------------------
inline constexpr int kStreamThreads = 128;  // 4 warps
inline constexpr int kStreamMaxRows = 8;    // rows per CTA (rows_cta)
inline constexpr int kStreamMinChunk = 64;  // fewest keys per split
// F16 cache at head_dim 64 / 128 / 256 with 16-byte aligned K and V.
bool stream_supported(int head_dim, const void* k, const void* v);
// Grid (nz, n_splits, n_kv_head); sets p.n_splits itself: one wave of resident CTAs
// (occupancy x sms) over n_kv_head * nz, at most max_splits. Needs pos0_dev. PDL launch.
void launch_stream(const RowsParams& p, int nz, int sms, int max_splits, cudaStream_t stream);

// ---- device helpers ----------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Async copy of CB bytes (16 or 4) global -> shared; zero-fills the destination when !ok.
template <int CB>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool ok) {
    const int n = ok ? CB : 0;
    if constexpr (CB == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(n)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(n)
                     : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// N consecutive elements (16, 8 or 4 bytes aligned accordingly) to fp32.
template <int N>
__device__ __forceinline__ void load_f32(const __half* p, float (&o)[N]) {
    static_assert(N == 8 || N == 4 || N == 2);
    if constexpr (N == 8) {
        const uint4 u = *reinterpret_cast<const uint4*>(p);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
            o[2 * i] = f.x;
            o[2 * i + 1] = f.y;
        }
    } else if constexpr (N == 4) {
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
        const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
        o[0] = a.x, o[1] = a.y, o[2] = b.x, o[3] = b.y;
    } else {
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(p));
        o[0] = a.x, o[1] = a.y;
    }
}
template <int N>
__device__ __forceinline__ void load_f32(const float* p, float (&o)[N]) {
    static_assert(N == 8 || N == 4 || N == 2);
    if constexpr (N == 2) {
        const float2 a = *reinterpret_cast<const float2*>(p);
        o[0] = a.x, o[1] = a.y;
    } else {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            const float4 a = *reinterpret_cast<const float4*>(p + i);
            o[i] = a.x, o[i + 1] = a.y, o[i + 2] = a.z, o[i + 3] = a.w;
        }
    }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---- tensor-core helpers (sm_80+) --------------------------------------------------------------
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
// d += a (16x16 f16, row) * b (16x8 f16, col), fp32 accumulation.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace pelican::cuda::attn
