// The GPU backend's switches (tuning.h): the one reader of its PELICAN_* environment variables.
#include "backend/cuda/tuning.h"

#include <mutex>

#include "core/env.h"

namespace pelican::cuda {
namespace {

std::once_flag g_once;
CudaTuning g_tuning;

}  // namespace

CudaTuning cuda_tuning_from_env() {
    CudaTuning t;
    t.pdl = env_switch_on("PELICAN_PDL");
    t.gemv_autotune = env_switch_on("PELICAN_GEMV_AUTOTUNE");
    t.gemv_tune_log = env_switch_set("PELICAN_GEMV_TUNE_LOG");
    t.fused_moe = static_cast<int>(env_int("PELICAN_FUSED_MOE", 0, 2, t.fused_moe));
    t.fused_route = env_switch_on("PELICAN_FUSED_ROUTE");
    t.fused_router = env_switch_on("PELICAN_FUSED_ROUTER");
    t.attn_row_blocks = env_switch_on("PELICAN_ATTN_ROW_BLOCKS");
    t.attn_combine2 = env_switch_on("PELICAN_ATTN_COMBINE2");
    t.prefill_tile_mib = env_int("PELICAN_PREFILL_TILE_MIB", 1, 1024, t.prefill_tile_mib);
    t.hybrid_chunk = env_switch_on("PELICAN_HYBRID_CHUNK");
    t.moe_grouped = env_switch_on("PELICAN_MOE_GROUPED");
    t.moe_mma = env_switch_on("PELICAN_MOE_MMA");
    t.dn_chunked = env_switch_on("PELICAN_DN_CHUNKED");
    t.dn_conv_fold = env_switch_on("PELICAN_DN_CONV_FOLD");
    t.fused_combine = env_switch_on("PELICAN_FUSED_COMBINE");
    return t;
}

const CudaTuning& cuda_tuning() {
    std::call_once(g_once, [] { g_tuning = cuda_tuning_from_env(); });
    return g_tuning;
}

void set_cuda_tuning(const CudaTuning& t) {
    std::call_once(g_once, [] {});
    g_tuning = t;
}

}  // namespace pelican::cuda
