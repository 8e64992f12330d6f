#include "core/tensor.h"

#include <algorithm>
#include <limits>

namespace pelican {
namespace {

// a * b for non-negative values; false on int64 overflow.
bool mul_ok(int64_t a, int64_t b, int64_t* out) {
    if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return false;
    *out = a * b;
    return true;
}

}  // namespace

Expected<Tensor> Tensor::contiguous_view(DType t, std::span<const int64_t> ne_in, void* data,
                                         std::string_view name) {
    const auto& info = dtype_info(t);
    if (ne_in.empty() || ne_in.size() > kMaxDims)
        return make_error("tensor '{}': {} dims (1 to {} supported)", name, ne_in.size(), kMaxDims);
    Tensor v;
    v.dtype = t;
    v.n_dims = static_cast<int>(ne_in.size());
    v.data = data;
    v.name = name;
    for (size_t i = 0; i < ne_in.size(); ++i) {
        if (ne_in[i] < 0) return make_error("tensor '{}': negative size {} in dim {}", name, ne_in[i], i);
        v.ne[i] = ne_in[i];
    }
    if (v.ne[0] % info.block_elems != 0)
        return make_error("tensor '{}': row of {} elements is not a multiple of the {} block size {}", name,
                          v.ne[0], info.name, info.block_elems);
    v.nb[0] = info.block_bytes;
    int64_t stride = 0;
    if (!mul_ok(v.ne[0] / info.block_elems, info.block_bytes, &stride))
        return make_error("tensor '{}': byte size overflows", name);
    for (int i = 1; i < kMaxDims; ++i) {
        v.nb[i] = stride;
        if (!mul_ok(stride, v.ne[i], &stride)) return make_error("tensor '{}': byte size overflows", name);
    }
    return v;
}

Expected<Tensor> Tensor::contiguous_view_torch(DType t, std::span<const int64_t> torch_shape, void* data,
                                               std::string_view name) {
    if (torch_shape.empty() || torch_shape.size() > kMaxDims)
        return make_error("tensor '{}': {} dims (1 to {} supported)", name, torch_shape.size(), kMaxDims);
    const auto ne = from_torch_shape(torch_shape);
    return contiguous_view(t, std::span<const int64_t>(ne.data(), torch_shape.size()), data, name);
}

int64_t Tensor::row_bytes() const {
    const auto& info = dtype_info(dtype);
    return ne[0] / info.block_elems * info.block_bytes;
}

int64_t Tensor::n_bytes() const {
    const auto& info = dtype_info(dtype);
    if (n_elements() == 0) return 0;
    int64_t last = (ne[0] / info.block_elems - 1) * nb[0] + info.block_bytes;
    for (int i = 1; i < kMaxDims; ++i) last += (ne[i] - 1) * nb[i];
    return last;
}

bool Tensor::is_contiguous() const {
    const auto& info = dtype_info(dtype);
    if (ne[0] / info.block_elems > 1 && nb[0] != info.block_bytes) return false;
    int64_t expected = row_bytes();
    for (int i = 1; i < kMaxDims; ++i) {
        if (ne[i] != 1 && nb[i] != expected) return false;
        expected *= ne[i];
    }
    return true;
}

Tensor Tensor::row(int64_t r) const {
    assert(r >= 0 && r < n_rows());
    const int64_t i1 = r % ne[1], i2 = (r / ne[1]) % ne[2], i3 = r / (ne[1] * ne[2]);
    Tensor v = *this;
    v.n_dims = 1;
    v.data = row_ptr(i1, i2, i3);
    v.ne = {ne[0], 1, 1, 1};
    const int64_t rb = row_bytes();
    v.nb = {nb[0], rb, rb, rb};
    return v;
}

Expected<Tensor> Tensor::slice(int dim, int64_t start, int64_t len) const {
    if (dim < 0 || dim >= std::max(n_dims, 1))
        return make_error("tensor '{}': slice dim {} out of range ({} dims)", name, dim, n_dims);
    if (start < 0 || len < 0 || start > ne[dim] || len > ne[dim] - start)
        return make_error("tensor '{}': slice [{}, {}+{}) outside dim {} of size {}", name, start, start, len,
                          dim, ne[dim]);
    const int64_t blk = dim == 0 ? dtype_info(dtype).block_elems : 1;
    if (start % blk != 0 || len % blk != 0)
        return make_error("tensor '{}': slice [{}, +{}) of dim 0 is not aligned to the {} block size {}",
                          name, start, len, dtype_name(dtype), blk);
    Tensor v = *this;
    v.data = static_cast<uint8_t*>(data) + start / blk * nb[dim];
    v.ne[dim] = len;
    return v;
}

Expected<Tensor> Tensor::reshape(std::span<const int64_t> new_ne) const {
    if (!is_contiguous()) return make_error("tensor '{}': reshape needs a contiguous view", name);
    int64_t count = 1;
    for (int64_t d : new_ne) {
        if (d < 0 || !mul_ok(count, d, &count))
            return make_error("tensor '{}': bad reshape size {}", name, d);
    }
    if (count != n_elements())
        return make_error("tensor '{}': reshape to {} elements, view has {}", name, count, n_elements());
    return contiguous_view(dtype, new_ne, data, name);
}

Expected<Tensor> Tensor::transpose(int a, int b) const {
    if (a < 0 || b < 0 || a >= kMaxDims || b >= kMaxDims)
        return make_error("tensor '{}': transpose dims {} and {} out of range", name, a, b);
    if (is_quantized() && (a == 0 || b == 0))
        return make_error("tensor '{}': cannot transpose dim 0 of block type {}", name, dtype_name(dtype));
    Tensor v = *this;
    std::swap(v.ne[a], v.ne[b]);
    std::swap(v.nb[a], v.nb[b]);
    v.n_dims = std::max({n_dims, a + 1, b + 1});
    return v;
}

std::array<int64_t, kMaxDims> Tensor::torch_shape() const {
    std::array<int64_t, kMaxDims> s{1, 1, 1, 1};
    for (int i = 0; i < n_dims; ++i) s[i] = ne[n_dims - 1 - i];
    return s;
}

std::string Tensor::describe() const {
    std::string dims;
    for (int i = 0; i < n_dims; ++i) dims += fmt::format("{}{}", i ? ", " : "", ne[i]);
    return fmt::format("{} {} [{}]", name.empty() ? "<unnamed>" : name, dtype_name(dtype), dims);
}

std::array<int64_t, kMaxDims> from_torch_shape(std::span<const int64_t> torch_shape) {
    std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};
    const size_t n = std::min<size_t>(torch_shape.size(), kMaxDims);
    for (size_t i = 0; i < n; ++i) ne[i] = torch_shape[n - 1 - i];
    return ne;
}

}  // namespace pelican
