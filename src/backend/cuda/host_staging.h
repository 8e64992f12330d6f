// Host-side helpers shared by the CUDA forward passes (cuda_forward.cpp, cuda_hybrid_forward.cpp):
// pinned staging memory, carving one device allocation into aligned slices, and capturing a CUDA
// graph from a function that enqueues work. Host code only (fmt via core/status.h).
#pragma once

#include <cstddef>
#include <functional>

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace pelican::cuda {

// Pinned host memory (cudaMallocHost), freed on destruction. alloc() zero-fills; errors name `what`.
class PinnedHost {
public:
    PinnedHost() = default;
    PinnedHost(const PinnedHost&) = delete;
    PinnedHost& operator=(const PinnedHost&) = delete;
    ~PinnedHost();
    Status alloc(size_t bytes, const char* what);
    void* p = nullptr;
};

// Consecutive 256-byte aligned slices of one allocation: add() returns each slice's offset.
class Carver {
public:
    size_t add(size_t bytes) {
        const size_t off = total_;
        total_ += (bytes + 255) / 256 * 256;
        return off;
    }
    size_t total() const { return total_; }

private:
    size_t total_ = 0;
};

// Captures what enqueue() queues on stream (thread-local capture mode) into an instantiated graph,
// uploaded to the device. Aborts on CUDA errors (cuda_check.h).
cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& enqueue);

}  // namespace pelican::cuda
