// A uniform, read-only view of the tensors of a model file, addressed by GGUF tensor name:
// a GGUF file directly, or a Hugging Face folder (safetensors) through model/tensor_names.h.
// Tensors are views into the mapped files (no copies); the source must outlive them.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/gguf.h"
#include "formats/hf_folder.h"

namespace pelican {

class WeightSource {
public:
    static WeightSource from_gguf(std::shared_ptr<const GgufFile> f);
    static WeightSource from_hf(std::shared_ptr<const HfWeights> w);

    // The tensor named `gguf_name` ("blk.0.attn_q.weight"), shape in GGUF order; nullopt when absent.
    // Errors: a tensor whose dtype pelican cannot read (e.g. safetensors I64 or U8) or whose
    // bytes do not match its shape.
    Expected<std::optional<Tensor>> find(std::string_view gguf_name) const;

    // The name as the user's file spells it ("model.layers.0.self_attn.q_proj.weight" for HF).
    std::string file_name_of(std::string_view gguf_name) const;
    // A shape as the user's file prints it: GGUF order for GGUF, torch order for HF.
    std::string format_shape(std::span<const int64_t> gguf_ne) const;
    const std::string& path() const { return path_; }
    bool is_gguf() const { return gguf_ != nullptr; }
    const GgufFile* gguf() const { return gguf_.get(); }
    const HfWeights* hf() const { return hf_.get(); }

private:
    std::shared_ptr<const GgufFile> gguf_;
    std::shared_ptr<const HfWeights> hf_;
    std::string path_;
    // GGUF names for HF tensors (Tensor::name is a view and must outlive the tensor).
    mutable std::deque<std::string> names_;
};

}  // namespace pelican
