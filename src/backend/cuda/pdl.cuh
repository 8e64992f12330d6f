// Programmatic dependent launch (PDL, sm_90): lets kernel N+1's CTAs start while kernel N drains,
// so N+1 can prefetch data that does not depend on N (weights) before it waits. Private to the
// .cu files of the backend. Rules for a kernel launched with launch_pdl():
//   * call pdl_wait() in EVERY CTA before the first read of a buffer an earlier kernel writes,
//     and before any write to a buffer an earlier kernel reads (and before any early return);
//   * before pdl_wait() only read data no kernel in the step writes (weights, tables), or data
//     written at least two launches earlier on the stream (below);
//   * call pdl_trigger() after pdl_wait(), once its own dependent data has been read: the next
//     PDL kernel's CTAs may then be scheduled (they still wait for this grid's completion and
//     memory flush in their own pdl_wait()).
// Because every kernel triggers only after its own wait, when a kernel's CTAs run, the kernel two
// launches back (and everything before it) has completed and its writes are visible: such data may
// be read before pdl_wait() (the DeltaNet state in deltanet_step). A kernel that triggered before its wait
// would break this. Kernels launched normally may call both (they are no-ops then). PELICAN_PDL=0 in the
// environment disables the attribute (every launch fully serialised) for debugging.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/tuning.h"

namespace pelican::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// True unless tuning pdl is off (PELICAN_PDL=0).
inline bool pdl_enabled() { return cuda_tuning().pdl; }

// Launches kernel<<<grid, block, smem, stream>>>(args...) in clusters of cluster_x CTAs along x (sm_90;
// 1 = no cluster attribute; grid.x must be a multiple) with the programmatic-stream-serialization
// attribute (when enabled). Checked. Graph-capturable.
template <typename... KArgs, typename... Args>
inline void launch_pdl_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, unsigned cluster_x, Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (cluster_x > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster_x;
        attr[n].val.clusterDim.y = 1;
        attr[n].val.clusterDim.z = 1;
        ++n;
    }
    if (pdl_enabled()) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        ++n;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    PELICAN_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// launch_pdl_cluster without clusters.
template <typename... KArgs, typename... Args>
inline void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
    launch_pdl_cluster(kernel, grid, block, smem, stream, 1u, std::forward<Args>(args)...);
}

}  // namespace pelican::cuda
