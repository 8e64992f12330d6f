#include "core/buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace pelican {

Buffer& Buffer::operator=(Buffer&& o) noexcept {
    if (this != &o) {
        release();
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
        align_ = o.align_;
    }
    return *this;
}

void Buffer::release() {
    std::free(data_);  // aligned_alloc memory is released with free
    data_ = nullptr;
    size_ = 0;
}

Expected<Buffer> Buffer::allocate(size_t bytes) {
    Buffer b;
    b.align_ = bytes >= kBufferPageAlignFrom ? kBufferPageAlign : kBufferAlign;
    if (bytes == 0) return b;
    if (bytes > SIZE_MAX - b.align_) return make_error("cannot allocate {} bytes: size too large", bytes);
    const size_t rounded = (bytes + b.align_ - 1) / b.align_ * b.align_;  // aligned_alloc needs a multiple
    b.data_ = std::aligned_alloc(b.align_, rounded);
    if (b.data_ == nullptr) return make_error("out of memory allocating {} bytes", bytes);
    b.size_ = bytes;
    return b;
}

Expected<Buffer> Buffer::allocate_zeroed(size_t bytes) {
    PELICAN_ASSIGN(Buffer b, allocate(bytes));
    if (bytes > 0) std::memset(b.data_, 0, bytes);
    return b;
}

Expected<Tensor> Buffer::view(DType t, std::span<const int64_t> ne, std::string_view name, size_t offset) {
    PELICAN_ASSIGN(Tensor v, Tensor::contiguous_view(t, ne, nullptr, name));
    const auto need = static_cast<uint64_t>(v.n_bytes());
    if (offset > size_ || need > size_ - offset)
        return make_error("tensor '{}': {} bytes at offset {} do not fit a buffer of {} bytes", name, need,
                          offset, size_);
    v.data = static_cast<uint8_t*>(data_) + offset;
    return v;
}

}  // namespace pelican
