// `pelican convert` for the hybrid Qwen3.5 archs (HF qwen3_5_moe / qwen3_5 -> GGUF qwen35moe /
// qwen35 with llama.cpp's tensor names, layout and metadata keys); convert_hybrid.cpp lists the
// transforms. Called by plan_convert_hf for an arch with LayerPlan::kLayerTypes.
#pragma once

#include <string>

#include "convert/convert.h"
#include "formats/hf_config.h"
#include "model/hparams.h"

namespace pelican {

Expected<ConvertJob> plan_convert_hybrid(const std::string& folder, const ConvertOptions& opt,
                                         const HfConfig& cfg, const ModelHParams& hp);

// The <arch>.* metadata keys of a qwen35moe / qwen35 GGUF as llama.cpp names them (n_mtp: 0 or 1
// nextn layers counted in block_count). `where` names the source in errors.
Status append_hybrid_kvs(std::vector<GgufKV>& kvs, const HfConfig& cfg, const ModelHParams& hp,
                         int64_t n_vocab, int64_t n_mtp, const std::string& where);

}  // namespace pelican
