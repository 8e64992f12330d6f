#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace pelican {
namespace {

TEST(Tensor, ContiguousF32) {
    std::vector<float> data(2 * 3 * 4);
    auto t = Tensor::contiguous_view(DType::F32, {4, 3, 2}, data.data(), "x");
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->n_dims, 3);
    EXPECT_EQ(t->n_elements(), 24);
    EXPECT_EQ(t->n_rows(), 6);
    EXPECT_EQ(t->row_bytes(), 16);
    EXPECT_EQ(t->n_bytes(), 96);
    EXPECT_EQ(t->nb[0], 4);
    EXPECT_EQ(t->nb[1], 16);
    EXPECT_EQ(t->nb[2], 48);
    EXPECT_EQ(t->nb[3], 96);
    EXPECT_TRUE(t->is_contiguous());
    EXPECT_FALSE(t->is_quantized());
    // element (i0=1, i1=2, i2=1) is flat index 1 + 4*2 + 12*1
    EXPECT_EQ(t->elem_ptr(1, 2, 1), &data[21]);
    const Tensor r = t->row(5);  // i1 = 2, i2 = 1
    EXPECT_EQ(r.n_dims, 1);
    EXPECT_EQ(r.data, &data[20]);
    EXPECT_EQ(r.ne[0], 4);
    EXPECT_EQ(r.n_bytes(), 16);
    EXPECT_TRUE(r.is_contiguous());
    EXPECT_EQ(t->describe(), "x f32 [4, 3, 2]");
}

TEST(Tensor, QuantizedRows) {
    std::vector<uint8_t> data(144 * 2 * 3);
    auto t = Tensor::contiguous_view(DType::Q4_K, {512, 3}, data.data(), "w");
    ASSERT_TRUE(t.ok());
    EXPECT_TRUE(t->is_quantized());
    EXPECT_EQ(t->nb[0], 144);
    EXPECT_EQ(t->row_bytes(), 288);
    EXPECT_EQ(t->n_bytes(), 864);
    EXPECT_EQ(t->row_ptr(2), data.data() + 576);
    EXPECT_FALSE(Tensor::contiguous_view(DType::Q4_K, {100, 3}, data.data()).ok());  // not whole blocks
    auto s = t->slice(0, 256, 256);  // second block of every row
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->data, data.data() + 144);
    EXPECT_FALSE(s->is_contiguous());
    EXPECT_EQ(s->n_bytes(), 288 * 2 + 144);
    EXPECT_FALSE(t->slice(0, 100, 256).ok());
    EXPECT_FALSE(t->transpose(0, 1).ok());
}

TEST(Tensor, TorchOrder) {
    std::vector<uint16_t> data(6 * 8);
    const int64_t shape[] = {6, 8};  // torch [out=6, in=8]
    auto t = Tensor::contiguous_view_torch(DType::F16, shape, data.data(), "w");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->ne[0], 8);
    EXPECT_EQ(t->ne[1], 6);
    EXPECT_EQ(t->torch_shape()[0], 6);
    EXPECT_EQ(t->torch_shape()[1], 8);
    const int64_t s3[] = {2, 3, 5};
    const auto ne = from_torch_shape(s3);
    EXPECT_EQ(ne[0], 5);
    EXPECT_EQ(ne[1], 3);
    EXPECT_EQ(ne[2], 2);
    EXPECT_EQ(ne[3], 1);
}

TEST(Tensor, SliceReshapeTranspose) {
    std::vector<float> data(4 * 6);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
    auto t = Tensor::contiguous_view(DType::F32, {4, 6}, data.data());
    ASSERT_TRUE(t.ok());
    auto rows = t->slice(1, 2, 3);  // rows 2..4: still contiguous
    ASSERT_TRUE(rows.ok());
    EXPECT_TRUE(rows->is_contiguous());
    EXPECT_EQ(*static_cast<float*>(rows->row_ptr(0)), 8.0f);
    EXPECT_EQ(rows->n_rows(), 3);
    auto cols = t->slice(0, 1, 2);  // columns 1..2: strided
    ASSERT_TRUE(cols.ok());
    EXPECT_FALSE(cols->is_contiguous());
    EXPECT_EQ(*static_cast<float*>(cols->elem_ptr(1, 5)), 22.0f);
    EXPECT_FALSE(cols->reshape({12}).ok());
    EXPECT_FALSE(t->slice(1, 4, 3).ok());   // past the end
    EXPECT_FALSE(t->slice(1, -1, 2).ok());  // negative
    EXPECT_FALSE(t->slice(2, 0, 1).ok());   // dim not present
    EXPECT_TRUE(t->slice(1, 6, 0).ok());    // empty slice at the end
    auto r = t->reshape({2, 3, 4});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->n_dims, 3);
    EXPECT_EQ(*static_cast<float*>(r->elem_ptr(1, 2, 3)), 1 + 2 * 2 + 6 * 3.0f);
    EXPECT_FALSE(t->reshape({5, 5}).ok());
    auto tr = t->transpose(0, 1);
    ASSERT_TRUE(tr.ok());
    EXPECT_EQ(tr->ne[0], 6);
    EXPECT_EQ(tr->ne[1], 4);
    EXPECT_FALSE(tr->is_contiguous());
    EXPECT_EQ(*static_cast<float*>(tr->elem_ptr(5, 1)), 21.0f);  // original (i0=1, i1=5): 1 + 4 * 5
    EXPECT_EQ(t->with_name("abc").name, "abc");
}

TEST(Tensor, RejectsBadShapes) {
    float x = 0;
    EXPECT_FALSE(Tensor::contiguous_view(DType::F32, {}, &x).ok());
    EXPECT_FALSE(Tensor::contiguous_view(DType::F32, {1, 1, 1, 1, 1}, &x).ok());
    EXPECT_FALSE(Tensor::contiguous_view(DType::F32, {-1}, &x).ok());
    auto e = Tensor::contiguous_view(DType::F32, {int64_t{1} << 40, int64_t{1} << 40}, &x, "huge");
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("huge"), std::string::npos);
    auto zero = Tensor::contiguous_view(DType::F32, {0, 5}, &x);
    ASSERT_TRUE(zero.ok());
    EXPECT_EQ(zero->n_bytes(), 0);
}

}  // namespace
}  // namespace pelican
