// Applying a model's sampling defaults (runtime/generation_defaults.h).
#include "runtime/generation_defaults.h"

#include <filesystem>

#include "model/model.h"

namespace pelican {

SamplerParams apply_generation_defaults(const GenerationDefaults& d, SamplerParams p) {
    if (d.temperature) p.temperature = *d.temperature;
    if (d.top_p) p.top_p = *d.top_p;
    if (d.top_k) p.top_k = *d.top_k;
    if (d.min_p) p.min_p = *d.min_p;
    if (d.repetition_penalty) p.repetition_penalty = *d.repetition_penalty;
    if (d.penalty_last_n) p.penalty_last_n = *d.penalty_last_n;
    if (d.do_sample && !*d.do_sample) p.temperature = 0.0f;
    return p;
}

GenerationDefaults load_generation_defaults(const Model& model) {
    if (const GgufFile* g = model.gguf()) return gguf_generation_defaults(*g);
    std::error_code ec;
    const std::filesystem::path p(model.path());
    return read_generation_config(std::filesystem::is_directory(p, ec) ? p.string()
                                                                       : p.parent_path().string());
}

}  // namespace pelican
