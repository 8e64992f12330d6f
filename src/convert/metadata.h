// GGUF metadata that `pelican convert` writes, as llama.cpp's converter spells it:
//   general.*            architecture, name, file_type, quantization_version
//   <arch>.*             hyper-parameters from config.json (context_length, embedding_length, ...)
//   tokenizer.ggml.*     the vocabulary and its settings, from a TokenizerSpec
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "convert/tensor_plan.h"
#include "core/dtype.h"
#include "core/status.h"
#include "formats/generation_config.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "tokenizer/tokenizer_spec.h"

namespace pelican {

// general.architecture / name / file_type / quantization_version (2).
void append_general_kvs(std::vector<GgufKV>& kvs, std::string_view arch_name, std::string_view model_name,
                        DType requested);

// "<arch>.*" keys for a config.json model (hp from hparams_from_hf; arch.gguf_write_name is the
// key prefix). Rope scaling: linear and yarn become rope.scaling.* keys; llama3 becomes the
// rope_freqs.weight tensor (returned, [rope_dim/2] fp32 divisors of the default frequencies, as
// llama.cpp writes it); dynamic NTK is dropped with a warning (exact below the trained context).
// Mistral's sliding_window becomes <arch>.attention.sliding_window (read by pelican; llama.cpp runs
// GGUF llama with full attention).
struct HparamKvs {
    std::vector<GgufKV> kvs;
    std::optional<PlannedTensor> rope_freqs;
};
Expected<HparamKvs> hparam_kvs(const HfConfig& c, const ModelHParams& hp, int64_t n_vocab);

// general.sampling.* keys for a model's generation_config.json defaults, as llama.cpp's converter
// writes them (do_sample false: temp 0, greedy); nothing for empty defaults.
void append_sampling_kvs(std::vector<GgufKV>& kvs, const GenerationDefaults& d);

// tokenizer.ggml.* keys. The vocabulary is padded to n_vocab entries with "[PAD<id>]" tokens of
// type UNUSED (as llama.cpp does when the embedding has more rows than the tokenizer has tokens).
// Errors: the tokenizer has more tokens than n_vocab.
Status append_tokenizer_kvs(std::vector<GgufKV>& kvs, const TokenizerSpec& spec, int64_t n_vocab);

// The tokenizer.ggml.pre name for a byte-level BPE spec: spec.pre_name when set, else the preset
// whose regexes and flags equal the spec's; nullopt when none does.
std::optional<std::string> detect_pre_name(const TokenizerSpec& spec);

}  // namespace pelican
