// Host-side helpers of the CUDA forward passes (see host_staging.h).
#include "backend/cuda/host_staging.h"

#include <cstring>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "core/format_bytes.h"

namespace pelican::cuda {

PinnedHost::~PinnedHost() {
    if (p) PELICAN_CUDA_CHECK(cudaFreeHost(p));
}

Status PinnedHost::alloc(size_t bytes, const char* what) {
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        p = nullptr;
        return make_error("allocating {} of pinned host memory ({}) failed", human_bytes(bytes), what);
    }
    std::memset(p, 0, bytes);
    return {};
}

cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& enqueue) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    PELICAN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    enqueue();
    PELICAN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    PELICAN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    PELICAN_CUDA_CHECK(cudaGraphDestroy(graph));
    PELICAN_CUDA_CHECK(cudaGraphUpload(exec, stream));
    return exec;
}

}  // namespace pelican::cuda
