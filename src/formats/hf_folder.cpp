#include "formats/hf_folder.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A shard name from an index must stay inside the folder.
bool safe_shard_name(const std::string& s) {
    if (s.empty() || s.front() == '/') return false;
    for (const auto& part : fs::path(s))
        if (part == "..") return false;
    return true;
}

// Parses an index: weight_map tensor -> shard file name.
Expected<std::map<std::string, std::string>> read_index(const std::string& index_path) {
    PELICAN_ASSIGN(std::string text, read_text_file(index_path));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) return make_error("{}: not valid JSON", index_path);
    if (!j.is_object()) return make_error("{}: must be a JSON object", index_path);
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object())
        return make_error("{}: missing or non-object \"weight_map\"", index_path);
    std::map<std::string, std::string> out;
    for (const auto& [tensor, shard] : wm->items()) {
        if (!shard.is_string())
            return make_error("{}: weight_map entry for '{}' must be a file name string", index_path, tensor);
        std::string s = shard.get<std::string>();
        if (!safe_shard_name(s))
            return make_error("{}: weight_map entry for '{}' names '{}', which is outside the folder",
                              index_path, tensor, s);
        out.emplace(tensor, std::move(s));
    }
    if (out.empty()) return make_error("{}: weight_map is empty", index_path);
    return out;
}

}  // namespace

bool is_hf_folder(const std::string& path) {
    std::error_code ec;
    return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

Status HfWeights::add_shard_tensors(size_t shard) {
    const SafetensorsFile& f = (*shards_)[shard];
    for (const auto& t : f.tensors()) {
        auto [it, inserted] = lookup_.emplace(t.name, Slot{shard, &t});
        if (!inserted)
            return make_error("{}: tensor '{}' appears in both '{}' and '{}'", path_, t.name,
                              (*shards_)[it->second.shard].name(), f.name());
    }
    return {};
}

Expected<HfWeights> HfWeights::open(const std::string& path) {
    HfWeights w;
    w.path_ = path;
    w.shards_ = std::make_unique<std::vector<SafetensorsFile>>();
    std::error_code ec;
    if (!fs::exists(path, ec)) return make_error("'{}' does not exist", path);

    std::vector<std::string> files;
    std::map<std::string, std::string> index;  // tensor -> shard name, when indexed
    fs::path dir(path);
    std::string index_path;  // set when reading through an index
    bool is_dir = fs::is_directory(path, ec);
    if (!is_dir && path.ends_with(".index.json")) {
        index_path = path;
        dir = fs::path(path).parent_path();
    } else if (is_dir && !fs::is_regular_file(dir / "model.safetensors", ec) &&
               fs::is_regular_file(dir / "model.safetensors.index.json", ec)) {
        index_path = (dir / "model.safetensors.index.json").string();
    }
    if (!index_path.empty()) {
        PELICAN_ASSIGN(index, read_index(index_path));
        std::vector<std::string> names;
        for (const auto& [t, s] : index) names.push_back(s);
        std::sort(names.begin(), names.end());
        names.erase(std::unique(names.begin(), names.end()), names.end());
        for (const auto& s : names) {
            fs::path p = dir / s;
            if (!fs::is_regular_file(p, ec))
                return make_error("{}: shard '{}' named by the index is missing", index_path, p.string());
            files.push_back(p.string());
        }
        w.indexed_ = true;
    } else if (!is_dir) {
        files.push_back(path);
    } else if (fs::is_regular_file(dir / "model.safetensors", ec)) {
        files.push_back((dir / "model.safetensors").string());
    } else {
        for (const auto& e : fs::directory_iterator(dir, ec))
            if (e.is_regular_file(ec) && e.path().extension() == ".safetensors")
                files.push_back(e.path().string());
        if (ec) return make_error("cannot list '{}': {}", path, ec.message());
        std::sort(files.begin(), files.end());
        if (files.empty())
            return make_error(
                "'{}' holds no weights: no model.safetensors, model.safetensors.index.json or "
                "*.safetensors",
                path);
    }

    w.shards_->reserve(files.size());
    for (const auto& f : files) {
        PELICAN_ASSIGN(SafetensorsFile sf, SafetensorsFile::open(f));
        w.shards_->push_back(std::move(sf));
    }
    w.lookup_.reserve(index.size());
    for (size_t i = 0; i < w.shards_->size(); ++i) PELICAN_TRY(w.add_shard_tensors(i));

    for (const auto& [tensor, shard] : index) {
        const SafetensorsTensor* t = w.find(tensor);
        std::string want = (dir / shard).string();
        if (!t || (*w.shards_)[w.shard_of(tensor)].name() != want)
            return make_error(
                "{}: index maps tensor '{}' to '{}' but that shard has no such tensor{}", index_path, tensor,
                shard, t ? fmt::format(" (it is in '{}')", (*w.shards_)[w.shard_of(tensor)].name()) : "");
    }
    return w;
}

const SafetensorsTensor* HfWeights::find(std::string_view name) const {
    auto it = lookup_.find(std::string(name));
    return it == lookup_.end() ? nullptr : it->second.tensor;
}

size_t HfWeights::shard_of(std::string_view name) const {
    auto it = lookup_.find(std::string(name));
    return it == lookup_.end() ? 0 : it->second.shard;
}

std::vector<const SafetensorsTensor*> HfWeights::tensors() const {
    std::vector<const SafetensorsTensor*> out;
    out.reserve(lookup_.size());
    for (const auto& [name, slot] : lookup_) out.push_back(slot.tensor);
    std::sort(out.begin(), out.end(),
              [](const SafetensorsTensor* a, const SafetensorsTensor* b) { return a->name < b->name; });
    return out;
}

}  // namespace pelican
