// Run-time instruction-set selection for the CPU kernels.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace pelican::cpu {
namespace {

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vnni");
    // F16C is implied by every AVX2 CPU in practice; __builtin_cpu_supports has no "f16c" key in
    // all GCC versions, so it is not tested separately.
    if (avx512) return Isa::kAvx512;
    if (avx2) return Isa::kAvx2;
#endif
    return Isa::kScalar;
}

Isa from_env(Isa detected) {
    const char* env = std::getenv("PELICAN_CPU_ISA");
    if (!env) return detected;
    Isa want = detected;
    if (std::strcmp(env, "scalar") == 0) want = Isa::kScalar;
    if (std::strcmp(env, "avx2") == 0) want = Isa::kAvx2;
    if (std::strcmp(env, "avx512") == 0) want = Isa::kAvx512;
    return want < detected ? want : detected;
}

std::atomic<int> g_active{-1};

}  // namespace

Isa detected_isa() {
    static const Isa isa = detect();
    return isa;
}

Isa active_isa() {
    int v = g_active.load(std::memory_order_relaxed);
    if (v < 0) {
        v = static_cast<int>(from_env(detected_isa()));
        g_active.store(v, std::memory_order_relaxed);
    }
    return static_cast<Isa>(v);
}

void set_isa(Isa isa) {
    const Isa d = detected_isa();
    g_active.store(static_cast<int>(isa < d ? isa : d), std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::kAvx512:
            return "avx512";
        case Isa::kAvx2:
            return "avx2";
        default:
            return "scalar";
    }
}

}  // namespace pelican::cpu
