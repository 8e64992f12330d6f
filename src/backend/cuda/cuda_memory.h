// The CUDA SequenceMemory storage (kv/sequence_memory.h): device buffers behind the books.
//   KV: for each attention layer l, K and V pools of n_blocks blocks of block_tokens positions,
//       [n_blocks, block_tokens, n_head_kv, head_dim] of kv_type (F16, or F32 for fp32 models): the
//       K/V row of pool row `slot` (= block * block_tokens + p % block_tokens) at slot * kv_dim.
//       A layer's pools seen as a KvView (attention.h) of n_blocks * block_tokens rows.
//   Recurrent state entries (models with recurrent layers): for each recurrent layer r and entry e,
//       conv(r, e) [conv_floats] then ssm(r, e) [ssm_floats] fp32, one entry's floats contiguous.
// Copies (copy on write, fork, clear) are queued on the executor's stream, in order with its steps.
// Host code only.
#pragma once

#include <cstdint>
#include <memory>

#include <cuda_runtime_api.h>

#include "backend/cuda/attention.h"
#include "backend/cuda/device_buffer.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kv/sequence_memory.h"

namespace pelican::cuda {

struct CudaMemoryShape {
    int64_t n_attn_layers = 0;
    int64_t kv_dim = 0;  // elements per position per layer (K; V the same)
    DType kv_type = DType::F16;
    int32_t n_blocks = 0;
    int32_t block_tokens = 16;
    int64_t n_rec_layers = 0;
    int64_t conv_floats = 0;  // per recurrent layer and entry
    int64_t ssm_floats = 0;
    int32_t n_entries = 0;
};

class CudaMemoryStorage final : public MemoryStorage {
public:
    // Errors: out of device memory (the message gives the bytes). The stream must outlive it.
    static Expected<std::unique_ptr<CudaMemoryStorage>> create(const CudaMemoryShape& s, cudaStream_t stream);

    void copy_kv_block(int32_t src, int32_t dst) override;
    void copy_state(int32_t src, int32_t dst) override;
    void clear_state(int32_t e) override;
    size_t bytes() const override { return kv_.size() + state_.size(); }

    const CudaMemoryShape& shape() const { return s_; }
    // Unique per storage made in this process (never reused, unlike device addresses): what a captured
    // graph holding this storage's pointers is keyed on.
    uint64_t id() const { return id_; }
    // Layer slot l's pools as one cache of n_blocks * block_tokens rows.
    KvView kv(int64_t l) const;
    float* conv(int64_t r, int32_t e) const { return state() + (r * s_.n_entries + e) * entry_floats(); }
    float* ssm(int64_t r, int32_t e) const { return conv(r, e) + s_.conv_floats; }
    int64_t entry_floats() const { return s_.conv_floats + s_.ssm_floats; }

private:
    CudaMemoryStorage(const CudaMemoryShape& s, cudaStream_t stream) : s_(s), stream_(stream) {}
    size_t elem() const { return dtype_info(s_.kv_type).block_bytes; }
    size_t block_bytes() const { return static_cast<size_t>(s_.block_tokens) * s_.kv_dim * elem(); }
    size_t pool_bytes() const { return static_cast<size_t>(s_.n_blocks) * block_bytes(); }
    float* state() const { return state_.as<float>(); }

    CudaMemoryShape s_;
    uint64_t id_ = 0;
    cudaStream_t stream_ = nullptr;
    DeviceBuffer kv_, state_;
};

}  // namespace pelican::cuda
