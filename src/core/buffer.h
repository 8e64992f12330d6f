// Buffer: an owning, move-only, aligned host allocation. Views into it are Tensors (core/tensor.h).
// Alignment is 64 B (one cache line, enough for AVX-512 loads), or 4 KiB (a page) from
// kBufferPageAlignFrom bytes on, so large weights and KV pools start on a page boundary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"

namespace pelican {

inline constexpr size_t kBufferAlign = 64;
inline constexpr size_t kBufferPageAlign = 4096;
inline constexpr size_t kBufferPageAlignFrom = size_t{1} << 20;  // 1 MiB

class Buffer {
public:
    Buffer() = default;
    ~Buffer() { release(); }
    Buffer(Buffer&& o) noexcept : data_(o.data_), size_(o.size_), align_(o.align_) {
        o.data_ = nullptr;
        o.size_ = 0;
    }
    Buffer& operator=(Buffer&& o) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    // Allocates bytes (contents uninitialised). A zero-byte buffer is valid and empty.
    // Errors: the allocation failed (message says how many bytes).
    static Expected<Buffer> allocate(size_t bytes);
    // Same, filled with zero bytes.
    static Expected<Buffer> allocate_zeroed(size_t bytes);

    void* data() { return data_; }
    const void* data() const { return data_; }
    size_t size() const { return size_; }
    size_t alignment() const { return align_; }
    bool empty() const { return size_ == 0; }
    std::span<uint8_t> bytes() { return {static_cast<uint8_t*>(data_), size_}; }
    std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(data_), size_}; }

    // A contiguous Tensor over [offset, offset + bytes of shape) of this buffer; shape in GGUF
    // order (ne[0] fastest). Errors: bad shape (see Tensor::contiguous_view) or it does not fit.
    Expected<Tensor> view(DType t, std::span<const int64_t> ne, std::string_view name = {},
                          size_t offset = 0);
    Expected<Tensor> view(DType t, std::initializer_list<int64_t> ne, std::string_view name = {},
                          size_t offset = 0) {
        return view(t, std::span<const int64_t>(ne.begin(), ne.size()), name, offset);
    }

private:
    void release();
    void* data_ = nullptr;
    size_t size_ = 0;
    size_t align_ = kBufferAlign;
};

}  // namespace pelican
