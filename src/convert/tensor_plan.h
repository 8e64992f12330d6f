// What `pelican convert` writes: one PlannedTensor per output tensor (GGUF name, shape, output
// type, where its rows come from) and the rule that picks each tensor's output type.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "formats/gguf.h"

namespace pelican {

// Produces source row `row` as fp32: dst holds dims[0] floats (1 float for a permuted 1-D tensor,
// see PlannedTensor::permute_heads). Called concurrently from worker threads.
using RowGenerator = std::function<void(int64_t row, float* dst)>;

struct PlannedTensor {
    std::string name;            // GGUF name, "blk.0.attn_q.weight"
    std::vector<uint64_t> dims;  // GGUF order: dims[0] is the row length (torch [out, in] -> {in, out})
    DType type = DType::F32;     // output type

    // Source: stored rows (contiguous, row-major, src_type, same dims as the output; the mapping
    // must outlive the write) or, when src is null, a generator.
    const uint8_t* src = nullptr;
    DType src_type = DType::F32;
    RowGenerator generate;

    // > 0: reorder rows from HF's NeoX rope layout to GGUF's interleaved one with this many heads
    // (model/rope_permute.h); output row r takes source row rope_permute_src_row(r). A 1-D tensor
    // (a q/k bias) is permuted element by element.
    int64_t permute_heads = 0;

    uint64_t n_elements() const;
};

// Checks a planned tensor: shape, source type readable, permutation head count divides the rows
// into even-sized heads. Errors name the tensor.
Status validate_planned(const PlannedTensor& t);

// Output types `pelican convert --type` accepts.
std::span<const DType> convert_types();
// Parses a --type value; the error lists the accepted names.
Expected<DType> parse_convert_type(std::string_view name);

// llama.cpp's general.file_type (enum llama_ftype) for a requested type: f32 0, f16 1, q4_0 2,
// q8_0 7, q4_k 14 (Q4_K_S: q4_k everywhere, q6_k output), q6_k 18, bf16 32.
uint32_t gguf_file_type(DType requested);

// The output type of one tensor for a requested type. Rule (like llama.cpp's):
//  - 1-D tensors (norms, biases, rope_freqs) stay F32;
//  - the output projection (output.weight, or token_embd.weight when the embeddings are tied and
//    it doubles as the output) is Q6_K when a 4-bit type (q4_0, q4_k) is requested, because the
//    logits are most sensitive to it; every other matrix gets the requested type;
//  - a row length (dims[0]) that is not a whole number of blocks falls back: Q4_K/Q6_K -> Q8_0,
//    then Q4_0/Q8_0 -> F16. `note` then says so (the caller prints it).
struct TypeChoice {
    DType type;
    std::string note;  // non-empty when a fallback was taken
};
TypeChoice choose_tensor_type(std::string_view name, std::span<const uint64_t> dims, DType requested,
                              bool tied_embeddings);

}  // namespace pelican
