// `pelican convert` for the hybrid Qwen3.5 archs (HF qwen3_5_moe / qwen3_5 -> GGUF qwen35moe /
// qwen35 with llama.cpp's tensor names, layout and metadata keys); convert_hybrid.cpp lists the
// transforms. Called by plan_convert_hf for an arch with ArchSpec::hybrid.
#pragma once

#include <string>

#include "convert/convert.h"
#include "formats/hf_config.h"
#include "model/hparams.h"

namespace pelican {

Expected<ConvertJob> plan_convert_hybrid(const std::string& folder, const ConvertOptions& opt,
                                         const HfConfig& cfg, const ModelHParams& hp);

}  // namespace pelican
