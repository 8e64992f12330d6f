// The GPU backend's switches, in one struct: the A/B alternatives that docs/cuda.md lists (each field's
// default is the path measured fastest; the other keeps a measured alternative for comparison). Backend
// code reads cuda_tuning(), never the environment: the PELICAN_* variables are read once, by
// cuda_tuning_from_env(), when the backend first asks. Kernels that pick a path at load or creation time
// (GEMV autotuning, the single-sequence passes' chunking) read the switches then, so a change reaches only
// what is created after it.
//
//   CudaTuning t = cuda_tuning();  t.pdl = false;  set_cuda_tuning(t);   // tests and benches only
#pragma once

#include <cstdint>

namespace pelican::cuda {

struct CudaTuning {
    bool pdl = true;             // PELICAN_PDL: programmatic dependent launch between kernels
    bool gemv_autotune = true;   // PELICAN_GEMV_AUTOTUNE: time the GEMV variants per shape at load
    bool gemv_tune_log = false;  // PELICAN_GEMV_TUNE_LOG=1: one line per tuned GEMV shape on stderr
    int fused_moe = 1;           // PELICAN_FUSED_MOE: the one-kernel decode MoE block 0 never, 1 where
                                 // moe_fused_use prefers it, 2 wherever supported
    bool fused_route = true;     // PELICAN_FUSED_ROUTE: the fused MoE block routes by the logits
    bool fused_router = true;    // PELICAN_FUSED_ROUTER: router GEMV + top-k in one kernel
    bool attn_row_blocks =
        true;                   // PELICAN_ATTN_ROW_BLOCKS: smaller decode-attention row blocks (< 8 KV heads)
    bool attn_combine2 = true;  // PELICAN_ATTN_COMBINE2: two-level split combine of decode attention
    int64_t prefill_tile_mib = 128;  // PELICAN_PREFILL_TILE_MIB (1..1024): the prefill GEMM's weight tile
    // The single-sequence hybrid pass (cuda_hybrid_forward.h), read when a pass is created:
    bool hybrid_chunk =
        true;  // PELICAN_HYBRID_CHUNK: prompts as whole-chunk layers (else 8-token micro-batches)
    bool moe_grouped = true;    // PELICAN_MOE_GROUPED: prompt chunks' experts grouped by expert
    bool moe_mma = true;        // PELICAN_MOE_MMA: grouped Q4_0 / Q4_K experts on tensor cores
    bool dn_chunked = true;     // PELICAN_DN_CHUNKED: chunked DeltaNet recurrence for prompt chunks
    bool dn_conv_fold = true;   // PELICAN_DN_CONV_FOLD: the conv folded into deltanet_step
    bool fused_combine = true;  // PELICAN_FUSED_COMBINE: the MoE combine in the down GEMV's tail
};

// The PELICAN_* environment as a CudaTuning (unset or malformed variables keep the defaults).
CudaTuning cuda_tuning_from_env();
// The switches in force (cuda_tuning_from_env() on first use).
const CudaTuning& cuda_tuning();
// Replaces them (tests and benches; not while kernels that read them are being launched on another thread).
void set_cuda_tuning(const CudaTuning& t);

}  // namespace pelican::cuda
