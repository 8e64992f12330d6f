// Tensor lookup over GGUF files and HF folders (see weight_source.h).
#include "model/weight_source.h"

#include <vector>

#include <fmt/format.h>

#include "model/tensor_names.h"

namespace pelican {

WeightSource WeightSource::from_gguf(std::shared_ptr<const GgufFile> f) {
    WeightSource s;
    s.path_ = f->name();
    s.gguf_ = std::move(f);
    return s;
}

WeightSource WeightSource::from_hf(std::shared_ptr<const HfWeights> w) {
    WeightSource s;
    s.path_ = w->path();
    s.hf_ = std::move(w);
    return s;
}

std::string WeightSource::file_name_of(std::string_view gguf_name) const {
    if (gguf_) return std::string(gguf_name);
    return gguf_to_hf_tensor_name(gguf_name).value_or(std::string(gguf_name));
}

std::string WeightSource::format_shape(std::span<const int64_t> gguf_ne) const {
    std::vector<int64_t> dims(gguf_ne.begin(), gguf_ne.end());
    if (!gguf_) dims.assign(gguf_ne.rbegin(), gguf_ne.rend());  // torch order
    return fmt::format("[{}]", fmt::join(dims, ", "));
}

Expected<std::optional<Tensor>> WeightSource::find(std::string_view gguf_name) const {
    if (gguf_) {
        const GgufTensorInfo* info = gguf_->find_tensor(gguf_name);
        if (!info) return std::optional<Tensor>{};
        const auto bytes = gguf_->tensor_data(*info);
        std::vector<int64_t> ne(info->dims.begin(), info->dims.end());
        if (bytes.size() != info->n_bytes)
            return make_error("{}: tensor {} does not fit in the file", path_, info->name);
        PELICAN_ASSIGN(Tensor t, Tensor::contiguous_view(info->type, ne, const_cast<uint8_t*>(bytes.data()),
                                                         info->name));
        return std::optional<Tensor>(t);
    }
    const std::string hf_name = file_name_of(gguf_name);
    const SafetensorsTensor* st = hf_->find(hf_name);
    if (!st) return std::optional<Tensor>{};
    if (!st->dtype)
        return make_error("{}: tensor {} has dtype {}, which pelican cannot use as a weight", path_, hf_name,
                          st->dtype_str);
    std::vector<int64_t> shape(st->shape.begin(), st->shape.end());
    if (shape.empty() || shape.size() > kMaxDims)
        return make_error("{}: tensor {} has {} dims (expected 1 to 4)", path_, hf_name, shape.size());
    names_.emplace_back(gguf_name);
    PELICAN_ASSIGN(Tensor t, Tensor::contiguous_view_torch(
                                 *st->dtype, shape, const_cast<uint8_t*>(st->data.data()), names_.back()));
    if (static_cast<uint64_t>(t.n_bytes()) != st->data.size())
        return make_error("{}: tensor {} holds {} bytes, its shape needs {}", path_, hf_name, st->data.size(),
                          t.n_bytes());
    return std::optional<Tensor>(t);
}

namespace {

// The mapped file holding r's first byte; nullptr for bytes outside every mapping (caller memory,
// a loader's own buffer).
const MappedFile* mapping_of(const GgufFile* gguf, const HfWeights* hf, std::span<const uint8_t> r) {
    const auto inside = [&](const MappedFile& m) {
        return m.data() != nullptr && r.data() >= m.data() && r.data() < m.data() + m.size();
    };
    if (gguf) return inside(gguf->mapping()) ? &gguf->mapping() : nullptr;
    for (const SafetensorsFile& f : hf->shards())
        if (inside(f.mapping())) return &f.mapping();
    return nullptr;
}

}  // namespace

size_t WeightSource::release_pages(const Tensor& t) const {
    if (t.data == nullptr || t.n_bytes() <= 0) return 0;
    const std::span<const uint8_t> r(static_cast<const uint8_t*>(t.data), static_cast<size_t>(t.n_bytes()));
    const MappedFile* m = mapping_of(gguf_.get(), hf_.get(), r);
    if (m == nullptr) return 0;
    released_.push_back({m, r});
    return m->release_pages(r);
}

size_t WeightSource::release_pages_again() const {
    size_t n = 0;
    for (const auto& [m, r] : released_) n += m->release_pages(r);
    return n;
}

}  // namespace pelican
