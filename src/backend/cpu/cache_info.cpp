// Last-level cache size from sysfs (backend/cpu/cache_info.h).
#include "backend/cpu/cache_info.h"

#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

namespace pelican::cpu {
namespace {

bool read_line(const std::string& path, std::string& out) {
    std::ifstream f(path);
    return static_cast<bool>(std::getline(f, out));
}

// "32768K", "8M", "1024" -> bytes; 0 when malformed.
int64_t parse_size(const std::string& s) {
    size_t i = 0;
    int64_t v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        v = v * 10 + (s[i] - '0');
        if (v > (int64_t{1} << 40)) return 0;
        ++i;
    }
    if (i == 0) return 0;
    if (i < s.size() && (s[i] == 'K' || s[i] == 'k')) return v << 10;
    if (i < s.size() && (s[i] == 'M' || s[i] == 'm')) return v << 20;
    if (i < s.size() && (s[i] == 'G' || s[i] == 'g')) return v << 30;
    return v;
}

}  // namespace

int64_t last_level_cache_bytes() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
    int best_level = 0;
    int64_t total = 0;
    std::set<std::string> seen;  // shared_cpu_list of each instance counted at best_level
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &set)) continue;
        const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index";
        for (int idx = 0; idx < 16; ++idx) {
            std::string level_s, size_s, shared, type;
            const std::string dir = base + std::to_string(idx) + "/";
            if (!read_line(dir + "level", level_s)) break;
            if (read_line(dir + "type", type) && type == "Instruction") continue;
            if (!read_line(dir + "size", size_s) || !read_line(dir + "shared_cpu_list", shared)) continue;
            const int level = std::atoi(level_s.c_str());
            const int64_t size = parse_size(size_s);
            if (size <= 0) continue;
            if (level > best_level) {
                best_level = level;
                total = 0;
                seen.clear();
            }
            if (level == best_level && seen.insert(shared).second) total += size;
        }
    }
    return total;
}

}  // namespace pelican::cpu
