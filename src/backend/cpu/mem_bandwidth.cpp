// Streaming-read memory bandwidth probe (backend/cpu/mem_bandwidth.h).
#include "backend/cpu/mem_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <sys/mman.h>

namespace pelican::cpu {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Expected<ReadProbeBuffer> ReadProbeBuffer::allocate(size_t bytes, ThreadPool& pool) {
    bytes = std::max<size_t>(bytes / 64 * 64, 64);  // whole cache lines, and the sum reads uint64 x 4
    auto buf = Buffer::allocate(bytes + kHugePage);
    if (!buf) return make_error("read bandwidth probe: {}", buf.error().message);
    ReadProbeBuffer r;
    r.owned = std::move(buf).value();
    auto* p = static_cast<uint8_t*>(r.owned.data());
    p += ((reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1)) -
         reinterpret_cast<uintptr_t>(p);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= kHugePage) madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
    const int64_t tasks = std::max<int64_t>(1, static_cast<int64_t>(bytes / kHugePage));
    pool.parallel_for(tasks, [&](int64_t t, int) {
        const size_t b = bytes * static_cast<size_t>(t) / static_cast<size_t>(tasks);
        const size_t e = bytes * static_cast<size_t>(t + 1) / static_cast<size_t>(tasks);
        std::memset(p + b, 1, e - b);
    });
    r.bytes = {p, bytes};
    return r;
}

double read_pass_gbps(std::span<const uint8_t> buf, ThreadPool& pool) {
    const size_t n = buf.size() / 8;
    const auto* p = reinterpret_cast<const uint64_t*>(buf.data());
    std::vector<uint64_t> sink(static_cast<size_t>(pool.size()) * 8);  // a cache line per thread
    const int64_t tasks = pool.size();
    const double t0 = now_s();
    pool.parallel_for(tasks, [&](int64_t task, int thread) {
        const size_t b = n * static_cast<size_t>(task) / static_cast<size_t>(tasks);
        const size_t e = n * static_cast<size_t>(task + 1) / static_cast<size_t>(tasks);
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = b; i + 4 <= e; i += 4) {
            s0 += p[i];
            s1 += p[i + 1];
            s2 += p[i + 2];
            s3 += p[i + 3];
        }
        sink[static_cast<size_t>(thread) * 8] += s0 + s1 + s2 + s3;
    });
    const double dt = now_s() - t0;
    volatile uint64_t keep = sink[0];
    (void)keep;
    return static_cast<double>(buf.size()) / std::max(dt, 1e-9) / 1e9;
}

ReadBandwidth measure_read_bandwidth(std::span<const uint8_t> buf, ThreadPool& pool, int min_passes,
                                     double min_seconds, int max_passes) {
    read_pass_gbps(buf, pool);  // warm-up
    std::vector<double> v;
    const double t0 = now_s();
    while (static_cast<int>(v.size()) < max_passes &&
           (static_cast<int>(v.size()) < std::max(1, min_passes) || now_s() - t0 < min_seconds))
        v.push_back(read_pass_gbps(buf, pool));
    std::sort(v.begin(), v.end());
    ReadBandwidth r;
    r.median_gbps = v[v.size() / 2];
    r.max_gbps = v.back();
    r.n_threads = pool.size();
    r.bytes = buf.size();
    r.passes = static_cast<int>(v.size());
    return r;
}

Expected<ReadBandwidth> probe_read_bandwidth(int n_threads, size_t bytes, double min_seconds) {
    PELICAN_ASSIGN(std::unique_ptr<ThreadPool> pool_owner, ThreadPool::create(n_threads));
    ThreadPool& pool = *pool_owner;
    const size_t floor = std::min(bytes, kReadProbeMinBytes);
    size_t size = bytes;
    Expected<ReadProbeBuffer> buf = ReadProbeBuffer::allocate(size, pool);
    while (!buf && size / 2 >= floor) {
        size /= 2;
        buf = ReadProbeBuffer::allocate(size, pool);
    }
    if (!buf) return make_error("{}", buf.error().message);
    ReadBandwidth r = measure_read_bandwidth(buf->bytes, pool, 5, min_seconds);
    r.reduced = size < bytes;
    return r;
}

}  // namespace pelican::cpu
