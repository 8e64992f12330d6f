// The GPU weight matrices (backend/cuda/gpu_matrix.h): upload_matrix of stacked parts, then
// dequantize_matrix to F32 / F16 / BF16 over rows across a part boundary, bit for bit against
// core/dequantize (then the output type's rounding), for every GPU weight type, random and
// reference-quantized blocks; upload_matrix's refusals of bad input. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_matrix.h"
#include "core/dequantize.h"
#include "core/float_convert.h"
#include "cuda_test_buffers.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::from_device;
using test::Rng;

#define SKIP_WITHOUT_GPU()                \
    if (!cuda::gpu_available()) {         \
        GTEST_SKIP() << "no CUDA device"; \
    }                                     \
    static_assert(true, "")

// Every weight type the GPU matmul takes (gpu_matmul_supported).
const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                        DType::Q4_0, DType::Q4_K, DType::Q6_K};

bool quantized(DType t) { return dtype_info(t).block_elems > 1; }

TEST(CudaGpuMatrix, DequantizeMatchesReference) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : kTypes)
        for (int64_t n_in : {int64_t{256}, int64_t{1024}, int64_t{100}}) {
            if (quantized(t) && n_in == 100) continue;
            for (bool random_blocks : {false, true}) {
                if (random_blocks && !quantized(t)) continue;
                SCOPED_TRACE(testing::Message()
                             << dtype_name(t) << " n_in=" << n_in << (random_blocks ? " random" : ""));
                const auto rb = static_cast<int64_t>(*dtype_row_bytes(t, static_cast<uint64_t>(n_in)));
                test::RandomMatrix a = test::random_matrix(rng, t, n_in, 20, !random_blocks);
                test::RandomMatrix b = test::random_matrix(rng, t, n_in, 13, !random_blocks);
                cuda::HostRows hr[2] = {{a.bytes.data(), static_cast<size_t>(rb), 20},
                                        {b.bytes.data(), static_cast<size_t>(rb), 13}};
                cuda::GpuMatrix gm;
                const char* err = nullptr;
                ASSERT_TRUE(cuda::upload_matrix(t, n_in, hr, 2, gm, nullptr, &err)) << err;
                const int64_t row0 = 7, n_rows = 33 - 7 - 2;  // across the part boundary
                std::vector<float> ref(static_cast<size_t>(n_rows * n_in));
                for (int64_t r = 0; r < n_rows; ++r) {
                    const int64_t g = row0 + r;
                    const uint8_t* src = g < 20 ? a.bytes.data() + g * rb : b.bytes.data() + (g - 20) * rb;
                    ASSERT_TRUE(dequantize_row(t, src, ref.data() + r * n_in, n_in).ok());
                }
                for (DType ot : {DType::F32, DType::F16, DType::BF16}) {
                    const size_t es = ot == DType::F32 ? 4 : 2;
                    DeviceBuffer out(ref.size() * es);
                    cuda::dequantize_matrix(gm, row0, n_rows, out.get(), ot, nullptr);
                    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
                    int64_t bad = 0, first = -1;
                    if (ot == DType::F32) {
                        const auto got = from_device<float>(out, ref.size());
                        for (size_t i = 0; i < ref.size(); ++i)
                            if (std::memcmp(&got[i], &ref[i], 4) != 0 && !(bad++))
                                first = static_cast<int64_t>(i);
                    } else {
                        const auto got = from_device<uint16_t>(out, ref.size());
                        for (size_t i = 0; i < ref.size(); ++i) {
                            const uint16_t want = ot == DType::F16 ? f32_to_f16(ref[i]) : f32_to_bf16(ref[i]);
                            if (got[i] != want && !(bad++)) first = static_cast<int64_t>(i);
                        }
                    }
                    EXPECT_EQ(bad, 0)
                        << "out " << dtype_name(ot) << ": " << bad << " elements differ, first at row "
                        << (first < 0 ? -1 : first / n_in) << " col " << (first < 0 ? -1 : first % n_in)
                        << " (ref " << (first < 0 ? 0.0f : ref[static_cast<size_t>(first)]) << ")";
                }
                cuda::free_matrix(gm);
            }
        }
}

TEST(CudaGpuMatrix, UploadRejectsBadInput) {
    SKIP_WITHOUT_GPU();
    std::vector<uint8_t> bytes(1 << 16, 0);
    cuda::HostRows hr{bytes.data(), 1024, 4};
    cuda::GpuMatrix gm;
    auto rejects = [&](DType t, int64_t n_in, const cuda::HostRows* p, int n, const char* why) {
        const char* err = nullptr;
        EXPECT_FALSE(cuda::upload_matrix(t, n_in, p, n, gm, nullptr, &err)) << why;
        EXPECT_NE(err, nullptr) << why;
        if (err) {
            EXPECT_GT(std::strlen(err), 10u) << why;
        }
        EXPECT_EQ(gm.data, nullptr) << why;
    };
    EXPECT_FALSE(cuda::gpu_matmul_supported(DType::Q5_K));
    EXPECT_FALSE(cuda::gpu_matmul_supported(DType::Q4_1));
    EXPECT_TRUE(cuda::gpu_matmul_supported(DType::Q6_K));
    rejects(DType::Q5_K, 256, &hr, 1, "unsupported type Q5_K");
    rejects(DType::Q4_1, 256, &hr, 1, "unsupported type Q4_1");
    rejects(DType::I32, 256, &hr, 1, "unsupported type I32");
    rejects(DType::Q4_0, 48, &hr, 1, "n_in not a multiple of 32");
    rejects(DType::Q4_K, 128, &hr, 1, "n_in not a multiple of 256");
    rejects(DType::F16, 0, &hr, 1, "n_in = 0");
    rejects(DType::F16, 256, nullptr, 1, "no parts");
    rejects(DType::F16, 256, &hr, 0, "zero parts");
    cuda::HostRows empty{bytes.data(), 1024, 0};
    rejects(DType::F16, 256, &empty, 1, "no rows");
    cuda::HostRows null_rows{nullptr, 1024, 4};
    rejects(DType::F16, 256, &null_rows, 1, "null data");
    cuda::HostRows short_stride{bytes.data(), 100, 4};
    rejects(DType::F16, 256, &short_stride, 1, "row stride below the row size");
    rejects(DType::F32, 1 << 20, &hr, 1, "n_in too large for shared memory");
    // A good upload after the failures works and reports its bytes.
    const char* err = nullptr;
    ASSERT_TRUE(cuda::upload_matrix(DType::F16, 256, &hr, 1, gm, nullptr, &err)) << err;
    EXPECT_EQ(gm.n_out, 4);
    EXPECT_EQ(gm.read_bytes, 4u * 512u);
    cuda::free_matrix(gm);
    EXPECT_EQ(gm.data, nullptr);
    cuda::free_matrix(gm);  // no-op on an empty matrix
}

}  // namespace
}  // namespace pelican
