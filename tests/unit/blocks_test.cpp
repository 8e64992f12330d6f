// Block structs agree with the dtype table and with the GGUF byte layout (field offsets).
#include "core/blocks.h"

#include <gtest/gtest.h>

#include <cstddef>

#include "core/dequantize.h"
#include "core/dtype.h"

namespace pelican {
namespace {

TEST(Blocks, SizesMatchDtypeTable) {
    struct Row {
        DType t;
        size_t size;
        int elems;
    };
    const Row rows[] = {
        {DType::Q4_0, sizeof(BlockQ4_0), 32},  {DType::Q4_1, sizeof(BlockQ4_1), 32},
        {DType::Q5_0, sizeof(BlockQ5_0), 32},  {DType::Q5_1, sizeof(BlockQ5_1), 32},
        {DType::Q8_0, sizeof(BlockQ8_0), 32},  {DType::Q8_1, sizeof(BlockQ8_1), 32},
        {DType::Q2_K, sizeof(BlockQ2_K), 256}, {DType::Q3_K, sizeof(BlockQ3_K), 256},
        {DType::Q4_K, sizeof(BlockQ4_K), 256}, {DType::Q5_K, sizeof(BlockQ5_K), 256},
        {DType::Q6_K, sizeof(BlockQ6_K), 256}, {DType::Q8_K, sizeof(BlockQ8_K), 256},
    };
    for (const auto& r : rows) {
        EXPECT_EQ(dtype_info(r.t).block_bytes, r.size) << dtype_name(r.t);
        EXPECT_EQ(dtype_info(r.t).block_elems, static_cast<uint32_t>(r.elems)) << dtype_name(r.t);
    }
}

TEST(Blocks, FieldOffsetsFollowGguf) {
    EXPECT_EQ(offsetof(BlockQ4_0, qs), 2u);
    EXPECT_EQ(offsetof(BlockQ4_1, m), 2u);
    EXPECT_EQ(offsetof(BlockQ4_1, qs), 4u);
    EXPECT_EQ(offsetof(BlockQ5_0, qh), 2u);
    EXPECT_EQ(offsetof(BlockQ5_0, qs), 6u);
    EXPECT_EQ(offsetof(BlockQ5_1, qh), 4u);
    EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
    EXPECT_EQ(offsetof(BlockQ8_0, qs), 2u);
    EXPECT_EQ(offsetof(BlockQ8_1, qs), 4u);
    EXPECT_EQ(offsetof(BlockQ2_K, qs), 16u);
    EXPECT_EQ(offsetof(BlockQ2_K, d), 80u);
    EXPECT_EQ(offsetof(BlockQ2_K, dmin), 82u);
    EXPECT_EQ(offsetof(BlockQ3_K, qs), 32u);
    EXPECT_EQ(offsetof(BlockQ3_K, scales), 96u);
    EXPECT_EQ(offsetof(BlockQ3_K, d), 108u);
    EXPECT_EQ(offsetof(BlockQ4_K, dmin), 2u);
    EXPECT_EQ(offsetof(BlockQ4_K, scales), 4u);
    EXPECT_EQ(offsetof(BlockQ4_K, qs), 16u);
    EXPECT_EQ(offsetof(BlockQ5_K, qh), 16u);
    EXPECT_EQ(offsetof(BlockQ5_K, qs), 48u);
    EXPECT_EQ(offsetof(BlockQ6_K, qh), 128u);
    EXPECT_EQ(offsetof(BlockQ6_K, scales), 192u);
    EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);
    EXPECT_EQ(offsetof(BlockQ8_K, qs), 4u);
    EXPECT_EQ(offsetof(BlockQ8_K, bsums), 260u);
}

TEST(Blocks, EveryTypeHasToFloat) {
    const DType all[] = {DType::F32,  DType::F16,  DType::Q4_0,   DType::Q4_1, DType::Q5_0, DType::Q5_1,
                         DType::Q8_0, DType::Q8_1, DType::Q2_K,   DType::Q3_K, DType::Q4_K, DType::Q5_K,
                         DType::Q6_K, DType::Q8_K, DType::I8,     DType::I16,  DType::I32,  DType::I64,
                         DType::F64,  DType::BF16, DType::F8_E4M3};
    for (DType t : all) {
        EXPECT_NE(dtype_info(t).to_float, nullptr) << dtype_name(t);
        EXPECT_EQ(dtype_info(t).type, t) << dtype_name(t);
    }
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::Q4_0, DType::Q4_1,
                    DType::Q8_0, DType::Q8_1, DType::Q4_K, DType::Q6_K, DType::Q8_K})
        EXPECT_TRUE(can_quantize(t)) << dtype_name(t);
    EXPECT_FALSE(can_quantize(DType::Q3_K));
}

}  // namespace
}  // namespace pelican
