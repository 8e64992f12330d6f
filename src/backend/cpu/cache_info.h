// The CPU's last-level cache, for telling when a benchmark's working set never leaves it (then a
// memory-bandwidth roofline says nothing about the run).
#pragma once

#include <cstdint>

namespace pelican::cpu {

// Bytes of last-level cache the CPUs this process may run on can use: the sum over the distinct
// highest-level cache instances (sysfs /sys/devices/system/cpu/cpuN/cache/indexM: level, size,
// shared_cpu_list). 0 when it cannot be read.
int64_t last_level_cache_bytes();

}  // namespace pelican::cpu
