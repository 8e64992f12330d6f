// A uniform, read-only view of the tensors of a model file, addressed by GGUF tensor name:
// a GGUF file directly, or a Hugging Face folder (safetensors) through model/tensor_names.h.
// Tensors are views into the mapped files (no copies); the source must outlive them.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <string_view>
#include <vector>

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

    // For a tensor (a view from find(), or a part of one) whose bytes the model now holds a copy of
    // and reads no more: drops its whole pages from this process' resident set, so the weights are
    // not held twice (MappedFile::release_pages; a stray later read still sees the same bytes).
    // Bytes outside this source's mapped files are left alone. The range is remembered for
    // release_pages_again(). Returns the bytes advised.
    size_t release_pages(const Tensor& t) const;
    // Drops every range released so far again, once a load is done: a page fault also maps cached
    // neighbours (the kernel's fault-around, 64 KiB; or the whole large folio the page cache holds
    // it in, up to 2 MiB), so reading one tensor maps back pages of those released before it.
    // Returns the bytes advised.
    size_t release_pages_again() const;

private:
    std::shared_ptr<const GgufFile> gguf_;
    std::shared_ptr<const HfWeights> hf_;
    std::string path_;
    // GGUF names for HF tensors (Tensor::name is a view and must outlive the tensor).
    mutable std::deque<std::string> names_;
    struct Released {
        const MappedFile* file;  // the mapping holding range (owned by gguf_ or hf_)
        std::span<const uint8_t> range;
    };
    mutable std::vector<Released> released_;  // what release_pages dropped, for release_pages_again
};

}  // namespace pelican
