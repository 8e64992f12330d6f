// Host-callable CUDA device queries (compiled only when the CUDA backend is on).
#pragma once

#include <cstddef>
#include <string>

namespace pelican::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no device (never aborts).
int device_count();
// "NVIDIA H200 (sm_90, 139.8 GiB)" for device i, or an empty string if unavailable.
std::string device_description(int i);

// Compute capability major of the current device (cached per device; 0 when there is no device).
// Cheap enough for launch paths: one cudaGetDevice call after the first query.
int current_device_cc_major();

// The GPU's memory bandwidth as a device-to-device cudaMemcpy of `bytes` (>= 1 GiB by default)
// sees it: read + write bytes (2 * bytes) per copy / its time (CUDA events), median of `passes`
// copies after one warm-up copy, in GB/s (1e9 bytes/s). On the current device. Returns 0 when
// the buffers cannot be allocated (e.g. out of memory) or a call fails; never aborts.
double measure_copy_bandwidth_gbps(size_t bytes = size_t{1} << 30, int passes = 10);

}  // namespace pelican::cuda
