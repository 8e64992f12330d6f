// The CPU's SequenceMemory storage (kv/sequence_memory.h): host buffers behind the books.
//   KV: for each attention layer l, K and V pools of n_blocks blocks, block b at
//       k(l) + b * block_floats(), position j of the block at + j * kv_dim: [n_blocks, block_tokens,
//       n_head_kv, head_dim] fp32.
//   Recurrent state entries (models with recurrent layers): for each recurrent layer r and entry
//       e, conv(r, e) [conv_floats] and ssm(r, e) [ssm_floats] fp32.
#pragma once

#include <cstdint>
#include <memory>

#include "core/buffer.h"
#include "core/status.h"
#include "kv/sequence_memory.h"

namespace pelican::cpu {

struct CpuMemoryShape {
    int64_t n_attn_layers = 0;
    int64_t kv_dim = 0;  // floats per position per layer (K; V the same)
    int32_t n_blocks = 0;
    int32_t block_tokens = 16;
    int64_t n_rec_layers = 0;
    int64_t conv_floats = 0;  // per recurrent layer and entry
    int64_t ssm_floats = 0;
    int32_t n_entries = 0;
};

class CpuMemoryStorage final : public MemoryStorage {
public:
    // Errors: the allocation failed (the message gives the bytes).
    static Expected<std::unique_ptr<CpuMemoryStorage>> create(const CpuMemoryShape& s);

    void copy_kv_block(int32_t src, int32_t dst) override;
    void copy_state(int32_t src, int32_t dst) override;
    void clear_state(int32_t e) override;
    size_t bytes() const override { return kv_.size() + state_.size(); }

    const CpuMemoryShape& shape() const { return s_; }
    int64_t block_floats() const { return int64_t{s_.block_tokens} * s_.kv_dim; }
    float* k(int64_t layer) { return base() + (2 * layer) * pool_floats(); }
    float* v(int64_t layer) { return base() + (2 * layer + 1) * pool_floats(); }
    float* conv(int64_t r, int32_t e) { return state() + (r * s_.n_entries + e) * entry_floats(); }
    float* ssm(int64_t r, int32_t e) { return conv(r, e) + s_.conv_floats; }

private:
    explicit CpuMemoryStorage(const CpuMemoryShape& s) : s_(s) {}
    int64_t pool_floats() const { return int64_t{s_.n_blocks} * block_floats(); }
    int64_t entry_floats() const { return s_.conv_floats + s_.ssm_floats; }
    float* base() { return static_cast<float*>(kv_.data()); }
    float* state() { return static_cast<float*>(state_.data()); }

    CpuMemoryShape s_;
    Buffer kv_, state_;
};

}  // namespace pelican::cpu
