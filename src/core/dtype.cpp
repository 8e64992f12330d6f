#include "core/dtype.h"

#include "core/blocks.h"
#include "core/dequantize.h"

#include <array>
#include <cctype>

namespace pelican {
namespace {

// The one table. Block sizes are checked against the block structs in core/blocks.h
// (tests/unit/blocks_test.cpp); to_float / from_float are the scalar references (core/dequantize.h).
constexpr std::array<DTypeInfo, 21> kTypes = {{
    {DType::F32, "f32", 1, 4, true, ref::dequantize_f32, ref::quantize_f32},
    {DType::F16, "f16", 1, 2, true, ref::dequantize_f16, ref::quantize_f16},
    {DType::Q4_0, "q4_0", 32, 18, true, ref::dequantize_q4_0, ref::quantize_q4_0},
    {DType::Q4_1, "q4_1", 32, 20, true, ref::dequantize_q4_1, ref::quantize_q4_1},
    {DType::Q5_0, "q5_0", 32, 22, true, ref::dequantize_q5_0, nullptr},
    {DType::Q5_1, "q5_1", 32, 24, true, ref::dequantize_q5_1, nullptr},
    {DType::Q8_0, "q8_0", 32, 34, true, ref::dequantize_q8_0, ref::quantize_q8_0},
    {DType::Q8_1, "q8_1", 32, 36, true, ref::dequantize_q8_1, ref::quantize_q8_1},
    {DType::Q2_K, "q2_k", 256, 84, true, ref::dequantize_q2_k, nullptr},
    {DType::Q3_K, "q3_k", 256, 110, true, ref::dequantize_q3_k, nullptr},
    {DType::Q4_K, "q4_k", 256, 144, true, ref::dequantize_q4_k, ref::quantize_q4_k},
    {DType::Q5_K, "q5_k", 256, 176, true, ref::dequantize_q5_k, nullptr},
    {DType::Q6_K, "q6_k", 256, 210, true, ref::dequantize_q6_k, ref::quantize_q6_k},
    {DType::Q8_K, "q8_k", 256, 292, true, ref::dequantize_q8_k, ref::quantize_q8_k},
    {DType::I8, "i8", 1, 1, true, ref::dequantize_i8, nullptr},
    {DType::I16, "i16", 1, 2, true, ref::dequantize_i16, nullptr},
    {DType::I32, "i32", 1, 4, true, ref::dequantize_i32, nullptr},
    {DType::I64, "i64", 1, 8, true, ref::dequantize_i64, nullptr},
    {DType::F64, "f64", 1, 8, true, ref::dequantize_f64, nullptr},
    {DType::BF16, "bf16", 1, 2, true, ref::dequantize_bf16, ref::quantize_bf16},
    {DType::F8_E4M3, "f8_e4m3", 1, 1, false, ref::dequantize_f8_e4m3, ref::quantize_f8_e4m3},
}};

constexpr uint32_t table_block_bytes(DType t) {
    for (const auto& info : kTypes)
        if (info.type == t) return info.block_bytes;
    return 0;
}
static_assert(table_block_bytes(DType::Q4_0) == sizeof(BlockQ4_0));
static_assert(table_block_bytes(DType::Q4_1) == sizeof(BlockQ4_1));
static_assert(table_block_bytes(DType::Q5_0) == sizeof(BlockQ5_0));
static_assert(table_block_bytes(DType::Q5_1) == sizeof(BlockQ5_1));
static_assert(table_block_bytes(DType::Q8_0) == sizeof(BlockQ8_0));
static_assert(table_block_bytes(DType::Q8_1) == sizeof(BlockQ8_1));
static_assert(table_block_bytes(DType::Q2_K) == sizeof(BlockQ2_K));
static_assert(table_block_bytes(DType::Q3_K) == sizeof(BlockQ3_K));
static_assert(table_block_bytes(DType::Q4_K) == sizeof(BlockQ4_K));
static_assert(table_block_bytes(DType::Q5_K) == sizeof(BlockQ5_K));
static_assert(table_block_bytes(DType::Q6_K) == sizeof(BlockQ6_K));
static_assert(table_block_bytes(DType::Q8_K) == sizeof(BlockQ8_K));

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
