// Shared by the CUDA op tests (cuda_*_test.cpp): the small-problem mode, and a guard that restores
// cuda::gemv's kernel choice.
//
// PELICAN_CUDA_TEST_SMALL=1 (any value other than empty or "0") makes the op tests run every code
// path and kernel variant they cover with the smallest sizes that still reach it: fewer lengths,
// fewer repetitions and random draws, shorter vocabularies and contexts. It exists for
// compute-sanitizer (tools/gpu/check.sh's sanitize phase), under which the full sizes are far
// too slow. Each test file's header says which cases the small mode keeps. Unset, the tests run
// exactly their full cases.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/gemv.h"

namespace pelican::test {

inline bool cuda_test_small() {
    static const bool small = [] {
        const char* e = std::getenv("PELICAN_CUDA_TEST_SMALL");
        const bool on = e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0;
        if (on) std::printf("PELICAN_CUDA_TEST_SMALL: small-problem mode (sanitizer sizes)\n");
        return on;
    }();
    return small;
}

// full normally, small in the small-problem mode.
template <typename T>
T cuda_test_size(T full, T small) {
    return cuda_test_small() ? small : full;
}

// On leaving the scope (also through an ASSERT's early return) restores the default kernel choice:
// no forced variant.
struct GemvKernelReset {
    GemvKernelReset() = default;
    ~GemvKernelReset() { cuda::gemv_force_variant(-1); }
    GemvKernelReset(const GemvKernelReset&) = delete;
    GemvKernelReset& operator=(const GemvKernelReset&) = delete;
};

}  // namespace pelican::test
