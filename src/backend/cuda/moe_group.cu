// Grouped experts for prompt chunks (moe.h: moe_group_slots, moe_gather_rows): the (token, choice)
// slots grouped by expert into groups of kMoeGroupRows rows, so that the expert GEMVs read each
// chosen expert once per group instead of once per slot.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/pdl.cuh"

namespace pelican::cuda {
namespace {

constexpr int kGroupThreads = 1024;
constexpr int kGatherThreads = 256;

[[noreturn]] void group_fail(const char* what) {
    std::fprintf(stderr, "pelican: moe grouping: %s\n", what);
    std::abort();
}

// One CTA. Shared memory: count[E], first group[E], cursor[E] (E = n_experts <= kMoeMaxExperts + 1).
// 1. row_slot = -1 everywhere, group_expert = -1 everywhere; count the slots of each expert.
// 2. first[e] = sum over e' < e of ceil(count[e'] / R) (thread 0, serial over E); the groups of e get id e.
// 3. each slot takes the next row of its expert (atomic cursor): row = (first[e] + c / R) * R + c % R.
// Rows inside an expert's groups are in atomic order; the GEMV computes every row independently, so
// the values do not depend on that order.
__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(const MoeGroupArgs a) {
    __shared__ int count[kMoeMaxExperts + 1], first[kMoeMaxExperts + 1], cursor[kMoeMaxExperts + 1];
    constexpr int R = kMoeGroupRows;
    const int tid = static_cast<int>(threadIdx.x);
    for (int e = tid; e < a.n_experts; e += kGroupThreads) count[e] = cursor[e] = 0;
    pdl_wait();  // ids come from moe_route; the outputs may be read by earlier kernels
    pdl_trigger();
    for (int r = tid; r < a.max_groups * R; r += kGroupThreads) a.row_slot[r] = -1;
    for (int g = tid; g < a.max_groups; g += kGroupThreads) a.group_expert[g] = -1;
    __syncthreads();
    for (int s = tid; s < a.n_slots; s += kGroupThreads) {
        const int e = a.ids[s];
        if (e >= 0 && e < a.n_experts) atomicAdd(&count[e], 1);
    }
    __syncthreads();
    if (tid == 0) {
        int g = 0;
        for (int e = 0; e < a.n_experts; ++e) {
            first[e] = g;
            g += (count[e] + R - 1) / R;
        }
    }
    __syncthreads();
    for (int e = tid; e < a.n_experts; e += kGroupThreads) {
        const int ng = (count[e] + R - 1) / R;
        for (int i = 0; i < ng; ++i) a.group_expert[first[e] + i] = e;
    }
    for (int s = tid; s < a.n_slots; s += kGroupThreads) {
        const int e = a.ids[s];
        if (e < 0 || e >= a.n_experts) {  // never from moe_route; moe_combine skips row -1
            a.slot_row[s] = -1;
            continue;
        }
        const int c = atomicAdd(&cursor[e], 1);
        const int row = (first[e] + c / R) * R + c % R;
        a.slot_row[s] = row;
        a.row_slot[row] = s;
    }
}

// y[r] = x[row_slot[r] / x_div] (n floats), or zeros for an empty row of a used group; rows of unused
// groups (group_expert < 0, skipped by the GEMVs) are left alone. Grid: rows.
__global__ void __launch_bounds__(kGatherThreads)
    moe_gather_kernel(const float* x, int64_t n, int x_div, const int32_t* row_slot,
                      const int32_t* group_expert, float* y) {
    pdl_wait();
    pdl_trigger();
    const int64_t r = blockIdx.x;
    if (group_expert && group_expert[r / kMoeGroupRows] < 0) return;
    const int s = row_slot[r];
    float* yr = y + r * n;
    if (s < 0) {
        for (int64_t i = threadIdx.x; i < n; i += kGatherThreads) yr[i] = 0.0f;
        return;
    }
    const float* xr = x + static_cast<int64_t>(s / x_div) * n;
    for (int64_t i = threadIdx.x; i < n; i += kGatherThreads) yr[i] = xr[i];
}

}  // namespace

int moe_group_max_groups(int n_slots, int n_experts) {
    return (n_slots + kMoeGroupRows - 1) / kMoeGroupRows + n_experts;
}

void moe_group_slots(const MoeGroupArgs& a, cudaStream_t stream) {
    if (a.n_slots < 0 || a.n_experts < 1 || a.n_experts > kMoeMaxExperts + 1) group_fail("bad sizes");
    if (a.max_groups < moe_group_max_groups(a.n_slots, a.n_experts)) group_fail("max_groups too small");
    if (!a.ids || !a.group_expert || !a.slot_row || !a.row_slot) group_fail("null pointer");
    launch_pdl(moe_group_kernel, dim3(1), dim3(kGroupThreads), 0, stream, a);
}

void moe_gather_rows(const float* x, int64_t n, int x_div, const int32_t* row_slot,
                     const int32_t* group_expert, int64_t n_rows, float* y, cudaStream_t stream) {
    if (n_rows <= 0 || n <= 0) return;
    if (!x || !row_slot || !y || x_div < 1 || n_rows > 0x7fffffff)
        group_fail("moe_gather_rows: bad arguments");
    launch_pdl(moe_gather_kernel, dim3(static_cast<unsigned>(n_rows)), dim3(kGatherThreads), 0, stream, x, n,
               x_div, row_slot, group_expert, y);
}

}  // namespace pelican::cuda
