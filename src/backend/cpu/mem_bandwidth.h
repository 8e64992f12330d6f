// Streaming-read memory bandwidth: the roofline that decode (which streams every weight once per
// token) is measured against. Each thread sums its share of a buffer as uint64 (4 accumulators);
// the buffer sits on 2 MiB-aligned transparent huge pages like owned weights (cpu::Weight), so
// the figure is what weight reads can reach, not one limited by 4 KiB-page TLB walks.
//
//   PELICAN_ASSIGN(cpu::ReadBandwidth bw, cpu::probe_read_bandwidth(4));  // 1 GiB, ~0.5 s
//   fmt::print("{:.1f} GB/s\n", bw.median_gbps);
//
// Used by `pelican bench` (% of roofline) and bench/ops_bench.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/buffer.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace pelican::cpu {

inline constexpr size_t kReadProbeBytes = size_t{1} << 30;      // 1 GiB: far beyond any cache
inline constexpr size_t kReadProbeMinBytes = size_t{64} << 20;  // smallest fallback

// A filled read-probe buffer: `bytes()` of data on 2 MiB-aligned pages advised for huge pages
// before the first touch (best effort), written by `pool`'s threads (first touch decides NUMA
// placement). Errors: the allocation failed.
struct ReadProbeBuffer {
    Buffer owned;                    // bytes + 2 MiB of slack for the alignment
    std::span<const uint8_t> bytes;  // the aligned, filled part

    static Expected<ReadProbeBuffer> allocate(size_t bytes, ThreadPool& pool);
};

// One timed pass over `buf` with every thread of `pool`: GB/s (1e9 bytes/s), wall time.
double read_pass_gbps(std::span<const uint8_t> buf, ThreadPool& pool);

struct ReadBandwidth {
    double median_gbps = 0;  // median over the timed passes
    double max_gbps = 0;
    int n_threads = 0;
    size_t bytes = 0;      // buffer size read per pass
    int passes = 0;        // timed passes (after one untimed warm-up)
    bool reduced = false;  // probe_read_bandwidth: the requested size could not be allocated
};

// One untimed pass, then timed passes until at least min_passes are done and min_seconds have
// passed (at most max_passes).
ReadBandwidth measure_read_bandwidth(std::span<const uint8_t> buf, ThreadPool& pool, int min_passes,
                                     double min_seconds = 0, int max_passes = 1000);

// Allocates `bytes` (halving down to kReadProbeMinBytes while the allocation fails; `reduced`
// says so), a pool of n_threads (0: ThreadPool::default_thread_count()) and measures for about
// min_seconds (at least 5 passes). Errors: not even kReadProbeMinBytes (or `bytes`, when
// smaller) could be allocated.
Expected<ReadBandwidth> probe_read_bandwidth(int n_threads, size_t bytes = kReadProbeBytes,
                                             double min_seconds = 0.5);

}  // namespace pelican::cpu
