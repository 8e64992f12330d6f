#include <array>

#include "formats/safetensors.h"

namespace pelican {
namespace {

// One row per safetensors dtype, in StDType order.
constexpr std::array<StDTypeInfo, 16> kStTypes = {{
    {StDType::BOOL, "BOOL", 1, std::nullopt},
    {StDType::U8, "U8", 1, std::nullopt},
    {StDType::I8, "I8", 1, DType::I8},
    {StDType::F8_E5M2, "F8_E5M2", 1, std::nullopt},
    {StDType::F8_E4M3, "F8_E4M3", 1, DType::F8_E4M3},
    {StDType::F8_E8M0, "F8_E8M0", 1, std::nullopt},
    {StDType::I16, "I16", 2, DType::I16},
    {StDType::U16, "U16", 2, std::nullopt},
    {StDType::F16, "F16", 2, DType::F16},
    {StDType::BF16, "BF16", 2, DType::BF16},
    {StDType::I32, "I32", 4, DType::I32},
    {StDType::U32, "U32", 4, std::nullopt},
    {StDType::F32, "F32", 4, DType::F32},
    {StDType::F64, "F64", 8, DType::F64},
    {StDType::I64, "I64", 8, DType::I64},
    {StDType::U64, "U64", 8, std::nullopt},
}};

}  // namespace

const StDTypeInfo& st_dtype_info(StDType t) {
    auto i = static_cast<size_t>(t);
    return i < kStTypes.size() ? kStTypes[i] : kStTypes[0];
}

std::optional<StDType> st_dtype_from_name(std::string_view name) {
    for (const auto& info : kStTypes)
        if (info.name == name) return info.type;
    return std::nullopt;
}

std::optional<StDType> st_dtype_from_dtype(DType t) {
    for (const auto& info : kStTypes)
        if (info.dt && *info.dt == t) return info.type;
    return std::nullopt;
}

uint64_t SafetensorsTensor::n_elements() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;  // cannot overflow: validated when the file was parsed
    return n;
}

}  // namespace pelican
