// moe_fused_decode (moe_fused.h): argument checks, the per-type-pair dispatch and the launch of the
// one-kernel decode MoE block (moe_fused.cuh; the instantiations are in moe_fused_<types>.cu).
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/device_info.h"
#include "backend/cuda/moe_fused.cuh"
#include "backend/cuda/tuning.h"

namespace pelican::cuda {
namespace detail {

int moe_fused_q4_0(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream);
int moe_fused_q8_0(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream);
int moe_fused_q4_k(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream);
int moe_fused_q4_k_q6_k(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream);
int moe_fused_q6_k(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream);
int moe_fused_f32(int op, const MoeFusedParams* a, int grid, size_t smem, cudaStream_t stream);

}  // namespace detail

namespace {

using detail::MoeFusedEntry;

[[noreturn]] void fused_fail(const char* what) {
    std::fprintf(stderr, "pelican: moe_fused_decode: %s\n", what);
    std::abort();
}

struct Pair {
    DType gu, dn;
    MoeFusedEntry entry;
};
constexpr Pair kPairs[] = {
    {DType::Q4_0, DType::Q4_0, detail::moe_fused_q4_0},
    {DType::Q8_0, DType::Q8_0, detail::moe_fused_q8_0},
    {DType::Q4_K, DType::Q4_K, detail::moe_fused_q4_k},
    {DType::Q4_K, DType::Q6_K, detail::moe_fused_q4_k_q6_k},
    {DType::Q6_K, DType::Q6_K, detail::moe_fused_q6_k},
    {DType::F32, DType::F32, detail::moe_fused_f32},
};
constexpr int kNumPairs = static_cast<int>(sizeof(kPairs) / sizeof(kPairs[0]));

int pair_index(DType gu, DType dn) {
    for (int i = 0; i < kNumPairs; ++i)
        if (kPairs[i].gu == gu && kPairs[i].dn == dn) return i;
    return -1;
}

// Per device and pair: prepared (attributes set) and whether one CTA fits an SM.
std::atomic<uint32_t> g_prepared[64];
std::atomic<uint32_t> g_fits[64];

int current_dev() {
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    return dev < 64 ? dev : 63;
}

bool prepare_pair(int i) {
    const int dev = current_dev();
    const uint32_t bit = 1u << i;
    if (!(g_prepared[dev].load(std::memory_order_acquire) & bit)) {
        const int regs = kPairs[i].entry(0, nullptr, 0, 0, nullptr);
        // 512 threads: at most 128 registers each for one CTA per SM (65,536 per SM on sm_70+).
        if (regs > 0 && regs <= 128) g_fits[dev].fetch_or(bit, std::memory_order_relaxed);
        g_prepared[dev].fetch_or(bit, std::memory_order_release);
    }
    return (g_fits[dev].load(std::memory_order_relaxed) & bit) != 0;
}

int64_t smem_bytes(const GpuMatrix& gu, const GpuMatrix& dn, int64_t n_embd, int64_t n_ff, int slots) {
    return detail::round_up(n_embd * 4, 16) + detail::round_up(detail::gemv_token_smem(gu.type, n_embd), 16) +
           slots * detail::round_up(detail::gemv_token_smem(dn.type, n_ff), 16);
}

bool shapes_ok(const GpuMatrix& gu, const GpuMatrix& dn, int64_t n_embd, int64_t n_ff, int n_expert, int k) {
    if (n_embd < 32 || n_embd % 32 != 0 || n_embd > kMoeRouterMaxEmbd) return false;
    if (n_ff < 32 || n_ff % 32 != 0) return false;
    if (k < 1 || k >= kMoeMaxUsed || n_expert < k || n_expert > kMoeMaxExperts) return false;
    const int64_t experts = n_expert + 1;
    if (gu.data == nullptr || dn.data == nullptr) return false;
    if (gu.n_in != n_embd || gu.n_out != experts * 2 * n_ff) return false;
    if (dn.n_in != n_ff || dn.n_out != experts * n_embd) return false;
    if (gu.n_out > INT32_MAX || dn.n_out > INT32_MAX) return false;
    return smem_bytes(gu, dn, n_embd, n_ff, k + 1) <= detail::kGemvMaxSmem;
}

}  // namespace

bool moe_fused_preferred(int64_t n_ff, int k, int64_t gate_up_units, int sms) {
    if (n_ff <= 0 || k < 1 || gate_up_units <= 0 || sms <= 0) return false;
    const double items = static_cast<double>(k + 1) * static_cast<double>(n_ff) *
                         static_cast<double>((gate_up_units + 31) / 32);
    return items <= kMoeFusedMaxItems * static_cast<double>(sms) * detail::kFusedWarps;
}

bool moe_fused_use(const GpuMatrix& gate_up, const GpuMatrix& down, int64_t n_embd, int64_t n_ff,
                   int n_expert, int k) {
    const int mode = cuda_tuning().fused_moe;
    if (mode == 0 || !moe_fused_supported(gate_up, down, n_embd, n_ff, n_expert, k)) return false;
    if (mode == 2) return true;
    detail::GemvLayout l;
    if (!detail::gemv_layout(gate_up.type, n_embd, &l)) return false;
    return moe_fused_preferred(n_ff, k, l.n_in_pad / l.unit_elems, detail::gemv_sm_count());
}

bool moe_fused_supported(const GpuMatrix& gate_up, const GpuMatrix& down, int64_t n_embd, int64_t n_ff,
                         int n_expert, int k) {
    if (current_device_cc_major() < 7) return false;
    const int i = pair_index(gate_up.type, down.type);
    if (i < 0 || !shapes_ok(gate_up, down, n_embd, n_ff, n_expert, k)) return false;
    return prepare_pair(i);
}

void moe_fused_decode(const MoeFusedArgs& a, cudaStream_t stream) {
    const int i = pair_index(a.gate_up.type, a.down.type);
    if (i < 0) fused_fail("unsupported weight type pair");
    if (!shapes_ok(a.gate_up, a.down, a.n_embd, a.n_ff, a.n_expert, a.k)) fused_fail("unsupported shapes");
    if (!prepare_pair(i)) fused_fail("one CTA does not fit an SM");
    if (!a.x || !a.router_w || !a.logits || !a.ids || !a.weights || !a.act || !a.barrier)
        fused_fail("null pointer");
    const auto misaligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) != 0; };
    if (misaligned(a.x) || misaligned(a.router_w) || (a.norm_w && misaligned(a.norm_w)) || misaligned(a.act))
        fused_fail("x, router_w, norm_w and act must be 16-byte aligned");
    if (a.router_stride < a.n_embd || a.router_stride % 4 != 0)
        fused_fail("router_stride below n_embd or not a multiple of 4");

    const int slots = a.k + 1;
    detail::MoeFusedParams p;
    GemvArgs g;  // the layouts of the two expert GEMVs this kernel replaces
    g.x = a.x;
    g.norm_w = a.norm_w;
    g.norm_eps = a.eps;
    g.norm_one_plus = a.norm_one_plus;
    g.glu = true;
    g.expert_ids = a.ids;
    g.n_expert_slots = slots;
    g.expert_rows = 2 * a.n_ff;
    g.x_slot_stride = a.n_embd;
    g.x_slot_div = slots;
    g.y = a.act;
    detail::gemv_make_params(a.gate_up, g, p.gu);
    GemvArgs d;
    d.x = a.act;
    d.expert_ids = a.ids;
    d.n_expert_slots = slots;
    d.expert_rows = a.n_embd;
    d.x_slot_stride = a.n_ff;
    d.y = a.x;
    detail::gemv_make_params(a.down, d, p.dn);
    p.x = a.x;
    p.n_embd = static_cast<int>(a.n_embd);
    p.rw = a.router_w;
    p.r_stride = a.router_stride;
    p.n_rows = a.n_expert + 1;
    p.n_expert = a.n_expert;
    p.k = a.k;
    p.n_slots = slots;
    p.renorm = a.renormalize;
    p.route_by_logits = a.route_by_logits && cuda_tuning().fused_route;
    p.n_ff = static_cast<int>(a.n_ff);
    p.logits = a.logits;
    p.ids = a.ids;
    p.wts = a.weights;
    p.act = a.act;
    p.bar = a.barrier;
    p.trace = a.trace;
    p.smem_gu = static_cast<int>(detail::round_up(a.n_embd * 4, 16));
    p.smem_dn = p.smem_gu + static_cast<int>(detail::round_up(p.gu.tok_bytes, 16));
    // The shared expert (expert n_expert) is always chosen: its rows into L2 before the PDL wait.
    const auto add_ranges = [&](const detail::GemvParams& m, int64_t row0, int64_t rows) {
        for (int k = 0; k < 4 && p.pf_n < detail::kFusedMaxPrefetch; ++k) {
            if (m.stride[k] <= 0) continue;
            p.pf_ptr[p.pf_n] = m.w + m.off[k] + static_cast<size_t>(row0 * m.stride[k]);
            p.pf_len[p.pf_n] = static_cast<uint64_t>(rows * m.stride[k]);
            ++p.pf_n;
        }
    };
    add_ranges(p.gu, a.n_expert * 2 * a.n_ff, 2 * a.n_ff);
    add_ranges(p.dn, a.n_expert * a.n_embd, a.n_embd);
    const int sms = detail::gemv_sm_count();
    const int grid = a.grid > 0 && a.grid < sms ? a.grid : sms;
    const size_t smem = static_cast<size_t>(smem_bytes(a.gate_up, a.down, a.n_embd, a.n_ff, slots));
    kPairs[i].entry(1, &p, grid, smem, stream);
}

}  // namespace pelican::cuda
