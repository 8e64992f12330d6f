// CudaMemoryStorage (cuda_memory.h).
#include "backend/cuda/cuda_memory.h"

#include <atomic>

#include "backend/cuda/cuda_check.h"

namespace pelican::cuda {

Expected<std::unique_ptr<CudaMemoryStorage>> CudaMemoryStorage::create(const CudaMemoryShape& s,
                                                                       cudaStream_t stream) {
    if (s.kv_type != DType::F16 && s.kv_type != DType::F32)
        return make_error("sequence memory: KV type {} (F16 or F32)", dtype_name(s.kv_type));
    std::unique_ptr<CudaMemoryStorage> m(new CudaMemoryStorage(s, stream));
    static std::atomic<uint64_t> next_id{1};
    m->id_ = next_id.fetch_add(1, std::memory_order_relaxed);
    const size_t kv_bytes = 2 * static_cast<size_t>(s.n_attn_layers) * m->pool_bytes();
    const size_t state_bytes = static_cast<size_t>(s.n_rec_layers) * static_cast<size_t>(s.n_entries) *
                               m->entry_floats() * sizeof(float);
    const auto gib = [](size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); };
    if (kv_bytes) {
        m->kv_ = DeviceBuffer(kv_bytes);
        if (!m->kv_.ok())
            return make_error(
                "sequence memory: out of GPU memory for {:.2f} GiB of KV pages ({} blocks of {})",
                gib(kv_bytes), s.n_blocks, s.block_tokens);
    }
    if (state_bytes) {
        m->state_ = DeviceBuffer(state_bytes);
        if (!m->state_.ok())
            return make_error("sequence memory: out of GPU memory for {:.2f} GiB of recurrent state",
                              gib(state_bytes));
    }
    return m;
}

KvView CudaMemoryStorage::kv(int64_t l) const {
    auto* base = kv_.as<std::byte>();
    KvView v;
    v.k = base + static_cast<size_t>(2 * l) * pool_bytes();
    v.v = base + static_cast<size_t>(2 * l + 1) * pool_bytes();
    v.type = s_.kv_type;
    v.n_ctx = int64_t{s_.n_blocks} * s_.block_tokens;
    return v;
}

void CudaMemoryStorage::copy_kv_block(int32_t src, int32_t dst) {
    auto* base = kv_.as<std::byte>();
    const size_t bb = block_bytes();
    for (int64_t p = 0; p < 2 * s_.n_attn_layers; ++p) {
        std::byte* pool = base + static_cast<size_t>(p) * pool_bytes();
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(pool + static_cast<size_t>(dst) * bb,
                                           pool + static_cast<size_t>(src) * bb, bb, cudaMemcpyDeviceToDevice,
                                           stream_));
    }
}

void CudaMemoryStorage::copy_state(int32_t src, int32_t dst) {
    const size_t bytes = static_cast<size_t>(entry_floats()) * sizeof(float);
    for (int64_t r = 0; r < s_.n_rec_layers; ++r)
        PELICAN_CUDA_CHECK(
            cudaMemcpyAsync(conv(r, dst), conv(r, src), bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaMemoryStorage::clear_state(int32_t e) {
    const size_t bytes = static_cast<size_t>(entry_floats()) * sizeof(float);
    for (int64_t r = 0; r < s_.n_rec_layers; ++r)
        PELICAN_CUDA_CHECK(cudaMemsetAsync(conv(r, e), 0, bytes, stream_));
}

}  // namespace pelican::cuda
