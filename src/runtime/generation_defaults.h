// The model's sampling defaults (formats/generation_config.h) applied to pelican's: they replace
// the built-in SamplerParams defaults, as transformers and vLLM use generation_config.json, and
// options given explicitly (flags, request fields) override them. do_sample false (transformers'
// switch for greedy search) makes the default greedy (temperature 0).
#pragma once

#include "formats/generation_config.h"
#include "runtime/sampler.h"

namespace pelican {

class Model;

// p with the defaults applied.
SamplerParams apply_generation_defaults(const GenerationDefaults& d, SamplerParams p);
// The loaded model's defaults: its folder's generation_config.json, or the GGUF keys.
GenerationDefaults load_generation_defaults(const Model& model);

}  // namespace pelican
