// One-screen summary of a .safetensors file or an HF model folder, for `pelican info`.
#pragma once

#include <string>

#include "core/status.h"

namespace pelican {

// Text (json=false) or a JSON object (json=true): architecture and key hyper-parameters (from
// config.json when present), tensor count, parameters, bytes per dtype and total, shard count,
// and whether tokenizer.json and a chat template are present.
Expected<std::string> hf_model_summary(const std::string& path, bool json);

}  // namespace pelican
