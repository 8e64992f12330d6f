// q/k row permutation HF (NeoX rope) <-> GGUF llama (interleaved rope); see rope_permute.h.
#include "model/rope_permute.h"

#include <cstring>

namespace pelican {
namespace {

Status check(std::span<const uint8_t> src, std::span<uint8_t> dst, int64_t n_rows, int64_t row_bytes,
             int64_t n_head) {
    if (n_rows <= 0 || row_bytes <= 0 || n_head <= 0)
        return make_error("rope permute: bad sizes (rows {}, row bytes {}, heads {})", n_rows, row_bytes,
                          n_head);
    if (n_rows % n_head != 0)
        return make_error("rope permute: {} rows are not a multiple of {} heads", n_rows, n_head);
    if ((n_rows / n_head) % 2 != 0)
        return make_error("rope permute: head_dim {} is odd (rows {}, heads {})", n_rows / n_head, n_rows,
                          n_head);
    const auto bytes = static_cast<uint64_t>(n_rows) * static_cast<uint64_t>(row_bytes);
    if (src.size() != bytes || dst.size() != bytes)
        return make_error("rope permute: expected {} bytes ({} rows of {}), got src {} / dst {}", bytes,
                          n_rows, row_bytes, src.size(), dst.size());
    const uint8_t* s = src.data();
    const uint8_t* d = dst.data();
    if (s < d + bytes && d < s + bytes) return make_error("rope permute: src and dst overlap");
    return {};
}

Status permute(std::span<const uint8_t> src, std::span<uint8_t> dst, int64_t n_rows, int64_t row_bytes,
               int64_t n_head, bool forward) {
    PELICAN_TRY(check(src, dst, n_rows, row_bytes, n_head));
    const int64_t head_dim = n_rows / n_head;
    for (int64_t r = 0; r < n_rows; ++r) {
        const int64_t h = r / head_dim;
        const int64_t other = h * head_dim + rope_permute_src_row(r % head_dim, head_dim);
        // forward: dst (GGUF) row r <- src (HF) row other; inverse: dst (HF) row other <- src row r.
        const int64_t from = forward ? other : r;
        const int64_t to = forward ? r : other;
        std::memcpy(dst.data() + to * row_bytes, src.data() + from * row_bytes,
                    static_cast<size_t>(row_bytes));
    }
    return {};
}

}  // namespace

int64_t rope_permute_src_row(int64_t gguf_row, int64_t head_dim) {
    const int64_t half = head_dim / 2;
    const int64_t i = gguf_row / 2;  // pair index
    const int64_t j = gguf_row % 2;  // member of the pair
    return j * half + i;
}

Status rope_permute_rows(std::span<const uint8_t> src, std::span<uint8_t> dst, int64_t n_rows,
                         int64_t row_bytes, int64_t n_head) {
    return permute(src, dst, n_rows, row_bytes, n_head, true);
}

Status rope_unpermute_rows(std::span<const uint8_t> src, std::span<uint8_t> dst, int64_t n_rows,
                           int64_t row_bytes, int64_t n_head) {
    return permute(src, dst, n_rows, row_bytes, n_head, false);
}

}  // namespace pelican
