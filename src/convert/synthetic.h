// Synthetic models: a GGUF of any supported architecture and shape with seeded random weights of
// realistic magnitudes and a real vocabulary, for benchmarks and tests without downloading weights.
//
// The config is config.json-style JSON (hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads, head_dim, vocab_size, rope_theta, rms_norm_eps,
// max_position_embeddings, rope_scaling, tie_word_embeddings, attention_bias, mlp_bias, granite
// multipliers, initializer_range). vocab_size defaults to the vocabulary's token count (a larger
// one is padded with [PAD<id>] tokens); max_position_embeddings defaults to 4096.
//
// Weights (std = initializer_range, default 0.02, as transformers initialises them):
//   matrices and biases     ~ N(0, std^2)
//   norm weights            ~ 1 + N(0, std^2)
// With rms-normalised inputs every projection outputs values of order std * sqrt(fan_in) (~1 for
// common shapes), so activations stay finite through many layers and quantization scales are valid.
// The normal samples are Irwin-Hall sums of four uniforms (bounded at 3.46 sigma, fast).
//
// Determinism: tensor t's row r depends only on (seed, t's name, r): the same seed gives the same
// values for every output type, thread count and machine.
#pragma once

#include <cstdint>
#include <string>

#include "convert/convert.h"

namespace pelican {

struct SyntheticOptions {
    std::string arch;                    // llama, mistral, qwen2, qwen3, granite, qwen3_5_moe, qwen3_5
    std::string config_json;             // the config text
    std::string config_name = "config";  // for errors (the file name)
    std::string vocab;                   // GGUF file, tokenizer.json or HF folder holding the vocabulary
    uint64_t seed = 0;
};

Expected<ConvertJob> plan_synthetic(const SyntheticOptions& s, const ConvertOptions& opt);

// A synthetic model written into anonymous memory instead of a file: a memfd (Linux; no disk and no
// tmpfs size limit, only RAM), for models larger than the disk (Qwen3.5-122B-A10B in Q4_0 is ~70 GB).
// `path` ("/proc/self/fd/N") loads it like a file for as long as fd stays open; the caller closes fd.
struct MemoryModel {
    int fd = -1;
    std::string path;
};
Expected<MemoryModel> write_synthetic_to_memory(const SyntheticOptions& s, const ConvertOptions& opt);

// Row `row` of the synthetic tensor `name` (n floats): mean + std * N(0,1)-like samples.
void synthetic_row(uint64_t seed, std::string_view name, int64_t row, float mean, float std, float* dst,
                   int64_t n);

}  // namespace pelican
