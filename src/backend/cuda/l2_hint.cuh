// Private to the backend's .cu files: L2 prefetch hints (cp.async.bulk.prefetch.L2 on sm_90; no-ops
// before). A hint returns no data, nothing waits for it, and it never changes a result; kernels use
// them to pull weights that a LATER kernel will read into the L2 while they themselves are bound by
// latency (barriers, reductions, small dependent loads), so that HBM is not idle then.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace pelican::cuda::detail {

// Bulk hint: 16-byte aligned address, bytes a multiple of 16.
__device__ __forceinline__ void prefetch_l2_bulk(uintptr_t addr, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;"
                 :
                 : "l"(__cvta_generic_to_global(reinterpret_cast<const void*>(addr))), "r"(bytes));
#else
    (void)addr;
    (void)bytes;
#endif
}

// Share `part` of `parts` of the device range [base, base + bytes) (shrunk to 16-byte bounds) as bulk
// hints of at most 16 KiB, spread over the calling CTA's threads (threads: its block size). Every thread
// of the CTA may call it; no barrier inside.
__device__ __forceinline__ void l2_hint_share(const void* base, size_t bytes, int part, int parts,
                                              int threads) {
    constexpr uint64_t kChunk = 16384;
    if (base == nullptr || bytes == 0 || parts <= 0) return;
    const uintptr_t b0 = reinterpret_cast<uintptr_t>(base);
    const uintptr_t start = (b0 + 15) & ~uintptr_t{15}, end = (b0 + bytes) & ~uintptr_t{15};
    if (end <= start) return;
    const uint64_t n = end - start;
    const uint64_t per = (n / static_cast<uint64_t>(parts) + 15) / 16 * 16;
    const uint64_t lo = per * static_cast<uint64_t>(part), hi = lo + per < n ? lo + per : n;
    for (uint64_t off = lo + threadIdx.x * kChunk; off < hi; off += static_cast<uint64_t>(threads) * kChunk)
        prefetch_l2_bulk(start + off, static_cast<uint32_t>(hi - off < kChunk ? hi - off : kChunk));
}

}  // namespace pelican::cuda::detail
