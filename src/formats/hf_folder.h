// The weights of a Hugging Face model folder: model.safetensors, or model.safetensors.index.json
// ({"metadata": ..., "weight_map": {tensor: shard file}}) plus its shards. Every shard is opened
// and validated; the index is checked against the shards; one lookup spans all tensors.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "formats/safetensors.h"

namespace pelican {

class HfWeights {
public:
    // `path` is a model folder or a single .safetensors file.
    //  - folder with model.safetensors: that file;
    //  - else folder with model.safetensors.index.json: the shards it names (checked both ways);
    //  - else every *.safetensors in the folder (names must not repeat across files).
    static Expected<HfWeights> open(const std::string& path);

    const std::string& path() const { return path_; }
    bool indexed() const { return indexed_; }  // opened through model.safetensors.index.json
    const std::vector<SafetensorsFile>& shards() const { return *shards_; }
    size_t n_tensors() const { return lookup_.size(); }

    const SafetensorsTensor* find(std::string_view name) const;
    // Every tensor, ordered by name (stable across runs, independent of sharding).
    std::vector<const SafetensorsTensor*> tensors() const;
    // Shard index holding a tensor (valid only for a tensor returned by find()).
    size_t shard_of(std::string_view name) const;

private:
    std::string path_;
    bool indexed_ = false;
    // Heap-held so the tensor pointers in lookup_ survive moves of HfWeights.
    std::unique_ptr<std::vector<SafetensorsFile>> shards_;
    struct Slot {
        size_t shard;
        const SafetensorsTensor* tensor;
    };
    std::unordered_map<std::string, Slot> lookup_;

    Status add_shard_tensors(size_t shard);
};

// True if `path` is a folder holding config.json (an HF model folder).
bool is_hf_folder(const std::string& path);

}  // namespace pelican
