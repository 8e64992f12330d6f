// Human-readable byte counts for summaries and progress lines.
#pragma once

#include <cstdint>
#include <string>

namespace pelican {

// "812 B", "1.50 KiB", "2.05 GiB" (binary units, two decimals above 1 KiB).
std::string human_bytes(uint64_t bytes);

}  // namespace pelican
