// cpu::Weight: validation and the optional repack into the 16-row interleaved layout.
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul_kernels.h"
#include "core/blocks.h"

namespace pelican::cpu {
namespace {

// Copies rows of 32-element blocks (Q4_0: 4 words of qs, Q8_0: 8) into the interleaved layout
// described in matmul_kernels.h; rows past n_out are zero (d = 0, qs = 0).
template <typename Block, int kWords>
void interleave16(const Tensor& w, uint8_t* dst, int64_t group_bytes) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1], nb = n_in / 32;
    const int64_t n_groups = (n_out + detail::kIlvRows - 1) / detail::kIlvRows;
    for (int64_t g = 0; g < n_groups; ++g) {
        uint8_t* gd = dst + g * group_bytes;
        std::memset(gd, 0, static_cast<size_t>(group_bytes));
        for (int rr = 0; rr < detail::kIlvRows; ++rr) {
            const int64_t r = g * detail::kIlvRows + rr;
            if (r >= n_out) break;
            const auto* row = static_cast<const Block*>(w.row_ptr(r));
            for (int64_t b = 0; b < nb; ++b) {
                std::memcpy(gd + detail::ilv_scale_offset(b, kWords) + 2 * rr, &row[b].d, 2);
                uint8_t* quants = gd + detail::ilv_quant_offset(b, kWords);
                const auto* qs = reinterpret_cast<const uint8_t*>(row[b].qs);
                for (int c = 0; c < kWords; ++c)
                    std::memcpy(quants + (c * detail::kIlvRows + rr) * 4, qs + 4 * c, 4);
            }
        }
    }
}

// Asks for transparent huge pages over the 2 MiB-aligned interior of [p, p + bytes) before it is
// first written: decode streams every weight byte once per token, and with 4 KiB pages every page
// costs a TLB walk and restarts the hardware prefetchers. Best effort (no error when refused).
void advise_huge_pages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    constexpr uintptr_t kHuge = uintptr_t{2} << 20;
    const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
    const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
    if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

}  // namespace

bool matmul_supported(DType t) {
    switch (t) {
        case DType::F32:
        case DType::F16:
        case DType::BF16:
        case DType::Q4_0:
        case DType::Q8_0:
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::Q6_K:
            return true;
        default:
            return false;
    }
}

Expected<Weight> Weight::prepare(const Tensor& w, bool allow_repack, bool own_copy) {
    if (!matmul_supported(w.dtype)) {
        return make_error("tensor '{}': the CPU matmul does not support weight type {}", w.name,
                          dtype_name(w.dtype));
    }
    const DTypeInfo& info = dtype_info(w.dtype);
    if (w.n_dims < 1 || w.n_dims > 2 || w.ne[2] != 1 || w.ne[3] != 1 || w.ne[0] <= 0 || w.ne[1] <= 0 ||
        w.ne[0] % info.block_elems != 0 || w.nb[0] != static_cast<int64_t>(info.block_bytes) ||
        w.nb[1] < w.row_bytes() || w.data == nullptr) {
        return make_error(
            "tensor '{}': a matmul weight must be a 2-D {} matrix with dense rows of whole blocks "
            "(ne = [{}, {}, {}, {}])",
            w.name, dtype_name(w.dtype), w.ne[0], w.ne[1], w.ne[2], w.ne[3]);
    }
    Weight out;
    out.type_ = w.dtype;
    out.n_in_ = w.ne[0];
    out.n_out_ = w.ne[1];
    out.row_stride_ = w.nb[1];
    out.data_ = w.data;
    const bool ilv_type = w.dtype == DType::Q4_0 || w.dtype == DType::Q8_0;
    if (allow_repack && ilv_type && active_isa() == Isa::kAvx512) {
        const int words = w.dtype == DType::Q4_0 ? 4 : 8;
        const int64_t nb = out.n_in_ / 32;
        const int64_t group_bytes = detail::ilv_group_bytes(nb, words);
        const int64_t n_groups = (out.n_out_ + detail::kIlvRows - 1) / detail::kIlvRows;
        auto buf = Buffer::allocate(static_cast<size_t>(group_bytes * n_groups));
        if (!buf)
            return make_error("tensor '{}': repacking for the CPU matmul: {}", w.name, buf.error().message);
        out.owned_ = std::move(buf).value();
        auto* dst = static_cast<uint8_t*>(out.owned_.data());
        advise_huge_pages(dst, out.owned_.size());
        if (words == 4) {
            interleave16<BlockQ4_0, 4>(w, dst, group_bytes);
        } else {
            interleave16<BlockQ8_0, 8>(w, dst, group_bytes);
        }
        out.layout_ = Layout::kInterleave16;
        out.data_ = dst;
        out.row_stride_ = group_bytes;  // bytes between 16-row groups
    } else if (own_copy) {
        const int64_t row_bytes = w.row_bytes();
        auto buf = Buffer::allocate(static_cast<size_t>(row_bytes * out.n_out_));
        if (!buf)
            return make_error("tensor '{}': copying for the CPU matmul: {}", w.name, buf.error().message);
        out.owned_ = std::move(buf).value();
        auto* dst = static_cast<uint8_t*>(out.owned_.data());
        advise_huge_pages(dst, out.owned_.size());
        for (int64_t r = 0; r < out.n_out_; ++r)
            std::memcpy(dst + r * row_bytes, w.row_ptr(r), static_cast<size_t>(row_bytes));
        out.data_ = dst;
        out.row_stride_ = row_bytes;
    }
    return out;
}

}  // namespace pelican::cpu
