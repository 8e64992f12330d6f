// gemv(): argument checks, token groups that fit in shared memory, dispatch on the weight type
// (once per call) to the per-family launchers (gemv_float.cu, gemv_q4_0.cu, ...).
#include "backend/cuda/gemv.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/gemv_impl.cuh"

namespace pelican::cuda {
namespace detail {
namespace {

std::atomic<int> g_grid_ctas_per_sm{0};

// Per-device limits for the occupancy estimate (read once per device).
struct DeviceLimits {
    int sms = 0, smem_sm = 0, smem_reserved = 0, regs_sm = 0, threads_sm = 0, blocks_sm = 0;
};
std::atomic<bool> g_limits_ready[64];
DeviceLimits g_limits[64];

const DeviceLimits& device_limits() {
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev >= 64) dev = 63;
    if (!g_limits_ready[dev].load(std::memory_order_acquire)) {
        DeviceLimits l;
        PELICAN_CUDA_CHECK(cudaDeviceGetAttribute(&l.sms, cudaDevAttrMultiProcessorCount, dev));
        PELICAN_CUDA_CHECK(
            cudaDeviceGetAttribute(&l.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
        PELICAN_CUDA_CHECK(
            cudaDeviceGetAttribute(&l.smem_reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
        PELICAN_CUDA_CHECK(cudaDeviceGetAttribute(&l.regs_sm, cudaDevAttrMaxRegistersPerMultiprocessor, dev));
        PELICAN_CUDA_CHECK(
            cudaDeviceGetAttribute(&l.threads_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
        PELICAN_CUDA_CHECK(cudaDeviceGetAttribute(&l.blocks_sm, cudaDevAttrMaxBlocksPerMultiprocessor, dev));
        g_limits[dev] = l;  // identical values if two threads race here
        g_limits_ready[dev].store(true, std::memory_order_release);
    }
    return g_limits[dev];
}

[[noreturn]] void gemv_fail(const char* what) {
    std::fprintf(stderr, "pelican: gemv: %s\n", what);
    std::abort();
}

}  // namespace

int gemv_grid_ctas_per_sm() { return g_grid_ctas_per_sm.load(std::memory_order_relaxed); }

int gemv_sm_count() { return std::max(1, device_limits().sms); }

int gemv_occupancy(int regs, int static_smem, size_t dyn_smem) {
    const DeviceLimits& d = device_limits();
    constexpr int kWarpsPerCta = kGemvThreads / 32;
    int n = std::max(1, d.threads_sm / kGemvThreads);
    n = std::min(n, std::max(1, d.blocks_sm));
    if (regs > 0) {  // registers are allocated per warp in units of 256, in 4 SM sub-partitions
        const int per_warp = (regs * 32 + 255) / 256 * 256;
        const int warps = d.regs_sm / 4 / per_warp * 4;
        n = std::min(n, warps / kWarpsPerCta);
    }
    const int64_t per_cta = static_cast<int64_t>(dyn_smem) + static_smem + d.smem_reserved;
    if (per_cta > 0) n = std::min<int64_t>(n, d.smem_sm / per_cta);
    return std::max(1, n);
}

void gemv_prepare(DType t) {
    switch (t) {
        case DType::F32:
        case DType::F16:
        case DType::BF16:
            gemv_prepare_float(t);
            break;
        case DType::Q4_0:
            gemv_prepare_q4_0();
            break;
        case DType::Q8_0:
            gemv_prepare_q8_0();
            break;
        case DType::Q4_K:
            gemv_prepare_q4_k();
            break;
        case DType::Q6_K:
            gemv_prepare_q6_k();
            break;
        default:
            break;
    }
}

}  // namespace detail

void gemv_set_grid_policy(int ctas_per_sm) {
    detail::g_grid_ctas_per_sm.store(ctas_per_sm < 0 ? 0 : ctas_per_sm);
}

void gemv(const GpuMatrix& m, const GemvArgs& a, cudaStream_t stream) {
    using namespace detail;
    if (m.data == nullptr || m.n_out <= 0) gemv_fail("empty matrix");
    if (a.n_tok < 1 || a.n_tok > kMaxGemvTokens) gemv_fail("n_tok must be 1 .. 8");
    if (a.x == nullptr || a.y == nullptr) gemv_fail("null x or y");
    if (a.glu && m.n_out % 2 != 0) gemv_fail("glu needs an even n_out ([gate; up] stacked)");
    GemvLayout l;
    if (!gemv_layout(m.type, m.n_in, &l)) gemv_fail("unsupported weight type");

    const int64_t width = a.glu ? m.n_out / 2 : m.n_out;
    GemvParams p;
    p.w = static_cast<const uint8_t*>(m.data);
    for (int k = 0; k < 4; ++k) {
        p.off[k] = m.off[k];
        p.stride[k] = m.stride[k];
    }
    p.n_in = static_cast<int>(m.n_in);
    p.n_in_pad = static_cast<int>(l.n_in_pad);
    p.n_units = static_cast<int>(l.n_in_pad / l.unit_elems);
    p.glu = a.glu;
    p.n_slots = static_cast<int>(width);
    p.n_half = a.glu ? static_cast<int>(width) : 0;
    p.x_stride = a.x_stride ? a.x_stride : m.n_in;
    p.x_vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && p.x_stride % 4 == 0;
    p.norm_w = a.norm_w;
    p.norm_vec = reinterpret_cast<uintptr_t>(a.norm_w) % 16 == 0;
    p.norm_eps = a.norm_eps;
    p.norm_one_plus = a.norm_one_plus;
    p.bias = a.bias;
    p.scale = a.scale;
    p.y_stride = a.y_stride ? a.y_stride : width;

    const bool quant = gemv_quantized(m.type);
    const int64_t tok_bytes = gemv_token_smem(m.type, m.n_in);
    p.tok_bytes = static_cast<int>(tok_bytes);
    if (quant) {
        const int np = m.type == DType::Q4_K ? 4 : 2;
        p.plane_bytes = static_cast<int>(m.n_in / np);
        p.meta_off = static_cast<int>(m.n_in);
    } else {
        p.plane_bytes = static_cast<int>(l.n_in_pad / 2 * 4);  // F16/BF16: two planes of fp32 halves
    }
    const int64_t fit = kGemvMaxSmem / tok_bytes;  // tokens per launch
    if (fit < 1) gemv_fail("n_in too large for the shared-memory activations");

    for (int t0 = 0; t0 < a.n_tok;) {
        int nt = a.n_tok - t0;
        if (nt > fit) nt = static_cast<int>(fit);
        // Kernel token capacities: 1, 2, 3, 4, 8 (5..7 run as 8 with zero tokens when it fits).
        int cap = nt <= 4 ? nt : 8;
        if (cap > fit) {
            nt = 4;
            cap = 4;
        }
        GemvParams q = p;
        q.n_tok = nt;
        q.x = a.x + t0 * p.x_stride;
        q.y = a.y + t0 * p.y_stride;
        q.residual = a.residual ? a.residual + t0 * p.y_stride : nullptr;
        const size_t smem = static_cast<size_t>(cap * tok_bytes);
        switch (m.type) {
            case DType::F32:
            case DType::F16:
            case DType::BF16:
                gemv_launch_float(m.type, q, cap, smem, stream);
                break;
            case DType::Q4_0:
                gemv_launch_q4_0(q, cap, smem, stream);
                break;
            case DType::Q8_0:
                gemv_launch_q8_0(q, cap, smem, stream);
                break;
            case DType::Q4_K:
                gemv_launch_q4_k(q, cap, smem, stream);
                break;
            case DType::Q6_K:
                gemv_launch_q6_k(q, cap, smem, stream);
                break;
            default:
                gemv_fail("unsupported weight type");
        }
        t0 += nt;
    }
}

}  // namespace pelican::cuda
