// Tensor: a non-owning view of (possibly block-quantized) data: dtype, up to 4 dims, byte strides,
// data pointer and a debugging name. Owners are separate types (core/buffer.h).
//
// Dimension order is GGUF/ggml order: ne[0] varies FASTEST. A PyTorch tensor of shape
// [out, in] (row-major) is ne = {in, out}: ne[0] is the row length, ne[1] the number of rows.
// Use from_torch_shape() / torch_shape() to convert. Unused trailing dims have ne = 1.
//
// Strides nb[] are in BYTES. For a block-quantized dtype, nb[0] is the bytes of one block and
// ne[0] must be a multiple of the block size (rows are whole blocks); element-level addressing
// along dim 0 is only possible at block granularity. For plain types nb[0] is the element size.
//
// The name is a std::string_view: it must outlive the view (string literals, model-owned names).
#pragma once

#include <array>
#include <cassert>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"

namespace pelican {

inline constexpr int kMaxDims = 4;

struct Tensor {
    DType dtype = DType::F32;
    int n_dims = 0;                                // 1..4 for a valid tensor (0 = empty default view)
    std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};  // elements per dim, ne[0] fastest
    std::array<int64_t, kMaxDims> nb{};            // byte strides
    void* data = nullptr;
    std::string_view name;

    // A contiguous view of data with shape ne (GGUF order). Errors: no dims or more than 4,
    // negative sizes, ne[0] not a multiple of the block size, or a byte size that overflows.
    static Expected<Tensor> contiguous_view(DType t, std::span<const int64_t> ne, void* data,
                                            std::string_view name = {});
    static Expected<Tensor> contiguous_view(DType t, std::initializer_list<int64_t> ne, void* data,
                                            std::string_view name = {}) {
        return contiguous_view(t, std::span<const int64_t>(ne.begin(), ne.size()), data, name);
    }

    // Same, with the shape given in PyTorch order (slowest first): {out, in} -> ne = {in, out}.
    static Expected<Tensor> contiguous_view_torch(DType t, std::span<const int64_t> torch_shape, void* data,
                                                  std::string_view name = {});

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }  // rows of ne[0] elements
    int64_t row_bytes() const;                                // bytes of one dense row of ne[0]
    // Bytes covered by the data when contiguous (n_rows * row_bytes); for strided views, the
    // span from data to one past the last byte addressed.
    int64_t n_bytes() const;
    bool is_contiguous() const;
    bool is_quantized() const { return dtype_info(dtype).block_elems > 1; }

    template <typename T>
    T* data_as() const {
        return static_cast<T*>(data);
    }

    // Pointer to row (i1, i2, i3): its ne[0] elements are dense when nb[0] is the block size.
    void* row_ptr(int64_t i1, int64_t i2 = 0, int64_t i3 = 0) const {
        assert(i1 >= 0 && i1 < ne[1] && i2 >= 0 && i2 < ne[2] && i3 >= 0 && i3 < ne[3]);
        return static_cast<uint8_t*>(data) + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
    }
    // Flat row index r in [0, n_rows()) over dims 1..3 -> 1-D view of that row.
    Tensor row(int64_t r) const;
    // Pointer to element (i0, i1, i2, i3); plain (non-block) dtypes only.
    void* elem_ptr(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
        assert(!is_quantized() && i0 >= 0 && i0 < ne[0]);
        return static_cast<uint8_t*>(row_ptr(i1, i2, i3)) + i0 * nb[0];
    }

    // Narrows dim to [start, start + len). Along dim 0 of a quantized type, start and len must
    // be multiples of the block size. The result shares data.
    Expected<Tensor> slice(int dim, int64_t start, int64_t len) const;
    // Same data, new shape (GGUF order); the view must be contiguous and keep n_elements.
    Expected<Tensor> reshape(std::span<const int64_t> new_ne) const;
    Expected<Tensor> reshape(std::initializer_list<int64_t> new_ne) const {
        return reshape(std::span<const int64_t>(new_ne.begin(), new_ne.size()));
    }
    // Swaps dims a and b (shape and strides); plain dtypes only when dim 0 is involved.
    Expected<Tensor> transpose(int a, int b) const;
    Tensor with_name(std::string_view n) const {
        Tensor t = *this;
        t.name = n;
        return t;
    }

    // Shape in PyTorch order (slowest first), n_dims entries used.
    std::array<int64_t, kMaxDims> torch_shape() const;
    // "name q4_k [4096, 11008]" in GGUF order, for logs and errors.
    std::string describe() const;
};

// Reverses a PyTorch-order shape (<= 4 dims) into GGUF order, {out, in} -> {in, out, 1, 1}.
std::array<int64_t, kMaxDims> from_torch_shape(std::span<const int64_t> torch_shape);

}  // namespace pelican
