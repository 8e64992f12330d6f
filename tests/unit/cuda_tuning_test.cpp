// The GPU backend's switches (backend/cuda/tuning.h): every PELICAN_* variable reaches its field, malformed
// or out-of-range values keep the defaults, and set_cuda_tuning replaces what cuda_tuning() returns.
#include <cstdlib>

#include <gtest/gtest.h>

#include "backend/cuda/tuning.h"

namespace pelican {
namespace {

const char* const kOffSwitches[] = {
    "PELICAN_PDL",          "PELICAN_GEMV_AUTOTUNE",   "PELICAN_FUSED_ROUTE",
    "PELICAN_FUSED_ROUTER", "PELICAN_ATTN_ROW_BLOCKS", "PELICAN_ATTN_COMBINE2",
    "PELICAN_HYBRID_CHUNK", "PELICAN_MOE_GROUPED",     "PELICAN_MOE_MMA",
    "PELICAN_DN_CHUNKED",   "PELICAN_DN_CONV_FOLD",    "PELICAN_FUSED_COMBINE"};

void clear_env() {
    for (const char* n : kOffSwitches) unsetenv(n);
    for (const char* n : {"PELICAN_GEMV_TUNE_LOG", "PELICAN_FUSED_MOE", "PELICAN_PREFILL_TILE_MIB"})
        unsetenv(n);
}

TEST(CudaTuning, DefaultsWithoutTheEnvironment) {
    clear_env();
    const cuda::CudaTuning t = cuda::cuda_tuning_from_env(), d;
    EXPECT_TRUE(t.pdl && t.gemv_autotune && t.fused_route && t.fused_router && t.attn_row_blocks &&
                t.attn_combine2 && t.hybrid_chunk && t.moe_grouped && t.moe_mma && t.dn_chunked &&
                t.dn_conv_fold && t.fused_combine);
    EXPECT_FALSE(t.gemv_tune_log);
    EXPECT_EQ(t.fused_moe, d.fused_moe);
    EXPECT_EQ(t.prefill_tile_mib, 128);
}

TEST(CudaTuning, EverySwitchIsRead) {
    clear_env();
    for (const char* n : kOffSwitches) setenv(n, "0", 1);
    setenv("PELICAN_GEMV_TUNE_LOG", "1", 1);
    setenv("PELICAN_FUSED_MOE", "2", 1);
    setenv("PELICAN_PREFILL_TILE_MIB", "7", 1);
    const cuda::CudaTuning t = cuda::cuda_tuning_from_env();
    EXPECT_FALSE(t.pdl || t.gemv_autotune || t.fused_route || t.fused_router || t.attn_row_blocks ||
                 t.attn_combine2 || t.hybrid_chunk || t.moe_grouped || t.moe_mma || t.dn_chunked ||
                 t.dn_conv_fold || t.fused_combine);
    EXPECT_TRUE(t.gemv_tune_log);
    EXPECT_EQ(t.fused_moe, 2);
    EXPECT_EQ(t.prefill_tile_mib, 7);
    // Out of range or not a number: the defaults.
    setenv("PELICAN_FUSED_MOE", "3", 1);
    setenv("PELICAN_PREFILL_TILE_MIB", "lots", 1);
    const cuda::CudaTuning u = cuda::cuda_tuning_from_env();
    EXPECT_EQ(u.fused_moe, 1);
    EXPECT_EQ(u.prefill_tile_mib, 128);
    clear_env();
}

TEST(CudaTuning, SetReplacesTheSwitchesInForce) {
    const cuda::CudaTuning saved = cuda::cuda_tuning();
    cuda::CudaTuning t = saved;
    t.pdl = !saved.pdl;
    t.prefill_tile_mib = 3;
    cuda::set_cuda_tuning(t);
    EXPECT_EQ(cuda::cuda_tuning().pdl, !saved.pdl);
    EXPECT_EQ(cuda::cuda_tuning().prefill_tile_mib, 3);
    cuda::set_cuda_tuning(saved);
    EXPECT_EQ(cuda::cuda_tuning().pdl, saved.pdl);
}

}  // namespace
}  // namespace pelican
