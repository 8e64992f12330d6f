// qmatmul (qmatmul.h): argument checks, the launch plan (tile configuration from n_tok, split-K from
// the SM count), the x pre-pass kernel and the dispatch to the per-type kernels (qmatmul_<type>.cu).
//
// Workspace layout (offsets 256-byte aligned): [x as f16 in fragment order: n_tok_pad x n_in halves]
// [split-K counters: kMaxSlices u32] [split-K partials: split x tiles x MT x NT fp32].
#include "backend/cuda/qmatmul.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/qmatmul_impl.cuh"

namespace pelican::cuda {
namespace {

using qmm::Config;
using qmm::kConfigTable;

int g_force_split = 0;    // qmatmul_force_split
int g_force_config = -1;  // qmatmul_force_config

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "pelican: cuda::qmatmul: %s\n", what);
    std::abort();
}

size_t align256(size_t v) { return (v + 255) / 256 * 256; }
constexpr size_t kCtrBytes = (qmm::kMaxSlices * sizeof(unsigned) + 255) / 256 * 256;

// SM count and shared memory per SM of the current device, queried once per device (ids < 32).
struct DeviceLimits {
    int sms = 132;
    int smem_per_sm = 228 * 1024;
};
DeviceLimits device_limits() {
    static std::atomic<int> cached_sms[32] = {}, cached_smem[32] = {};  // 0 = not yet queried
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    DeviceLimits l;
    if (dev < 32) {
        const int s = cached_sms[dev].load(std::memory_order_relaxed);
        const int m = cached_smem[dev].load(std::memory_order_relaxed);
        if (s > 0 && m > 0) return {s, m};
    }
    PELICAN_CUDA_CHECK(cudaDeviceGetAttribute(&l.sms, cudaDevAttrMultiProcessorCount, dev));
    PELICAN_CUDA_CHECK(
        cudaDeviceGetAttribute(&l.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    if (dev < 32) {
        cached_sms[dev].store(l.sms, std::memory_order_relaxed);
        cached_smem[dev].store(l.smem_per_sm, std::memory_order_relaxed);
    }
    return l;
}

// Token tile from the token count: the smallest that holds them all up to 64 (the weights are read
// once), then tiles of 128.
int pick_config(int n_tok) { return n_tok <= 16 ? 0 : n_tok <= 32 ? 1 : n_tok <= 64 ? 2 : 3; }

struct Plan {
    int cfg = 0, mt = 0, nt = 0;
    int tok_tiles = 0, row_tiles = 0, split = 1, n_kt = 0, n_tok_pad = 0;
    size_t xh_bytes = 0, ctr_off = 0, part_off = 0, bytes = 0;
};

// Split-K factor: the fewest k tiles per CTA slot over whole waves of resident CTAs, each CTA paying
// ~2 tiles of pipeline fill and a split one more for its partial sums; at most kMaxSplit, n_kt and the
// partial-sum area's kMaxSlices.
int choose_split(int base, int n_kt, int target) {
    const int max_s = std::min({qmm::kMaxSplit, n_kt, std::max(1, qmm::kMaxSlices / base)});
    if (g_force_split > 0) return std::clamp(g_force_split, 1, max_s);
    int best = 1;
    double best_cost = 0.0;
    for (int s = 1; s <= max_s; ++s) {
        const int64_t ctas = static_cast<int64_t>(base) * s;
        const int64_t waves = (ctas + target - 1) / target;
        const double cost = static_cast<double>(waves) * ((n_kt + s - 1) / s + 2) + (s > 1 ? 1.0 : 0.0);
        if (s == 1 || cost < best_cost) {
            best = s;
            best_cost = cost;
        }
    }
    return best;
}

Plan make_plan(const GpuMatrix& w, int n_tok) {
    Plan pl;
    pl.cfg = g_force_config >= 0 ? g_force_config : pick_config(n_tok);
    const Config& c = kConfigTable[pl.cfg];
    pl.mt = qmm::cfg_rows(c);
    pl.nt = qmm::cfg_tokens(c);
    pl.tok_tiles = (n_tok + pl.nt - 1) / pl.nt;
    pl.n_tok_pad = pl.tok_tiles * pl.nt;
    pl.row_tiles = static_cast<int>((w.n_out + pl.mt - 1) / pl.mt);
    pl.n_kt = static_cast<int>(w.n_in / qmm::kKT);
    const DeviceLimits lim = device_limits();
    const size_t smem = qmm::smem_bytes(qmm::row_bytes(w.type), c);
    const int by_smem = static_cast<int>(static_cast<size_t>(lim.smem_per_sm) / (smem + 1024));
    const int per_sm = std::max(1, std::min(qmm::cfg_min_blocks(c), by_smem));
    const int base = pl.row_tiles * pl.tok_tiles;
    pl.split = choose_split(base, pl.n_kt, std::max(1, lim.sms * per_sm));
    pl.xh_bytes = align256(static_cast<size_t>(pl.n_tok_pad) * static_cast<size_t>(w.n_in) * 2);
    pl.ctr_off = pl.xh_bytes;
    pl.part_off = pl.ctr_off + kCtrBytes;
    pl.bytes = pl.part_off + (pl.split > 1 ? static_cast<size_t>(pl.split) * base * pl.mt * pl.nt * 4 : 0);
    return pl;
}

// x [n_tok, n_in] fp32 -> the f16 fragment order of qmatmul_impl.cuh, zeros for the padding tokens
// n_tok .. n_tok_pad - 1; thread = (token, 4 consecutive k). Also zeroes the split-K counters.
__global__ void __launch_bounds__(256) qmm_stage_x(const qmm::StageParams p) {
    pdl_wait();     // x comes from an earlier kernel; the workspace may still be read by the previous call
    pdl_trigger();  // the main kernel may start streaming its weights (it waits for this grid to finish)
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx < p.n_ctr) p.ctr[idx] = 0u;
    const int nq = p.n_in / 4;
    if (idx >= static_cast<int64_t>(p.n_tok_pad) * nq) return;
    const int tok = static_cast<int>(idx / nq), k = 4 * static_cast<int>(idx % nq);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (tok < p.n_tok) {
        const float* xr = p.x + static_cast<int64_t>(tok) * p.x_stride + k;
        v = p.x_vec ? *reinterpret_cast<const float4*>(xr) : make_float4(xr[0], xr[1], xr[2], xr[3]);
    }
    int kt, t, s;  // k tile, block (lane column), step; value index i = k % 4 = 0 .. 3 of v
    if (p.q4k) {
        const int u = k >> 6, r = k & 63, hi = r >> 5, pl = (r >> 4) & 1, j = r & 15;
        kt = u >> 1;
        t = 2 * (u & 1) + pl;
        s = (16 * hi + j) >> 2;
    } else {
        kt = k >> 7;
        t = (k >> 5) & 3;
        s = (k & 31) >> 2;
    }
    const int pair = tok >> 4, h = (tok >> 3) & 1, g = tok & 7;
    const int64_t rec = (static_cast<int64_t>(kt) * 8 + s) * (p.n_tok_pad / 16) + pair;
    uint2 o;
    o.x = qmm::pack_h2(v.x, v.z);  // (v0, v2): b0 b1 of the fragment
    o.y = qmm::pack_h2(v.y, v.w);  // (v1, v3): b2 b3
    *reinterpret_cast<uint2*>(p.xh + rec * 256 + (g * 4 + t) * 8 + h * 4) = o;
}

}  // namespace

bool qmatmul_supported(const GpuMatrix& w) {
    if (w.type != DType::Q4_0 && w.type != DType::Q8_0 && w.type != DType::Q4_K && w.type != DType::Q6_K)
        return false;
    if (w.data == nullptr || w.n_in <= 0 || w.n_in % 256 != 0 || w.n_in > (int64_t{1} << 28) || w.n_out < 1 ||
        w.n_out > int64_t{65535} * 128)
        return false;
    detail::GemvLayout l;
    if (!detail::gemv_layout(w.type, w.n_in, &l)) return false;
    for (int k = 0; k < l.n_planes; ++k)
        if (w.stride[k] != l.stride[k] || w.off[k] % 16 != 0) return false;
    return true;
}

size_t qmatmul_workspace_bytes(int64_t max_n_in, int64_t max_n_out, int max_tok) {
    if (max_n_in <= 0 || max_n_out <= 0 || max_tok <= 0) return 0;
    const size_t tok_pad =
        (static_cast<size_t>(max_tok) + qmm::kMaxTokTile - 1) / qmm::kMaxTokTile * qmm::kMaxTokTile;
    const size_t rows_pad = (static_cast<size_t>(max_n_out) + 255) / 256 * 256;
    const size_t part = std::min(static_cast<size_t>(qmm::kMaxSlices) * qmm::kMaxTileElems,
                                 static_cast<size_t>(qmm::kMaxSplit) * rows_pad * tok_pad) *
                        4;
    return align256(tok_pad * static_cast<size_t>(max_n_in) * 2) + kCtrBytes + part;
}

QmatmulPlan qmatmul_plan(const GpuMatrix& w, int n_tok) {
    QmatmulPlan r;
    if (!qmatmul_supported(w) || n_tok <= 0) return r;
    const Plan pl = make_plan(w, n_tok);
    r.config = pl.cfg;
    r.rows_per_cta = pl.mt;
    r.tokens_per_cta = pl.nt;
    r.split = pl.split;
    r.ctas = pl.split * pl.row_tiles * pl.tok_tiles;
    r.workspace = pl.bytes;
    return r;
}

void qmatmul_force_split(int split) { g_force_split = split > 0 ? split : 0; }

int qmatmul_config_count() { return qmm::kConfigs; }

void qmatmul_force_config(int config) {
    g_force_config = config >= 0 && config < qmm::kConfigs ? config : -1;
}

void qmatmul(const GpuMatrix& w, const float* x, int64_t x_stride, int n_tok, float* y, int64_t y_stride,
             void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    if (n_tok <= 0) return;
    if (!qmatmul_supported(w))
        fail("unsupported matrix (Q4_0 / Q8_0 / Q4_K / Q6_K, n_in a multiple of 256, gpu_matrix layout)");
    if (x == nullptr || y == nullptr || workspace == nullptr) fail("null pointer");
    if (x_stride < w.n_in || y_stride < w.n_out) fail("row stride below the row width");
    if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0) fail("workspace not 256-byte aligned");
    const Plan pl = make_plan(w, n_tok);
    if (pl.bytes > workspace_bytes) {
        std::fprintf(stderr, "pelican: cuda::qmatmul: workspace of %zu bytes, this call needs %zu\n",
                     workspace_bytes, pl.bytes);
        std::abort();
    }
    auto* ws = static_cast<uint8_t*>(workspace);

    qmm::StageParams sp;
    sp.x = x;
    sp.x_stride = x_stride;
    sp.x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && x_stride % 4 == 0;
    sp.n_tok = n_tok;
    sp.n_tok_pad = pl.n_tok_pad;
    sp.n_in = static_cast<int>(w.n_in);
    sp.q4k = w.type == DType::Q4_K;
    sp.xh = reinterpret_cast<__half*>(ws);
    sp.ctr = reinterpret_cast<unsigned*>(ws + pl.ctr_off);
    sp.n_ctr = pl.split > 1 ? pl.row_tiles * pl.tok_tiles : 0;
    const int64_t n_threads = std::max<int64_t>(static_cast<int64_t>(pl.n_tok_pad) * (w.n_in / 4), sp.n_ctr);
    launch_pdl(qmm_stage_x, dim3(static_cast<unsigned>((n_threads + 255) / 256)), dim3(256), 0, stream, sp);

    qmm::Params p;
    p.w = static_cast<const uint8_t*>(w.data);
    for (int k = 0; k < 4; ++k) {
        p.off[k] = w.off[k];
        p.stride[k] = w.stride[k];
    }
    p.n_out = static_cast<int>(w.n_out);
    p.n_kt = pl.n_kt;
    p.n_tok = n_tok;
    p.n_pairs = pl.n_tok_pad / 16;
    p.xh = sp.xh;
    p.y = y;
    p.y_stride = y_stride;
    p.split = pl.split;
    p.tok_tiles = pl.tok_tiles;
    p.part = reinterpret_cast<float*>(ws + pl.part_off);
    p.ctr = sp.ctr;
    const dim3 grid(static_cast<unsigned>(pl.tok_tiles), static_cast<unsigned>(pl.row_tiles),
                    static_cast<unsigned>(pl.split));
    switch (w.type) {
        case DType::Q4_0:
            qmm::launch_q4_0(p, pl.cfg, grid, stream);
            break;
        case DType::Q8_0:
            qmm::launch_q8_0(p, pl.cfg, grid, stream);
            break;
        case DType::Q4_K:
            qmm::launch_q4_k(p, pl.cfg, grid, stream);
            break;
        default:
            qmm::launch_q6_k(p, pl.cfg, grid, stream);
            break;
    }
}

}  // namespace pelican::cuda
