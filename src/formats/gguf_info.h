// One-screen summary of a GGUF file, for `pelican info`.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "formats/gguf.h"

namespace pelican {

// JSON object: file, version, alignment, file_bytes, architecture, name, hyper_parameters (scalar
// "<arch>.*" keys, prefix stripped), tensor_count, parameters, tensor_types ({type: {count, bytes}}),
// tensor_bytes, tokenizer {model, pre, vocab_size}, chat_template (bool).
nlohmann::json gguf_summary_json(const GgufFile& f);
// The same as aligned human-readable text (or the JSON, pretty-printed, when json=true).
std::string gguf_summary(const GgufFile& f, bool json);

}  // namespace pelican
