// A loaded model: the mapped file, its hyper-parameters (with every layer's kinds) and weights. Immutable
// after load and shareable between sessions (sequence state lives in kv/sequence_memory.h and the passes).
//
//   PELICAN_ASSIGN(auto model, Model::load("model.gguf"));   // or an HF folder
//   model->hparams().n_vocab
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/hf_folder.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "model/weight_source.h"
#include "model/weights.h"

namespace pelican {

struct ModelLoadOptions {
    bool allow_repack = true;  // let the CPU backend repack Q4_0/Q8_0 weights (copies them)
};

// What a model path names: a GGUF file or an HF folder as given; a file inside an HF folder
// (model.safetensors, config.json, a safetensors index) names that folder. Errors: no such path;
// a lone safetensors file without config.json next to it (with what to pass instead).
Expected<std::string> resolve_model_path(const std::string& path);

class Model {
public:
    // `path`: a GGUF file, or a Hugging Face folder (config.json + safetensors). Errors name the
    // file, and the tensor or key at fault.
    static Expected<std::unique_ptr<Model>> load(const std::string& path, const ModelLoadOptions& opt = {});

    const ArchSpec& arch() const { return *hp_.arch; }
    const ModelHParams& hparams() const { return hp_; }
    const ModelWeights& weights() const { return w_; }
    const std::string& path() const { return path_; }
    bool is_gguf() const { return gguf_ != nullptr; }
    const GgufFile* gguf() const { return gguf_.get(); }            // nullptr for HF folders
    const HfConfig* hf_config() const { return hf_config_.get(); }  // nullptr for GGUF
    // One line: "llama, 2 layers, hidden 64, heads 4/2 x 16, ff 192, vocab 512, rope neox theta 10000".
    std::string describe() const;

private:
    std::string path_;
    std::shared_ptr<const GgufFile> gguf_;
    std::shared_ptr<const HfWeights> hf_;
    std::unique_ptr<HfConfig> hf_config_;
    ModelHParams hp_;
    ModelWeights w_;  // views into gguf_ / hf_ mappings, or owned copies
};

}  // namespace pelican
