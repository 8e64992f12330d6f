// KV cache allocation (see kv_cache.h).
#include "model/kv_cache.h"

#include <limits>

namespace pelican {

Expected<KvCache> KvCache::create(int64_t n_layer, int64_t n_ctx, int64_t kv_dim) {
    if (n_layer <= 0 || n_ctx <= 0 || kv_dim <= 0)
        return make_error("KV cache: sizes must be positive (layers {}, context {}, kv width {})", n_layer,
                          n_ctx, kv_dim);
    const double bytes =
        static_cast<double>(n_layer) * static_cast<double>(n_ctx) * static_cast<double>(kv_dim) * 4.0;
    if (bytes > static_cast<double>(std::numeric_limits<int64_t>::max() / 4))
        return make_error("KV cache: {} layers x {} positions x {} floats is too large", n_layer, n_ctx,
                          kv_dim);
    KvCache c;
    c.n_layer_ = n_layer;
    c.n_ctx_ = n_ctx;
    c.kv_dim_ = kv_dim;
    const auto n = static_cast<size_t>(n_layer * n_ctx * kv_dim) * sizeof(float);
    auto k = Buffer::allocate_zeroed(n);
    if (!k) return make_error("KV cache for {} positions: {}", n_ctx, k.error().message);
    auto v = Buffer::allocate_zeroed(n);
    if (!v) return make_error("KV cache for {} positions: {}", n_ctx, v.error().message);
    c.k_ = std::move(k).value();
    c.v_ = std::move(v).value();
    return c;
}

}  // namespace pelican
