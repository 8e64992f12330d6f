// What each layer of a model is, as data: a token mixer and a feed-forward block. The loaders fill
// ModelHParams::layer from the file (every layer of a Llama-family model is {kAttention, kSwiglu}; the
// Qwen3.5 stack's layer_types / attention.recurrent_layers choose gated attention or Gated DeltaNet per
// layer, its architecture the FFN); the executors run each layer by its kinds and never ask which
// architecture they run.
#pragma once

#include <cstdint>
#include <string_view>

namespace pelican {

enum class Mixer : uint8_t {
    kAttention,       // GQA softmax attention with rope over the KV cache (+ optional biases, q/k norms)
    kGatedAttention,  // the same with a per-head sigmoid output gate (wq holds query and gate rows per head)
    kDeltaNet,        // Gated DeltaNet: causal conv + gated delta rule over a recurrent state
};

enum class Ffn : uint8_t {
    kSwiglu,  // down(silu(gate(x)) * up(x)) (+ optional biases)
    kMoe,     // routed SwiGLU experts (top-k, renormalised) + a sigmoid-gated shared expert
};

struct LayerKind {
    Mixer mixer = Mixer::kAttention;
    Ffn ffn = Ffn::kSwiglu;
    bool operator==(const LayerKind&) const = default;
};

// The mixer keeps K/V rows in the sequence memory's pages (attention), or a recurrent state.
constexpr bool uses_kv(Mixer m) { return m != Mixer::kDeltaNet; }

constexpr std::string_view mixer_name(Mixer m) {
    switch (m) {
        case Mixer::kAttention:
            return "attention";
        case Mixer::kGatedAttention:
            return "gated attention";
        case Mixer::kDeltaNet:
            return "Gated DeltaNet";
    }
    return "?";
}

constexpr std::string_view ffn_name(Ffn f) { return f == Ffn::kMoe ? "MoE" : "SwiGLU"; }

}  // namespace pelican
