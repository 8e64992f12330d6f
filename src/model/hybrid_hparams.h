// Hyper-parameters of the hybrid Qwen3.5 stack (qwen3_5_moe / qwen3_5 and their *_text configs) beyond
// the shared ModelHParams: which layers are Gated DeltaNet ("linear_attention") and which gated full
// attention, the DeltaNet head layout, and the MoE (or dense) MLP. Kept in ModelHParams::hybrid.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/ops_qwen35.h"  // DeltaNetShape

namespace pelican {

struct HybridHParams {
    std::vector<uint8_t> full_attention;  // [n_layer]: 1 = gated full attention, 0 = Gated DeltaNet
    DeltaNetShape linear;                 // DeltaNet heads (linear_num_{key,value}_heads, *_head_dim)
    int conv_kernel = 4;                  // linear_conv_kernel_dim

    bool moe = false;          // qwen3_5_moe: every layer's MLP is routed experts + a shared expert
    int n_expert = 0;          // num_experts
    int n_expert_used = 0;     // num_experts_per_tok (weights always renormalised)
    int64_t n_ff_expert = 0;   // moe_intermediate_size
    int64_t n_ff_shared = 0;   // shared_expert_intermediate_size
    int64_t n_mtp_layers = 0;  // mtp_num_hidden_layers (the MTP block's weights are optional)

    int64_t n_full_layers() const {
        int64_t n = 0;
        for (uint8_t f : full_attention) n += f;
        return n;
    }
    int64_t n_linear_layers() const { return static_cast<int64_t>(full_attention.size()) - n_full_layers(); }
};

}  // namespace pelican
