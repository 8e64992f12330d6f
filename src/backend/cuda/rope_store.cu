// rope_store_kv: per-head RMSNorm (optional) + rotary embedding of q and k, k/v into the cache.
//
// One warp per (token, head) over q, k and v heads. A q/k head is staged in shared memory (the
// rotation reads pairs across lanes): x -> x / sqrt(mean(x^2) + eps) * w' (fp32 sum of squares),
// then for i < n_rot / 2: angle = float(pos) * inv_freq[i] (fp32 product, as HF), cos/sin with
// the accurate sincosf (this file must not be built with --use_fast_math), times mscale, and
// (a, b) <- (a cos - b sin, a sin + b cos). q goes back in place; k and v rows are converted to
// the cache type (f16: round to nearest even) at position *pos0_dev + t (or, for paged memory,
// at position row_pos[t] into cache row row_slot[t]).
// With a rope table (rope_table_build: the same fp32 angle, sincosf and mscale product, done once
// per position) the kernel reads (cos, sin) instead: bit-identical, and no slow-path sincosf for
// large angles on the decode path.
// PDL: pdl_wait() before anything (qkv, pos0 and the cache belong to earlier / later kernels),
// then pdl_trigger() at once (dependents still wait for this grid to finish).
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_impl.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/pdl.cuh"

#include <cstdio>
#include <cstdlib>

namespace pelican::cuda {
namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ void store_cache(void* cache, bool f16, size_t idx, float x) {
    if (f16)
        static_cast<__half*>(cache)[idx] = __float2half_rn(x);
    else
        static_cast<float*>(cache)[idx] = x;
}

__global__ void __launch_bounds__(kWarps * 32) rope_store_kernel(const RopeStoreArgs a) {
    extern __shared__ float buf[];  // [kWarps][head_dim]
    pdl_wait();
    pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int heads = a.n_head + 2 * a.n_kv_head;
    const int unit = blockIdx.x * kWarps + warp;
    if (unit >= a.n_tok * heads) return;  // whole warp; the kernel has no block barrier
    const int t = unit / heads, hh = unit % heads;
    const int hd = a.head_dim;
    const int64_t q_dim = static_cast<int64_t>(a.n_head) * hd,
                  kv_dim = static_cast<int64_t>(a.n_kv_head) * hd;
    float* row = a.qkv + t * (a.row_stride > 0 ? a.row_stride : q_dim + 2 * kv_dim);
    const int64_t pos =
        a.row_pos ? static_cast<int64_t>(a.row_pos[t]) : static_cast<int64_t>(*a.pos0_dev) + t;
    const int64_t at = a.row_slot ? static_cast<int64_t>(a.row_slot[t]) : pos;  // cache row
    const bool f16 = a.kv.type == DType::F16;

    if (hh >= a.n_head + a.n_kv_head) {  // v head: copy into the cache
        const int kvh = hh - a.n_head - a.n_kv_head;
        const float* src = row + q_dim + kv_dim + static_cast<int64_t>(kvh) * hd;
        const size_t off = (static_cast<size_t>(at) * a.n_kv_head + kvh) * hd;
        for (int d = lane; d < hd; d += 32) store_cache(a.kv.v, f16, off + d, src[d]);
        return;
    }
    const bool is_q = hh < a.n_head;
    const int head = is_q ? hh : hh - a.n_head;
    float* src = row + (is_q ? 0 : q_dim) + static_cast<int64_t>(head) * hd;
    const size_t off = (static_cast<size_t>(at) * a.n_kv_head + head) * hd;  // k only
    float* b = buf + warp * hd;
    const float* w = is_q ? a.q_norm : a.k_norm;
    float ss = 0.0f;
    for (int d = lane; d < hd; d += 32) {
        const float x = src[d];
        b[d] = x;
        ss = fmaf(x, x, ss);
    }
    if (w) {
        ss = attn::warp_sum(ss);
        const float inv = 1.0f / sqrtf(ss / static_cast<float>(hd) + a.norm_eps);
        for (int d = lane; d < hd; d += 32) b[d] = b[d] * inv * (a.norm_one_plus ? 1.0f + w[d] : w[d]);
    }
    __syncwarp();
    auto put = [&](int d, float y) {
        if (is_q)
            src[d] = y;
        else
            store_cache(a.kv.k, f16, off + d, y);
    };
    const int half = a.n_rot / 2;
    for (int i = lane; i < half; i += 32) {
        const int ia = a.neox ? i : 2 * i, ib = a.neox ? i + half : 2 * i + 1;
        float sn, cs;
        if (a.rope_table) {
            const float2 e = *reinterpret_cast<const float2*>(a.rope_table + pos * a.n_rot + 2 * i);
            cs = e.x;
            sn = e.y;
        } else {
            const float angle = static_cast<float>(pos) * a.inv_freq[i];
            sincosf(angle, &sn, &cs);
            cs *= a.mscale;
            sn *= a.mscale;
        }
        const float x0 = b[ia], x1 = b[ib];
        put(ia, x0 * cs - x1 * sn);
        put(ib, x0 * sn + x1 * cs);
    }
    for (int d = a.n_rot + lane; d < hd; d += 32) put(d, b[d]);
}

__global__ void rope_table_kernel(const float* inv_freq, int n_rot, int64_t n_pos, float mscale,
                                  float* cos_sin) {
    const int half = n_rot / 2;
    const int64_t n = n_pos * half;
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
         e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t pos = e / half;
        const int i = static_cast<int>(e - pos * half);
        const float angle = static_cast<float>(pos) * inv_freq[i];
        float sn, cs;
        sincosf(angle, &sn, &cs);
        cs *= mscale;
        sn *= mscale;
        reinterpret_cast<float2*>(cos_sin)[e] = make_float2(cs, sn);
    }
}

}  // namespace

void rope_table_build(const float* inv_freq, int n_rot, int64_t n_pos, float mscale, float* cos_sin,
                      cudaStream_t stream) {
    if (n_rot <= 0 || n_pos <= 0) return;
    if (n_rot % 2 != 0 || !inv_freq || !cos_sin) {
        std::fprintf(stderr, "pelican: rope_table_build: bad arguments (n_rot %d)\n", n_rot);
        std::abort();
    }
    const int64_t n = n_pos * (n_rot / 2);
    const int64_t blocks = (n + 255) / 256;
    rope_table_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(
        inv_freq, n_rot, n_pos, mscale, cos_sin);
    PELICAN_CUDA_CHECK_LAUNCH();
}

void rope_store_kv(const RopeStoreArgs& a, cudaStream_t stream) {
    if (a.n_tok < 1) return;
    if (a.head_dim <= 0 || a.n_rot < 0 || a.n_rot % 2 != 0 || a.n_rot > a.head_dim ||
        (!a.pos0_dev && !a.row_pos) || (a.n_rot > 0 && !a.inv_freq) ||
        (a.kv.type != DType::F16 && a.kv.type != DType::F32)) {
        std::fprintf(stderr, "pelican: rope_store_kv: bad arguments (head_dim %d, n_rot %d)\n", a.head_dim,
                     a.n_rot);
        std::abort();
    }
    const int64_t units = static_cast<int64_t>(a.n_tok) * (a.n_head + 2 * a.n_kv_head);
    const unsigned blocks = static_cast<unsigned>((units + kWarps - 1) / kWarps);
    const size_t smem = static_cast<size_t>(kWarps) * a.head_dim * sizeof(float);
    launch_pdl(rope_store_kernel, dim3(blocks), dim3(kWarps * 32), smem, stream, a);
}

}  // namespace pelican::cuda
