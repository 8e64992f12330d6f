// gemv(): argument checks, token groups that fit in shared memory, dispatch on the weight type
// (once per call) to the per-family launchers (gemv_float.cu, gemv_q4_0.cu, ...).
#include "backend/cuda/gemv.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/gemv_impl.cuh"
#include "backend/cuda/tuning.h"

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

namespace detail {

// Checks a call and fills every field of p but the per-launch ones (n_tok, x, y, residual of a
// token group; n_groups and the prefetch fields are the launcher's). Aborts on a bad call.
void gemv_make_params(const GpuMatrix& m, const GemvArgs& a, GemvParams& p) {
    if (m.data == nullptr || m.n_out <= 0) gemv_fail("empty matrix");
    if (a.n_tok < 1 || a.n_tok > kMaxGemvTokens) gemv_fail("n_tok must be 1 .. 8");
    if (a.x == nullptr || a.y == nullptr) gemv_fail("null x or y");
    if (a.glu && m.n_out % 2 != 0) gemv_fail("glu needs an even n_out ([gate; up] stacked)");
    GemvLayout l;
    if (!gemv_layout(m.type, m.n_in, &l)) gemv_fail("unsupported weight type");
    const bool expert = a.n_expert_slots != 0;
    if (expert) {
        if (a.n_expert_slots < 0 || a.n_expert_slots > 65535) gemv_fail("n_expert_slots must be 0 .. 65535");
        if (a.expert_ids == nullptr) gemv_fail("expert slots need expert_ids");
        if (a.n_tok != 1 && a.n_tok != 8) gemv_fail("expert slots need n_tok = 1 (or 8: grouped experts)");
        if (a.bias != nullptr) gemv_fail("expert slots take no bias");
        if (a.expert_rows <= 0 || m.n_out % a.expert_rows != 0)
            gemv_fail("expert_rows must divide n_out (experts stacked)");
        if (a.glu && a.expert_rows % 2 != 0)
            gemv_fail("glu needs an even expert_rows ([gate; up] per expert)");
        if (a.x_slot_div < 1) gemv_fail("x_slot_div must be >= 1");
        if (a.x_slot_stride < 0 || a.y_slot_stride < 0) gemv_fail("negative slot stride");
    }

    const int64_t rows = expert ? a.expert_rows : m.n_out;  // weight rows one output row set spans
    const int64_t width = a.glu ? rows / 2 : rows;
    if (expert && a.n_expert_slots > 1 && a.y_slot_stride != 0 && a.y_slot_stride < width)
        gemv_fail("y_slot_stride below the output width (slots would overlap)");
    if (expert && a.n_tok > 1) {  // grouped experts: a slot's n_tok rows must not reach the next slot's
        const int64_t xs = a.x_stride ? a.x_stride : m.n_in, ys = a.y_stride ? a.y_stride : width;
        if (a.x_slot_stride != 0 && a.x_slot_stride < a.n_tok * xs)
            gemv_fail("grouped experts: x_slot_stride below n_tok rows");
        if (a.n_expert_slots > 1 && a.y_slot_stride < a.n_tok * ys)
            gemv_fail("grouped experts: y_slot_stride below n_tok rows");
    }
    p = GemvParams{};
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
    p.x_vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && p.x_stride % 4 == 0 &&
              (!expert || a.x_slot_stride % 4 == 0);
    p.norm_w = a.norm_w;
    p.norm_vec = reinterpret_cast<uintptr_t>(a.norm_w) % 16 == 0;
    p.norm_eps = a.norm_eps;
    p.norm_one_plus = a.norm_one_plus;
    p.bias = a.bias;
    p.scale = a.scale;
    p.y_stride = a.y_stride ? a.y_stride : width;
    if (expert) {
        p.expert_ids = a.expert_ids;
        p.n_expert_slots = a.n_expert_slots;
        p.n_experts = static_cast<int>(std::min<int64_t>(m.n_out / a.expert_rows, INT32_MAX));
        p.expert_rows = a.expert_rows;
        p.x_slot_stride = a.x_slot_stride;
        p.x_slot_div = a.x_slot_div;
        p.y_slot_stride = a.y_slot_stride ? a.y_slot_stride : width;
        p.skip_negative_ids = a.skip_negative_ids;
        if (a.comb_ctr != nullptr) {
            if (a.n_tok != 1 || a.glu || a.residual || a.skip_negative_ids)
                gemv_fail("the fused combine takes one token, no glu, no residual, no skipped slots");
            // comb_y must not overlap the slots' outputs (other CTAs write them while the last one sums).
            const uintptr_t y0 = reinterpret_cast<uintptr_t>(a.y),
                            y1 = y0 + sizeof(float) * static_cast<uintptr_t>(
                                                          (a.n_expert_slots - 1) * p.y_slot_stride + width);
            const uintptr_t c0 = reinterpret_cast<uintptr_t>(a.comb_y), c1 = c0 + sizeof(float) * width;
            if (c0 < y1 && y0 < c1) gemv_fail("the fused combine's comb_y overlaps the slots' outputs");
            if (!a.comb_w || !a.comb_res || !a.comb_y)
                gemv_fail("the fused combine needs comb_w, comb_res and comb_y");
            p.comb_ctr = a.comb_ctr;
            p.comb_w = a.comb_w;
            p.comb_res = a.comb_res;
            p.comb_y = a.comb_y;
        }
    }

    if (!expert && a.comb_ctr != nullptr) gemv_fail("the fused combine needs expert slots");

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
    p.n_tok = a.n_tok;
    p.x = a.x;
    p.y = a.y;
    p.residual = a.residual;
}

namespace {

void gemv_run(const GpuMatrix& m, const GemvArgs& a, cudaStream_t stream, int variant) {
    GemvParams p;
    gemv_make_params(m, a, p);
    const bool expert = a.n_expert_slots != 0;
    const int64_t tok_bytes = p.tok_bytes;
    const int64_t fit = kGemvMaxSmem / tok_bytes;  // tokens per launch
    if (fit < 1) gemv_fail("n_in too large for the shared-memory activations");
    if (expert && a.n_tok > 1 && fit < a.n_tok)
        gemv_fail("grouped experts: 8 token rows do not fit shared memory");

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
                gemv_launch_float(m.type, q, cap, variant, smem, stream);
                break;
            case DType::Q4_0:
                gemv_launch_q4_0(q, cap, variant, smem, stream);
                break;
            case DType::Q8_0:
                gemv_launch_q8_0(q, cap, variant, smem, stream);
                break;
            case DType::Q4_K:
                gemv_launch_q4_k(q, cap, variant, smem, stream);
                break;
            case DType::Q6_K:
                gemv_launch_q6_k(q, cap, variant, smem, stream);
                break;
            default:
                gemv_fail("unsupported weight type");
        }
        t0 += nt;
    }
}

std::atomic<int> g_forced_variant{-1};

// Built-in guess (untuned): rows of at most 8 / 16 units pack 4 / 2 rows per warp (r4u1k1p4,
// r4u1k1p2); otherwise glu (two rows per unit already) r1u4k1; long rows r1u8k2 (16 chunks of 32
// units per batch over two warps); short rows r4u1k4 (4 rows x 1 unit per lane, a row split over
// 4 warps). Grid policy: occupancy. Expert slots: the same guess (per expert the rows are fewer,
// the row length the same).
int gemv_default_variant(const GpuMatrix& m, const GemvArgs& a) {
    if (a.n_tok > 1) return 0;
    GemvLayout l;
    if (!gemv_layout(m.type, m.n_in, &l)) return 0;
    const int64_t units = l.n_in_pad / l.unit_elems;
    if (units <= 8) return kGemvConfigP4 * kGemvPolicies;
    if (units <= 16) return kGemvConfigP2 * kGemvPolicies;
    if (a.glu) return 0;
    const int64_t chunks = (units + 31) / 32;
    return (chunks >= 12 ? 4 : 6) * kGemvPolicies;
}

// "r1u8k2/occ": rows per warp, units in flight, split-K warps, [row packing,] CTAs per SM.
std::string variant_name(int v) {
    const GemvConfig& c = kGemvConfigTable[v / kGemvPolicies % kGemvConfigs];
    const int pol = kGemvPolicyTable[v % kGemvPolicies];
    return "r" + std::to_string(c.r) + "u" + std::to_string(c.u4) + "k" + std::to_string(c.ks) +
           (c.p > 1 ? "p" + std::to_string(c.p) : std::string()) + "/" +
           (pol == 0 ? std::string("occ") : std::to_string(pol));
}

// (type, n_in, n_out, glu, n_tok, norm, residual, expert slots, expert rows, x rows per slot group)
using TuneKey = std::tuple<int, int64_t, int64_t, bool, int, bool, bool, int, int64_t, int>;
std::mutex g_tune_mu;
std::map<TuneKey, int> g_tune_cache;

}  // namespace
}  // namespace detail

int gemv_variant_count() { return detail::kGemvVariants; }

int gemv_max_tokens(const GpuMatrix& m) {
    const int64_t tb = detail::gemv_token_smem(m.type, m.n_in);
    return tb > 0 ? static_cast<int>(std::min<int64_t>(detail::kGemvMaxSmem / tb, kMaxGemvTokens)) : 0;
}

const char* gemv_variant_name(int variant) {
    static const auto names = [] {
        std::vector<std::string> n;
        for (int v = 0; v < detail::kGemvVariants; ++v) n.push_back(detail::variant_name(v));
        return n;
    }();
    if (variant < 0 || variant >= detail::kGemvVariants) return "?";
    return names[static_cast<size_t>(variant)].c_str();
}

void gemv_force_variant(int variant) {
    detail::g_forced_variant.store(variant >= 0 && variant < detail::kGemvVariants ? variant : -1);
}

int gemv_variant_for(const GpuMatrix& m, const GemvArgs& a) {
    const int f = detail::g_forced_variant.load(std::memory_order_relaxed);
    if (f >= 0) return f;
    if (m.gemv_variant >= 0 && m.gemv_variant < detail::kGemvVariants) return m.gemv_variant;
    return detail::gemv_default_variant(m, a);
}

void gemv(const GpuMatrix& m, const GemvArgs& a, cudaStream_t stream) {
    detail::gemv_run(m, a, stream, gemv_variant_for(m, a));
}

void gemv_autotune(GpuMatrix& m, const GemvArgs& ex, cudaStream_t stream, float* times) {
    using namespace detail;
    const int nv = kGemvVariants;
    if (times)
        for (int v = 0; v < nv; ++v) times[v] = -1.0f;
    if (!cuda_tuning().gemv_autotune) return;
    if (m.data == nullptr || m.n_out <= 0 || ex.n_tok < 1 || ex.n_tok > kMaxGemvTokens) return;
    const bool expert = ex.n_expert_slots > 0;
    if (ex.n_expert_slots < 0 || ex.n_expert_slots > 65535) return;
    if (expert && (ex.n_tok != 1 || ex.expert_rows <= 0 || m.n_out % ex.expert_rows != 0 || ex.bias ||
                   ex.x_slot_div < 1 || (ex.glu && ex.expert_rows % 2 != 0)))
        return;
    if (ex.glu && m.n_out % 2 != 0) return;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return;
    const int x_rows =
        expert && ex.x_slot_stride != 0 ? (ex.n_expert_slots + ex.x_slot_div - 1) / ex.x_slot_div : 1;
    const TuneKey key{static_cast<int>(m.type),
                      m.n_in,
                      m.n_out,
                      ex.glu,
                      ex.n_tok,
                      ex.norm_w != nullptr,
                      ex.residual != nullptr,
                      expert ? ex.n_expert_slots : 0,
                      expert ? ex.expert_rows : 0,
                      x_rows};
    if (!times) {
        std::lock_guard<std::mutex> lk(g_tune_mu);
        auto it = g_tune_cache.find(key);
        if (it != g_tune_cache.end()) {
            m.gemv_variant = it->second;
            return;
        }
    }
    // Scratch operands of the call shape (values irrelevant but finite). Expert slots: x_rows
    // activation rows, one output row per slot.
    const int64_t rows = expert ? ex.expert_rows : m.n_out;
    const int64_t width = ex.glu ? rows / 2 : rows;
    const int64_t x_count = expert ? x_rows : ex.n_tok, y_count = expert ? ex.n_expert_slots : ex.n_tok;
    const size_t nx = static_cast<size_t>(x_count * m.n_in), ny = static_cast<size_t>(y_count * width);
    float* buf = nullptr;
    const size_t n_all = nx + ny + static_cast<size_t>(m.n_in) + static_cast<size_t>(m.n_out) + 64;
    if (cudaMalloc(&buf, n_all * sizeof(float)) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    PELICAN_CUDA_CHECK(cudaMemsetAsync(buf, 0x3c, n_all * sizeof(float), stream));  // 0.0115f
    auto align16 = [](size_t n) { return (n + 3) / 4 * 4; };
    GemvArgs a = ex;
    a.comb_ctr = nullptr;  // timing calls must not add into a real output or touch real counters
    a.comb_w = a.comb_res = nullptr;
    a.comb_y = nullptr;
    a.x = buf;
    a.x_stride = 0;
    a.y = buf + align16(nx);
    a.y_stride = 0;
    a.norm_w = ex.norm_w ? a.y + align16(ny) : nullptr;
    a.bias = ex.bias ? a.y + align16(ny) + align16(static_cast<size_t>(m.n_in)) : nullptr;
    a.residual = ex.residual ? a.y : nullptr;
    // Expert slots: rotating id sets (consecutive experts, wrapping) so that successive calls read
    // different experts, as the copies below do for plain matrices.
    const int n_experts = expert ? static_cast<int>(m.n_out / ex.expert_rows) : 0;
    constexpr int kIdSets = 64;
    int32_t* ids = nullptr;
    if (expert) {
        a.x_stride = 0;
        a.x_slot_stride = x_rows > 1 ? m.n_in : 0;
        a.y_slot_stride = width;
        std::vector<int32_t> h(static_cast<size_t>(kIdSets) * static_cast<size_t>(ex.n_expert_slots));
        for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<int32_t>(i % static_cast<size_t>(n_experts));
        if (cudaMalloc(&ids, h.size() * sizeof(int32_t)) != cudaSuccess) {
            (void)cudaGetLastError();
            PELICAN_CUDA_CHECK(cudaFree(buf));
            return;
        }
        PELICAN_CUDA_CHECK(cudaMemcpy(ids, h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    }

    // Copies of the weights rotated through so that each call streams from HBM, not from the L2
    // (which holds a small matrix whole): >= 128 MiB in all, at most 64 copies.
    const size_t copy_stride = (m.bytes + 255) / 256 * 256;
    int n_copies =
        static_cast<int>(std::min<size_t>(64, ((size_t{128} << 20) + copy_stride - 1) / copy_stride));
    uint8_t* copies = nullptr;
    if (n_copies > 1 && cudaMalloc(&copies, copy_stride * static_cast<size_t>(n_copies)) != cudaSuccess) {
        (void)cudaGetLastError();
        copies = nullptr;
    }
    if (copies == nullptr) n_copies = 1;
    std::vector<GpuMatrix> mats(static_cast<size_t>(n_copies), m);
    for (int i = 1; i < n_copies; ++i) {
        mats[static_cast<size_t>(i)].data = copies + copy_stride * static_cast<size_t>(i);
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(mats[static_cast<size_t>(i)].data, m.data, m.bytes,
                                           cudaMemcpyDeviceToDevice, stream));
    }
    size_t next = 0, next_ids = 0;
    auto call = [&](int v) {
        if (expert) a.expert_ids = ids + (next_ids++ % kIdSets) * static_cast<size_t>(ex.n_expert_slots);
        gemv_run(mats[next++ % mats.size()], a, stream, v);
    };

    cudaEvent_t e0, e1;
    PELICAN_CUDA_CHECK(cudaEventCreate(&e0));
    PELICAN_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> best(static_cast<size_t>(nv), 1e30f);
    constexpr int kWarm = 2, kTimed = 12, kRounds = 2;
    for (int round = 0; round < kRounds; ++round) {
        for (int v = 0; v < nv; ++v) {
            // Configurations apply to n_tok = 1; larger calls vary the grid policy.
            if (ex.n_tok > 1 && v / kGemvPolicies % kGemvConfigs != 0) continue;
            for (int i = 0; i < kWarm; ++i) call(v);
            PELICAN_CUDA_CHECK(cudaEventRecord(e0, stream));
            for (int i = 0; i < kTimed; ++i) call(v);
            PELICAN_CUDA_CHECK(cudaEventRecord(e1, stream));
            PELICAN_CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0.0f;
            PELICAN_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            best[static_cast<size_t>(v)] = std::min(best[static_cast<size_t>(v)], ms * 1000.0f / kTimed);
        }
    }
    PELICAN_CUDA_CHECK(cudaEventDestroy(e0));
    PELICAN_CUDA_CHECK(cudaEventDestroy(e1));
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream));
    PELICAN_CUDA_CHECK(cudaFree(buf));
    if (copies) PELICAN_CUDA_CHECK(cudaFree(copies));
    if (ids) PELICAN_CUDA_CHECK(cudaFree(ids));
    int win = 0;
    for (int v = 0; v < nv; ++v) {
        if (best[static_cast<size_t>(v)] < best[static_cast<size_t>(win)]) win = v;
        if (times && best[static_cast<size_t>(v)] < 1e29f) times[v] = best[static_cast<size_t>(v)];
    }
    m.gemv_variant = win;
    // Tuning gemv_tune_log (PELICAN_GEMV_TUNE_LOG=1): one line per tuned shape (docs/performance.md quotes
    // them).
    if (cuda_tuning().gemv_tune_log) {
        const int def = gemv_default_variant(m, ex);
        std::fprintf(stderr,
                     "pelican gemv tune: %s n_in %lld rows %lld%s%s%s slots %d -> %s %.2f us (built-in %s "
                     "%.2f us)\n",
                     dtype_name(m.type).data(), static_cast<long long>(m.n_in), static_cast<long long>(rows),
                     ex.glu ? " glu" : "", ex.norm_w ? " norm" : "", ex.residual ? " residual" : "",
                     expert ? ex.n_expert_slots : 0, variant_name(win).c_str(),
                     static_cast<double>(best[static_cast<size_t>(win)]), variant_name(def).c_str(),
                     static_cast<double>(best[static_cast<size_t>(def)]));
    }
    std::lock_guard<std::mutex> lk(g_tune_mu);
    g_tune_cache[key] = win;
}

}  // namespace pelican::cuda
