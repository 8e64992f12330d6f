#include "backend/cuda/device_info.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <vector>

namespace pelican::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

std::string device_description(int i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
        cudaGetLastError();
        return {};
    }
    // fmt's consteval format strings do not compile under nvcc: keep .cu files fmt-free.
    char buf[512];
    std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                  static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

int current_device_cc_major() {
    static std::atomic<int> major[64];  // 0: not read yet
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (dev < 0 || dev >= 64) return 0;
    int m = major[dev].load(std::memory_order_relaxed);
    if (m == 0 && cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    major[dev].store(m, std::memory_order_relaxed);
    return m;
}

double measure_copy_bandwidth_gbps(size_t bytes, int passes) {
    if (bytes == 0 || passes <= 0) return 0.0;
    void* a = nullptr;
    void* b = nullptr;
    cudaStream_t s = nullptr;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    std::vector<double> gbps;
    bool ok = cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
              cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
              cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess &&
              cudaMemsetAsync(a, 1, bytes, s) == cudaSuccess &&
              cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s) == cudaSuccess &&  // warm-up
              cudaStreamSynchronize(s) == cudaSuccess;
    for (int i = 0; ok && i < passes; ++i) {
        float ms = 0;
        ok = cudaEventRecord(e0, s) == cudaSuccess &&
             cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice, s) ==
                 cudaSuccess &&
             cudaEventRecord(e1, s) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
             cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms > 0;
        if (ok) gbps.push_back(2.0 * static_cast<double>(bytes) / (static_cast<double>(ms) * 1e-3) / 1e9);
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    cudaGetLastError();  // leave no sticky error from a failed allocation
    if (!ok || gbps.empty()) return 0.0;
    std::sort(gbps.begin(), gbps.end());
    const size_t m = gbps.size() / 2;
    return gbps.size() % 2 ? gbps[m] : (gbps[m - 1] + gbps[m]) / 2;
}

}  // namespace pelican::cuda
