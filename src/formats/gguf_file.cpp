// GgufValue / GgufFile accessors (parsing lives in gguf_reader.cpp).
#include <algorithm>

#include "formats/gguf.h"

namespace pelican {

std::string_view gguf_type_name(GgufType t) {
    switch (t) {
        case GgufType::U8:
            return "u8";
        case GgufType::I8:
            return "i8";
        case GgufType::U16:
            return "u16";
        case GgufType::I16:
            return "i16";
        case GgufType::U32:
            return "u32";
        case GgufType::I32:
            return "i32";
        case GgufType::F32:
            return "f32";
        case GgufType::BOOL:
            return "bool";
        case GgufType::STRING:
            return "string";
        case GgufType::ARRAY:
            return "array";
        case GgufType::U64:
            return "u64";
        case GgufType::I64:
            return "i64";
        case GgufType::F64:
            return "f64";
    }
    return "?";
}

size_t gguf_scalar_size(GgufType t) {
    switch (t) {
        case GgufType::U8:
        case GgufType::I8:
        case GgufType::BOOL:
            return 1;
        case GgufType::U16:
        case GgufType::I16:
            return 2;
        case GgufType::U32:
        case GgufType::I32:
        case GgufType::F32:
            return 4;
        case GgufType::U64:
        case GgufType::I64:
        case GgufType::F64:
            return 8;
        default:
            return 0;
    }
}

std::optional<int64_t> GgufValue::as_int() const {
    switch (type) {
        case GgufType::U8:
        case GgufType::U16:
        case GgufType::U32:
        case GgufType::U64:
        case GgufType::BOOL:
            if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
            return static_cast<int64_t>(u);
        case GgufType::I8:
        case GgufType::I16:
        case GgufType::I32:
        case GgufType::I64:
            return i;
        default:
            return std::nullopt;
    }
}

std::optional<double> GgufValue::as_float() const {
    if (type == GgufType::F32 || type == GgufType::F64) return f;
    if (type == GgufType::BOOL) return std::nullopt;
    if (type == GgufType::U64) return static_cast<double>(u);
    if (auto v = as_int()) return static_cast<double>(*v);
    return std::nullopt;
}

uint64_t GgufTensorInfo::n_elements() const {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;  // the reader rejects products that overflow
    return n;
}

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = std::lower_bound(kv_index_.begin(), kv_index_.end(), key,
                               [&](size_t i, std::string_view k) { return kvs_[i].key < k; });
    if (it == kv_index_.end() || kvs_[*it].key != key) return nullptr;
    return &kvs_[*it].value;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::STRING) return std::nullopt;
    return v->str;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
    const GgufValue* v = find(key);
    return v ? v->as_int() : std::nullopt;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
    const GgufValue* v = find(key);
    return v ? v->as_float() : std::nullopt;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::BOOL) return std::nullopt;
    return v->u != 0;
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::ARRAY || v->elem_type != GgufType::STRING) return std::nullopt;
    std::vector<std::string> out;
    out.reserve(v->arr.size());
    for (const auto& e : v->arr) out.push_back(e.str);
    return out;
}

std::optional<std::vector<float>> GgufFile::get_f32_array(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::ARRAY || v->elem_type != GgufType::F32) return std::nullopt;
    std::vector<float> out;
    out.reserve(v->arr.size());
    for (const auto& e : v->arr) out.push_back(static_cast<float>(e.f));
    return out;
}

std::optional<std::vector<int32_t>> GgufFile::get_i32_array(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::ARRAY || v->elem_type != GgufType::I32) return std::nullopt;
    std::vector<int32_t> out;
    out.reserve(v->arr.size());
    for (const auto& e : v->arr) out.push_back(static_cast<int32_t>(e.i));
    return out;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
    auto it = std::lower_bound(tensor_index_.begin(), tensor_index_.end(), name,
                               [&](size_t i, std::string_view n) { return tensors_[i].name < n; });
    if (it == tensor_index_.end() || tensors_[*it].name != name) return nullptr;
    return &tensors_[*it];
}

std::span<const uint8_t> GgufFile::tensor_data(const GgufTensorInfo& t) const {
    uint64_t size = bytes_.size();
    if (data_offset_ > size || t.offset > size - data_offset_ || t.n_bytes > size - data_offset_ - t.offset)
        return {};
    return bytes_.subspan(data_offset_ + t.offset, t.n_bytes);
}

}  // namespace pelican
