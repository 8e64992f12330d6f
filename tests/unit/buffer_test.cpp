#include "core/buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

namespace pelican {
namespace {

TEST(Buffer, AllocatesAligned) {
    auto small = Buffer::allocate(100);
    ASSERT_TRUE(small.ok());
    EXPECT_EQ(small->size(), 100u);
    EXPECT_EQ(small->alignment(), kBufferAlign);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small->data()) % kBufferAlign, 0u);
    auto big = Buffer::allocate(kBufferPageAlignFrom + 3);
    ASSERT_TRUE(big.ok());
    EXPECT_EQ(big->alignment(), kBufferPageAlign);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big->data()) % kBufferPageAlign, 0u);
    big->bytes()[kBufferPageAlignFrom + 2] = 7;  // last byte is writable
    auto empty = Buffer::allocate(0);
    ASSERT_TRUE(empty.ok());
    EXPECT_TRUE(empty->empty());
}

TEST(Buffer, Zeroed) {
    auto b = Buffer::allocate_zeroed(4096);
    ASSERT_TRUE(b.ok());
    for (uint8_t v : b->bytes()) ASSERT_EQ(v, 0);
}

TEST(Buffer, HugeAllocationFailsCleanly) {
    auto b = Buffer::allocate(SIZE_MAX - 10);
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.error().message.find("bytes"), std::string::npos);
    auto c = Buffer::allocate(size_t{1} << 62);  // more than any machine has
    EXPECT_FALSE(c.ok());
}

TEST(Buffer, MoveOnly) {
    static_assert(!std::is_copy_constructible_v<Buffer>);
    static_assert(!std::is_copy_assignable_v<Buffer>);
    auto a = Buffer::allocate(64);
    ASSERT_TRUE(a.ok());
    void* p = a->data();
    Buffer b = std::move(*a);
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(b.size(), 64u);
    EXPECT_EQ(a->data(), nullptr);
    EXPECT_EQ(a->size(), 0u);
    Buffer c;
    c = std::move(b);
    EXPECT_EQ(c.data(), p);
    EXPECT_EQ(b.data(), nullptr);
    c = Buffer();  // releases
    EXPECT_EQ(c.data(), nullptr);
}

TEST(Buffer, Views) {
    auto b = Buffer::allocate(1024);
    ASSERT_TRUE(b.ok());
    auto t = b->view(DType::F32, {16, 16}, "act");
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ(t->data, b->data());
    EXPECT_EQ(t->n_bytes(), 1024);
    EXPECT_EQ(t->name, "act");
    auto off = b->view(DType::F16, {256}, "half", 512);
    ASSERT_TRUE(off.ok());
    EXPECT_EQ(off->data, static_cast<uint8_t*>(b->data()) + 512);
    EXPECT_FALSE(b->view(DType::F32, {16, 17}).ok());         // 1088 bytes > 1024
    EXPECT_FALSE(b->view(DType::F16, {257}, "x", 512).ok());  // one element past the end
    EXPECT_FALSE(b->view(DType::F32, {1}, "x", 2000).ok());   // offset past the end
    auto q = b->view(DType::Q8_0, {32, 30});                  // 30 blocks of 34 bytes = 1020
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->n_bytes(), 1020);
    auto e = b->view(DType::Q8_0, {32, 31}, "q8");
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("q8"), std::string::npos);
}

}  // namespace
}  // namespace pelican
