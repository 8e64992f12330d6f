// Shared by the CUDA attention and rope tests (cuda_attention_test, cuda_rope_store_test): an
// element-wise comparison against per-element tolerances with a report of the worst element by
// (token, head, dim). Include only in tests built with the CUDA backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace pelican::test {

// Compares out with ref under tol; one failure message with the worst element and a summary.
inline void expect_close(const std::vector<float>& out, const std::vector<float>& ref,
                         const std::vector<double>& tol, int n_head, int hd, const std::string& what) {
    size_t worst = 0, n_bad = 0;
    double worst_ratio = -1, max_abs = 0, max_ref = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        const double err = std::fabs(static_cast<double>(out[i]) - ref[i]);
        const double ratio = std::isfinite(err) ? err / tol[i] : INFINITY;
        if (!(ratio <= 1.0)) ++n_bad;
        if (!(ratio <= worst_ratio)) {
            worst_ratio = ratio;
            worst = i;
        }
        if (std::isfinite(err)) max_abs = std::max(max_abs, err);
        max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
    }
    const size_t per_tok = static_cast<size_t>(n_head) * hd;
    const std::string where = "token " + std::to_string(worst / per_tok) + " head " +
                              std::to_string(worst % per_tok / hd) + " dim " + std::to_string(worst % hd);
    if (n_bad) {
        ADD_FAILURE() << what << ": " << n_bad << " of " << out.size() << " outside tolerance; worst at "
                      << where << ": got " << out[worst] << " want " << ref[worst] << " tol " << tol[worst]
                      << " (err/tol " << worst_ratio << "); max |err| " << max_abs << ", max |ref| "
                      << max_ref;
    } else {
        std::printf("  %s: max |err| %.3g (max |ref| %.3g), worst err/tol %.3g\n", what.c_str(), max_abs,
                    max_ref, worst_ratio);
    }
}

}  // namespace pelican::test
