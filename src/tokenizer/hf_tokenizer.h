// Hugging Face tokenizers -> TokenizerSpec: tokenizer.json (+ tokenizer_config.json,
// special_tokens_map.json, chat_template.jinja). Tokenizer::from_hf is built on these.
//
// Supported: model BPE with a ByteLevel pre-tokenizer/decoder (-> TokenizerKind::BPE), model BPE
// with byte_fallback / Metaspace / Prepend+Replace("▁") (-> SPM), model WordPiece with BERT
// normalizer/pre-tokenizer (-> WordPiece). Anything else is an Error that names the component.
#pragma once

#include <string>

#include "core/status.h"
#include "tokenizer/tokenizer_spec.h"

namespace pelican {

// The texts of the files of one HF tokenizer; *_name are used in error messages.
struct HfTokenizerFiles {
    std::string tokenizer_json;  // required
    std::string tokenizer_json_name = "tokenizer.json";
    std::string config_json;  // tokenizer_config.json, "" when absent
    std::string config_name = "tokenizer_config.json";
    std::string special_tokens_map_json;  // special_tokens_map.json, "" when absent
    std::string special_tokens_map_name = "special_tokens_map.json";
    std::string chat_template;  // chat_template.jinja, "" when absent (wins over the config's)
};

// Builds the spec from file texts (no file system access; used by tests and fuzzers).
Expected<TokenizerSpec> hf_tokenizer_spec(const HfTokenizerFiles& files);

// `path` is a tokenizer.json file or a folder holding one. Sibling files are read when present.
Expected<TokenizerSpec> load_hf_tokenizer_spec(const std::string& path);

}  // namespace pelican
