// RAII device memory (cudaMalloc / cudaFree) and a test helper that asks whether a GPU is usable.
// Host-includable, fmt-free.
#pragma once

#include <cstddef>
#include <utility>

#include <cuda_runtime_api.h>

namespace pelican::cuda {

class DeviceBuffer {
public:
    DeviceBuffer() = default;
    // Returns an empty buffer when the allocation fails (check ok()).
    explicit DeviceBuffer(size_t bytes) {
        if (bytes && cudaMalloc(&p_, bytes) == cudaSuccess)
            n_ = bytes;
        else {
            p_ = nullptr;
            cudaGetLastError();
        }
    }
    ~DeviceBuffer() { reset(); }
    DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            n_ = std::exchange(o.n_, 0);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void reset() {
        if (p_) cudaFree(p_);
        p_ = nullptr;
        n_ = 0;
    }
    bool ok() const { return p_ != nullptr; }
    void* get() const { return p_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(p_);
    }
    size_t size() const { return n_; }

private:
    void* p_ = nullptr;
    size_t n_ = 0;
};

// True when a CUDA device can be used (driver present, >= 1 device). Never aborts.
inline bool gpu_available() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return n > 0;
}

}  // namespace pelican::cuda
