// Host-callable CUDA device queries (compiled only when the CUDA backend is on).
#pragma once

#include <string>

namespace pelican::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no device (never aborts).
int device_count();
// "NVIDIA H200 (sm_90, 139.8 GiB)" for device i, or an empty string if unavailable.
std::string device_description(int i);

}  // namespace pelican::cuda
