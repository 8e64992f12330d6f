// The bulk-copy decode GEMV's host side (kernel: gemv_bulk.cuh): when it applies, its work split and
// shared-memory plan, and the launch.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>

#include "backend/cuda/device_info.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_bulk.cuh"
#include "backend/cuda/gemv_impl.cuh"
#include "core/env.h"

namespace pelican::cuda {
namespace detail {
namespace {

std::atomic<int> g_bulk_mode{-1};  // gemv_set_bulk: -1 the environment, 0 off, 1 on

bool bulk_enabled() {
    const int m = g_bulk_mode.load(std::memory_order_relaxed);
    if (m >= 0) return m == 1;
    // Off by default: on the H200 the decode step was slower with it (docs/performance.md, session 7).
    static const bool on = env_switch_set("PELICAN_GEMV_BULK");
    return on;
}

// Bytes of weights a CTA keeps in flight (its ring): PELICAN_GEMV_BULK_KIB, 16 .. 200, default 96,
// so that two CTAs of consecutive GEMVs fit on one SM (228 KiB of shared memory) and the next
// GEMV's copies can run while the previous one computes.
int64_t bulk_ring_bytes() {
    static const int64_t kib = env_int("PELICAN_GEMV_BULK_KIB", 16, 200, 96);
    return kib << 10;
}

// Shared memory a CTA reserves at least: PELICAN_GEMV_BULK_MIN_KIB (0 .. 227, default 0). Above
// 113 KiB no two CTAs of one bulk GEMV can share an SM (an even spread when a previous kernel leaves
// some SMs empty), at the price of no overlap between two consecutive bulk GEMVs on one SM.
int64_t bulk_min_smem() {
    static const int64_t kib = env_int("PELICAN_GEMV_BULK_MIN_KIB", 0, 227, 0);
    return kib << 10;
}

bool bulk_type(DType t) {
    return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q6_K;
}

struct BulkPlan {
    GemvBulkParams b;
    int ul = 0;
    int grid = 0;
    size_t smem = 0;
};

// The plan from the call's shape alone (no pointer is dereferenced or validated here; gemv_make_params
// validates the launch). False when the call does not fit the kernel.
bool bulk_plan(const GpuMatrix& m, const GemvArgs& a, BulkPlan& out) {
    if (a.n_tok != 1 || !bulk_type(m.type) || m.n_out <= 0 || m.n_in <= 0) return false;
    const bool expert = a.n_expert_slots != 0;
    if (expert && (a.n_expert_slots < 0 || a.n_expert_slots > kBulkMaxSlots || a.skip_negative_ids ||
                   a.expert_rows <= 0 || a.x_slot_div < 1))
        return false;
    GemvLayout l;
    if (!gemv_layout(m.type, m.n_in, &l) || m.n_in % l.block_elems != 0) return false;
    if (reinterpret_cast<uintptr_t>(m.data) % 16 != 0) return false;
    GemvBulkParams& b = out.b;
    b = GemvBulkParams{};
    int64_t rb = 0;  // bytes of one weight row over its planes
    for (int k = 0; k < l.n_planes; ++k) {
        if (m.off[k] % 16 != 0 || m.stride[k] <= 0 || m.stride[k] % 16 != 0) return false;
        rb += m.stride[k];
    }
    b.n_planes = l.n_planes;
    const int64_t item = rb * (a.glu ? 2 : 1);  // bytes per work item (glu: gate and up rows)
    const int64_t rows = expert ? a.expert_rows : m.n_out;
    const int64_t width = a.glu ? rows / 2 : rows;
    const int slots = expert ? a.n_expert_slots : 1;
    b.mode = !expert ? kBulkPlain : a.comb_ctr != nullptr ? kBulkCombine : kBulkSlots;
    b.width = static_cast<int>(width);
    b.n_slots = slots;
    b.n_work = b.mode == kBulkSlots ? slots * width : width;
    if (b.n_work > INT32_MAX / 2) return false;  // the kernel counts items in 32 bits
    const int64_t grid = std::min<int64_t>(gemv_sm_count(), b.n_work);
    if (grid < 1) return false;
    const int64_t share = (b.n_work + grid - 1) / grid;  // items of the busiest CTA
    // Activation vectors: one, or one per group of x_slot_div slots.
    const int x_count = expert && a.x_slot_stride != 0 ? (slots + a.x_slot_div - 1) / a.x_slot_div : 1;
    if (a.norm_w != nullptr && x_count != 1) return false;  // the prologue norms a single vector
    const int64_t act = x_count * gemv_token_smem(m.type, m.n_in);
    if (act > (64 << 10)) return false;
    // Lanes per row (a power of two up to 32) and rows per round of the CTA's warps.
    const int64_t units = l.n_in_pad / l.unit_elems;
    int lanes = 32;
    if (units < 32) {
        lanes = 1;
        while (lanes < units) lanes <<= 1;
    }
    const int64_t round_rows = kBulkWarps * (32 / lanes);
    // Ring: whole shares when they fit (every copy issued before the PDL wait), else 4 slots. The
    // whole CTA stays within 112 KiB (with the 1 KiB the driver reserves per CTA, two CTAs of
    // consecutive bulk GEMVs fit one SM's 228 KiB). Chunks are whole rounds of rows where possible.
    const int64_t comb_bytes = b.mode == kBulkCombine ? round_up(share * 4, 16) : 0;
    const int64_t head = round_up(kBulkHeader + round_up(act, 16) + comb_bytes, 128);
    const int64_t ring = std::max<int64_t>(16 << 10, std::min(bulk_ring_bytes(), (112 << 10) - head));
    const auto whole_rounds = [&](int64_t r) { return r >= round_rows ? r / round_rows * round_rows : r; };
    int64_t cr = 0, ns = 0;
    if (b.mode == kBulkCombine && share * item * std::min(slots, kBulkMaxStages) <= ring) {
        ns = std::min(slots, kBulkMaxStages);
        cr = share;  // one chunk per slot
    } else if (b.mode != kBulkCombine && share * item <= ring) {
        ns = std::min<int64_t>(kBulkMaxStages, (share + round_rows - 1) / round_rows);
        cr = (share + ns - 1) / ns;
        if (cr % round_rows != 0 && (cr / round_rows + 1) * round_rows * ns * item <= ring)
            cr = (cr / round_rows + 1) * round_rows;  // whole rounds when the ring still holds them
        ns = (share + cr - 1) / cr;
    } else {  // as many chunks of whole rounds as the ring holds
        cr = whole_rounds(ring / (4 * item));
        if (cr < 1) cr = ring / (2 * item);  // long rows: at least two ring slots
        ns = cr > 0 ? std::min<int64_t>(kBulkMaxStages, ring / (cr * item)) : 0;
    }
    if (cr < 1) return false;  // a row does not fit a ring slot
    b.chunk_rows = static_cast<int>(cr);
    b.n_stages = static_cast<int>(ns);
    b.slot_bytes = static_cast<int>(cr * item);
    int64_t off = 0;
    for (int k = 0; k < l.n_planes; ++k) {
        b.plane_off[k] = static_cast<int>(off);
        off += cr * m.stride[k];
    }
    b.up_off = static_cast<int>(off);
    b.lanes = lanes;
    const int64_t per_lane = (units + lanes - 1) / lanes;
    out.ul = per_lane <= 1 ? 1 : per_lane <= 2 ? 2 : per_lane <= 4 ? 4 : 0;
    // Shared memory: header | activations | combine sums | ring (128-byte aligned).
    b.x_count = x_count;
    b.act_off = kBulkHeader;
    b.comb_off = static_cast<int>(b.act_off + round_up(act, 16));
    b.ring_off = static_cast<int>(head);
    const int64_t smem =
        std::min<int64_t>(kBulkMaxSmem, std::max(b.ring_off + ns * cr * item, bulk_min_smem()));
    if (b.ring_off + ns * cr * item > kBulkMaxSmem) return false;
    b.ids_early = expert && a.ids_ready;
    out.grid = static_cast<int>(grid);
    out.smem = static_cast<size_t>(smem);
    return true;
}

}  // namespace

void gemv_bulk_prepare(DType t) {
    if (cuda::current_device_cc_major() < 9) return;
    switch (t) {
        case DType::Q4_0:
            return gemv_bulk_prepare_q4_0();
        case DType::Q8_0:
            return gemv_bulk_prepare_q8_0();
        case DType::Q4_K:
            return gemv_bulk_prepare_q4_k();
        case DType::Q6_K:
            return gemv_bulk_prepare_q6_k();
        default:
            return;
    }
}

bool gemv_bulk_try(const GpuMatrix& m, const GemvArgs& a, cudaStream_t stream, bool launch) {
    // Grid-policy and debug modes belong to benchmarks of the register-streaming kernels.
    if (!bulk_enabled() || gemv_grid_ctas_per_sm() != 0 || gemv_debug_mode() != 0) return false;
    if (a.n_tok != 1 || !bulk_type(m.type) || cuda::current_device_cc_major() < 9) return false;
    BulkPlan plan;
    if (!bulk_plan(m, a, plan)) return false;
    if (!launch) return true;
    GemvParams p;
    gemv_make_params(m, a, p);
    switch (m.type) {
        case DType::Q4_0:
            gemv_bulk_launch_q4_0(p, plan.b, plan.ul, plan.grid, plan.smem, stream);
            break;
        case DType::Q8_0:
            gemv_bulk_launch_q8_0(p, plan.b, plan.ul, plan.grid, plan.smem, stream);
            break;
        case DType::Q4_K:
            gemv_bulk_launch_q4_k(p, plan.b, plan.ul, plan.grid, plan.smem, stream);
            break;
        default:
            gemv_bulk_launch_q6_k(p, plan.b, plan.ul, plan.grid, plan.smem, stream);
            break;
    }
    return true;
}

}  // namespace detail

void gemv_set_bulk(int mode) { detail::g_bulk_mode.store(mode < 0 ? -1 : mode > 0 ? 1 : 0); }

bool gemv_bulk_applies(const GpuMatrix& m, const GemvArgs& a) {
    return detail::gemv_forced_variant() < 0 && detail::gemv_bulk_try(m, a, nullptr, false);
}

}  // namespace pelican::cuda
