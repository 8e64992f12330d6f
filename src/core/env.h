// PELICAN_* switches read from the environment (debugging and A/B measurements; docs/cuda.md lists the
// GPU backend's). Callers that must not change within a process cache the value (a function-local static).
#pragma once

#include <cstdlib>

namespace pelican {

// An off switch: true unless `name` is set to a value starting with '0' (unset: on).
inline bool env_switch_on(const char* name) {
    const char* e = std::getenv(name);
    return !(e && e[0] == '0');
}

// An opt-in switch: true only when `name` is set to a value starting with '1'.
inline bool env_switch_set(const char* name) {
    const char* e = std::getenv(name);
    return e && e[0] == '1';
}

// An integer setting: `name` parsed as a decimal number when it lies in [lo, hi], else `def` (unset,
// not a number, or out of range).
inline long env_int(const char* name, long lo, long hi, long def) {
    const char* e = std::getenv(name);
    if (!e) return def;
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    return end != e && v >= lo && v <= hi ? v : def;
}

}  // namespace pelican
