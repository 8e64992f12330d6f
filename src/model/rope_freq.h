// Rope frequencies: inv_freq[i] (radians per position) for each of the rope_dim/2 rotated pairs,
// with the rope scaling variants of transformers' ROPE_INIT_FUNCTIONS, computed in fp32 as
// transformers does:
//   default  inv_freq[i] = 1 / theta^(2i / rope_dim)
//   linear   inv_freq / factor
//   llama3   long wavelengths (> original_ctx / low_freq_factor) divided by factor, short ones
//            (< original_ctx / high_freq_factor) kept, a linear blend in between
//   yarn     blend of interpolated (inv_freq / factor) and extrapolated frequencies over a ramp
//            between the beta_fast / beta_slow correction dims; cos/sin scaled by attention_factor
//            (default 0.1 ln(factor) + 1)
//   dynamic  (NTK) treated as default: exact while positions stay below the original context
// The angle of pair i at position p is p * inv_freq[i]; cos and sin are multiplied by attn_factor.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "formats/hf_config.h"

namespace pelican {

struct RopeFreqs {
    std::vector<float> inv_freq;  // [rope_dim / 2]
    float attn_factor = 1.0f;     // multiplies cos and sin (yarn mscale)
};

// scaling: nullptr for plain rope. max_position_embeddings: the fallback for yarn's
// original_max_position_embeddings. source names the file in errors (unknown type, bad values).
Expected<RopeFreqs> compute_rope_freqs(int64_t rope_dim, double theta, const RopeScaling* scaling,
                                       int64_t max_position_embeddings, std::string_view source);

}  // namespace pelican
