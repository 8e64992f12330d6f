// One place for the tensor names of the dense Llama family (llama, mistral, granite, qwen2, qwen3):
// Hugging Face (transformers) names <-> GGUF (llama.cpp) names. The model loader and
// `pelican convert` both use this table, so a name is spelled exactly once.
//
//   HF                                              GGUF
//   model.embed_tokens.weight                       token_embd.weight
//   model.norm.weight                               output_norm.weight
//   lm_head.weight                                  output.weight   (absent: tied to token_embd)
//   model.layers.N.input_layernorm.weight           blk.N.attn_norm.weight
//   model.layers.N.self_attn.{q,k,v,o}_proj.*       blk.N.attn_{q,k,v,output}.*   (* = weight|bias)
//   model.layers.N.self_attn.{q,k}_norm.weight      blk.N.attn_{q,k}_norm.weight  (qwen3)
//   model.layers.N.post_attention_layernorm.weight  blk.N.ffn_norm.weight
//   model.layers.N.mlp.{gate,up,down}_proj.*        blk.N.ffn_{gate,up,down}.*
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pelican {

// GGUF name of an HF tensor; nullopt when the name is not part of the table (e.g. rotary_emb
// buffers, vision towers): the caller decides whether to skip or reject it.
std::optional<std::string> hf_to_gguf_tensor_name(std::string_view hf_name);
// HF name of a GGUF tensor; nullopt when unknown (e.g. rope_freqs.weight, which HF computes).
std::optional<std::string> gguf_to_hf_tensor_name(std::string_view gguf_name);

// Which rope permutation (model/rope_permute.h) a GGUF-named tensor needs when an HF checkpoint
// is written as a GGUF of an architecture with interleaved ("normal") rope: the q projection
// (weight and bias) with the attention head count, the k projection with the kv head count.
enum class QkPermute { None, Q, K };
QkPermute qk_permute_kind(std::string_view gguf_name);

// Builders for per-layer GGUF names: gguf_layer_tensor(3, "attn_q", "weight") -> "blk.3.attn_q.weight".
std::string gguf_layer_tensor(int layer, std::string_view base, std::string_view suffix = "weight");

}  // namespace pelican
