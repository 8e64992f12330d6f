// Element and block types: one table, one row per type (see dtype.cpp).
// Enum values equal GGUF's ggml_type ids where GGUF has the type; F8_E4M3 and I8 use
// pelican-private ids (GGUF files never carry them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pelican {

enum class DType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
    F8_E4M3 = 1000,  // pelican-only (safetensors F8_E4M3)
};

// Scalar reference row conversions (core/dequantize.h); n is a multiple of block_elems.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);

struct DTypeInfo {
    DType type;
    std::string_view name;             // lower-case, as printed and parsed: "f32", "q4_k"
    uint32_t block_elems;              // elements per block (1 for plain element types)
    uint32_t block_bytes;              // bytes per block
    bool in_gguf;                      // has a ggml_type id
    ToFloatFn to_float = nullptr;      // every type has one
    FromFloatFn from_float = nullptr;  // reference quantizer; nullptr where pelican has none
};

// Info for a known type.
const DTypeInfo& dtype_info(DType t);
// Maps a GGUF ggml_type id; nullopt for ids pelican does not know.
std::optional<DType> dtype_from_ggml(uint32_t id);
// Parses a name as printed by dtype_info().name ("q4_0", "bf16"); case-insensitive.
std::optional<DType> dtype_from_name(std::string_view name);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }

// Bytes for n elements; nullopt when n is not a multiple of the block size or overflows.
std::optional<uint64_t> dtype_row_bytes(DType t, uint64_t n_elems);

}  // namespace pelican
