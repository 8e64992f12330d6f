// The fp32 KV cache of one sequence: for every layer, K and V rows for n_ctx positions,
// preallocated once (nothing grows during generation).
//   k(layer) / v(layer): [n_ctx, n_head_kv, head_dim] fp32, position p at p * kv_dim.
#pragma once

#include <cstdint>

#include "core/buffer.h"
#include "core/status.h"

namespace pelican {

class KvCache {
public:
    // Errors: non-positive sizes, or the allocation failed (message gives the bytes).
    static Expected<KvCache> create(int64_t n_layer, int64_t n_ctx, int64_t kv_dim);

    int64_t n_ctx() const { return n_ctx_; }
    int64_t kv_dim() const { return kv_dim_; }
    float* k(int64_t layer) { return static_cast<float*>(k_.data()) + layer * n_ctx_ * kv_dim_; }
    float* v(int64_t layer) { return static_cast<float*>(v_.data()) + layer * n_ctx_ * kv_dim_; }
    size_t bytes() const { return k_.size() + v_.size(); }

private:
    int64_t n_layer_ = 0, n_ctx_ = 0, kv_dim_ = 0;
    Buffer k_, v_;
};

}  // namespace pelican
