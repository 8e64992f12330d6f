// Host <-> device copies for the CUDA op tests (cuda_gemv_test, cuda_moe_test, cuda_moe_mma_test):
// failures are gtest failures (EXPECT), not aborts. Include only in tests built with the CUDA backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/device_buffer.h"

namespace pelican::test {

// A device copy of v (at least 16 bytes allocated, so that an empty vector still gives a valid
// pointer).
template <typename T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
    cuda::DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
    EXPECT_TRUE(b.ok());
    if (!v.empty()) {
        EXPECT_EQ(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
    return b;
}

// n values of T from device memory p, after the device has finished its work.
template <typename T>
std::vector<T> from_device(const void* p, size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
}

template <typename T>
std::vector<T> from_device(const cuda::DeviceBuffer& b, size_t n) {
    return from_device<T>(b.get(), n);
}

}  // namespace pelican::test
