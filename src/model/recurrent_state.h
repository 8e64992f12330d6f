// Per-sequence recurrent state of the Gated DeltaNet layers of a hybrid model, next to the KV cache of
// its full-attention layers: for every DeltaNet layer the causal conv's last kernel-1 inputs and the
// fp32 delta-rule state S. A value type: copying it is a snapshot, assigning one back a rollback
// (speculative decoding will use exactly that).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/ops_qwen35.h"

namespace pelican {

class RecurrentState {
public:
    RecurrentState() = default;
    RecurrentState(int64_t n_layers, const DeltaNetShape& s, int conv_kernel)
        : conv_floats_(int64_t{conv_kernel - 1} * s.conv_dim()),
          ssm_floats_(s.state_floats()),
          conv_(static_cast<size_t>(n_layers * conv_floats_), 0.0f),
          ssm_(static_cast<size_t>(n_layers * ssm_floats_), 0.0f) {}

    float* conv(int64_t layer) { return conv_.data() + layer * conv_floats_; }  // [kernel-1, conv_dim]
    float* ssm(int64_t layer) { return ssm_.data() + layer * ssm_floats_; }     // [n_v_heads, d_k, d_v]
    void reset() {
        std::fill(conv_.begin(), conv_.end(), 0.0f);
        std::fill(ssm_.begin(), ssm_.end(), 0.0f);
    }
    size_t bytes() const { return (conv_.size() + ssm_.size()) * sizeof(float); }

private:
    int64_t conv_floats_ = 0, ssm_floats_ = 0;  // per layer
    std::vector<float> conv_, ssm_;
};

}  // namespace pelican
