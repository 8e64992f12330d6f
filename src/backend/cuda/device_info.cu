#include "backend/cuda/device_info.h"

#include <cuda_runtime.h>

#include <cstdio>

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

}  // namespace pelican::cuda
