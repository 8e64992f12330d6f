// The sampling defaults a model ships: an HF folder's generation_config.json (temperature, top_p,
// top_k, min_p, repetition_penalty, do_sample) or a GGUF's general.sampling.* keys (temp, top_p,
// top_k, min_p, penalty_repeat, penalty_last_n: what llama.cpp's converter writes from that file,
// and what `pelican convert` writes too). runtime/generation_defaults.h applies them.
//
// The file is untrusted: a value of the wrong type or out of range is skipped with a warning
// naming the key, never an error that keeps the model from running.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pelican {

class GgufFile;

struct GenerationDefaults {
    std::optional<float> temperature, top_p, min_p, repetition_penalty;
    std::optional<int32_t> top_k, penalty_last_n;
    std::optional<bool> do_sample;
    std::string source;                 // "<folder>/generation_config.json", "GGUF general.sampling.*"
    std::vector<std::string> warnings;  // keys skipped, and why

    bool empty() const {
        return !temperature && !top_p && !min_p && !repetition_penalty && !top_k && !penalty_last_n &&
               !do_sample;
    }
    // "temperature 0.6, top_p 0.95, top_k 20 (generation_config.json)", or "" when empty.
    std::string describe() const;
};

// From the JSON text of a generation_config.json (`name` names it in warnings).
GenerationDefaults parse_generation_config(const std::string& json_text, const std::string& name);
// An HF folder's generation_config.json; empty defaults when the folder has none.
GenerationDefaults read_generation_config(const std::string& folder);
// A GGUF's general.sampling.* keys (convert/metadata.h writes them).
GenerationDefaults gguf_generation_defaults(const GgufFile& f);

}  // namespace pelican
