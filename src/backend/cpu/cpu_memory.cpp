// CpuMemoryStorage (backend/cpu/cpu_memory.h).
#include "backend/cpu/cpu_memory.h"

#include <algorithm>
#include <cstring>

namespace pelican::cpu {

Expected<std::unique_ptr<CpuMemoryStorage>> CpuMemoryStorage::create(const CpuMemoryShape& s) {
    std::unique_ptr<CpuMemoryStorage> m(new CpuMemoryStorage(s));
    const auto kv_bytes = static_cast<size_t>(2 * s.n_attn_layers * m->pool_floats()) * sizeof(float);
    const auto st_bytes =
        static_cast<size_t>(s.n_rec_layers * s.n_entries * m->entry_floats()) * sizeof(float);
    if (kv_bytes > 0) {
        auto kv = Buffer::allocate(kv_bytes);
        if (!kv)
            return make_error("KV pool of {} blocks x {} tokens: {}", s.n_blocks, s.block_tokens,
                              kv.error().message);
        m->kv_ = std::move(kv).value();
    }
    if (st_bytes > 0) {
        auto st = Buffer::allocate_zeroed(st_bytes);
        if (!st) return make_error("recurrent state of {} entries: {}", s.n_entries, st.error().message);
        m->state_ = std::move(st).value();
    }
    return m;
}

void CpuMemoryStorage::copy_kv_block(int32_t src, int32_t dst) {
    const size_t bytes = static_cast<size_t>(block_floats()) * sizeof(float);
    for (int64_t l = 0; l < s_.n_attn_layers; ++l) {
        std::memcpy(k(l) + dst * block_floats(), k(l) + src * block_floats(), bytes);
        std::memcpy(v(l) + dst * block_floats(), v(l) + src * block_floats(), bytes);
    }
}

void CpuMemoryStorage::copy_state(int32_t src, int32_t dst) {
    const size_t bytes = static_cast<size_t>(entry_floats()) * sizeof(float);
    for (int64_t r = 0; r < s_.n_rec_layers; ++r) std::memcpy(conv(r, dst), conv(r, src), bytes);
}

void CpuMemoryStorage::clear_state(int32_t e) {
    for (int64_t r = 0; r < s_.n_rec_layers; ++r) std::fill(conv(r, e), conv(r, e) + entry_floats(), 0.0f);
}

}  // namespace pelican::cpu
