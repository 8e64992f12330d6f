#include "core/dtype.h"

#include <array>
#include <cctype>

namespace pelican {
namespace {

// The one table. Block sizes are checked against the block structs in core/blocks.h.
constexpr std::array<DTypeInfo, 21> kTypes = {{
    {DType::F32, "f32", 1, 4, true},
    {DType::F16, "f16", 1, 2, true},
    {DType::Q4_0, "q4_0", 32, 18, true},
    {DType::Q4_1, "q4_1", 32, 20, true},
    {DType::Q5_0, "q5_0", 32, 22, true},
    {DType::Q5_1, "q5_1", 32, 24, true},
    {DType::Q8_0, "q8_0", 32, 34, true},
    {DType::Q8_1, "q8_1", 32, 36, true},
    {DType::Q2_K, "q2_k", 256, 84, true},
    {DType::Q3_K, "q3_k", 256, 110, true},
    {DType::Q4_K, "q4_k", 256, 144, true},
    {DType::Q5_K, "q5_k", 256, 176, true},
    {DType::Q6_K, "q6_k", 256, 210, true},
    {DType::Q8_K, "q8_k", 256, 292, true},
    {DType::I8, "i8", 1, 1, true},
    {DType::I16, "i16", 1, 2, true},
    {DType::I32, "i32", 1, 4, true},
    {DType::I64, "i64", 1, 8, true},
    {DType::F64, "f64", 1, 8, true},
    {DType::BF16, "bf16", 1, 2, true},
    {DType::F8_E4M3, "f8_e4m3", 1, 1, false},
}};

}  // namespace

const DTypeInfo& dtype_info(DType t) {
    for (const auto& info : kTypes)
        if (info.type == t) return info;
    return kTypes[0];  // unreachable for valid enum values
}

std::optional<DType> dtype_from_ggml(uint32_t id) {
    for (const auto& info : kTypes)
        if (info.in_gguf && static_cast<uint32_t>(info.type) == id) return info.type;
    return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (const auto& info : kTypes) {
        if (info.name.size() != name.size()) continue;
        bool eq = true;
        for (size_t i = 0; i < name.size() && eq; ++i)
            eq = std::tolower(static_cast<unsigned char>(name[i])) == info.name[i];
        if (eq) return info.type;
    }
    return std::nullopt;
}

std::optional<uint64_t> dtype_row_bytes(DType t, uint64_t n_elems) {
    const auto& info = dtype_info(t);
    if (n_elems % info.block_elems != 0) return std::nullopt;
    uint64_t blocks = n_elems / info.block_elems;
    if (blocks > UINT64_MAX / info.block_bytes) return std::nullopt;
    return blocks * info.block_bytes;
}

}  // namespace pelican
