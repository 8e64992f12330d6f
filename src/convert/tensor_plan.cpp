// Output type rule and validation of planned tensors (see tensor_plan.h).
#include "convert/tensor_plan.h"

#include <array>

#include <fmt/format.h>

namespace pelican {

uint64_t PlannedTensor::n_elements() const {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    return n;
}

Status validate_planned(const PlannedTensor& t) {
    if (t.dims.empty() || t.dims.size() > 4)
        return make_error("tensor {}: {} dims (1 to 4 supported)", t.name, t.dims.size());
    for (uint64_t d : t.dims)
        if (d == 0) return make_error("tensor {}: empty dimension", t.name);
    if (!dtype_row_bytes(t.type, t.dims[0]))
        return make_error("tensor {}: row length {} is not a multiple of the {} block size", t.name,
                          t.dims[0], dtype_name(t.type));
    if (t.src && !dtype_row_bytes(t.src_type, t.dims[0]))
        return make_error("tensor {}: row length {} is not a whole number of {} blocks", t.name, t.dims[0],
                          dtype_name(t.src_type));
    if (!t.src && !t.generate) return make_error("tensor {}: no data source", t.name);
    if (t.permute_heads > 0) {
        const uint64_t rows = t.dims.size() == 1 ? t.dims[0] : t.n_elements() / t.dims[0];
        const uint64_t heads = static_cast<uint64_t>(t.permute_heads);
        if (rows % heads != 0 || (rows / heads) % 2 != 0)
            return make_error(
                "tensor {}: {} rows do not split into {} heads of an even size (rope permutation)", t.name,
                rows, heads);
    }
    return {};
}

namespace {
constexpr std::array kConvertTypes = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                      DType::Q4_0, DType::Q4_K, DType::Q6_K};

std::string type_list() {
    std::string s;
    for (DType t : kConvertTypes) {
        if (!s.empty()) s += ", ";
        s += dtype_name(t);
    }
    return s;
}

uint32_t block_of(DType t) { return dtype_info(t).block_elems; }
}  // namespace

std::span<const DType> convert_types() { return kConvertTypes; }

Expected<DType> parse_convert_type(std::string_view name) {
    const auto t = dtype_from_name(name);
    if (t)
        for (DType ok : kConvertTypes)
            if (*t == ok) return *t;
    return make_error("unsupported output type \"{}\" (expected one of: {})", name, type_list());
}

uint32_t gguf_file_type(DType requested) {
    switch (requested) {
        case DType::F32:
            return 0;
        case DType::F16:
            return 1;
        case DType::Q4_0:
            return 2;
        case DType::Q8_0:
            return 7;
        case DType::Q4_K:
            return 14;
        case DType::Q6_K:
            return 18;
        case DType::BF16:
            return 32;
        default:
            return 0;
    }
}

TypeChoice choose_tensor_type(std::string_view name, std::span<const uint64_t> dims, DType requested,
                              bool tied_embeddings) {
    if (dims.size() < 2) return {DType::F32, {}};
    // As llama.cpp's converter: routers and the DeltaNet's conv kernel stay F32 (its CPU ssm_conv
    // op takes only F32 weights).
    if (name.ends_with(".ffn_gate_inp.weight") || name.ends_with(".ffn_gate_inp_shexp.weight") ||
        name.ends_with(".ssm_conv1d.weight"))
        return {DType::F32, {}};
    DType want = requested;
    const bool is_output = name == "output.weight" || (tied_embeddings && name == "token_embd.weight");
    if (is_output && (requested == DType::Q4_0 || requested == DType::Q4_K)) want = DType::Q6_K;

    DType t = want;
    while (dims[0] % block_of(t) != 0) {
        if (t == DType::Q4_K || t == DType::Q6_K)
            t = DType::Q8_0;
        else
            t = DType::F16;
    }
    TypeChoice c{t, {}};
    if (t != want)
        c.note = fmt::format("{}: row length {} is not a multiple of the {}-element {} block; writing {}",
                             name, dims[0], block_of(want), dtype_name(want), dtype_name(t));
    return c;
}

}  // namespace pelican
