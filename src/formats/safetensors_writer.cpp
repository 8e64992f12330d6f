#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/output_file.h"
#include "formats/safetensors.h"

namespace pelican {
namespace {

using json = nlohmann::json;

// JSON string literal; nlohmann throws on invalid UTF-8, which we turn into an Error.
Expected<std::string> quote(const std::string& s, std::string_view what) {
    try {
        return json(s).dump(-1, ' ', false, json::error_handler_t::strict);
    } catch (const json::exception&) {
        return make_error("safetensors writer: {} is not valid UTF-8", what);
    }
}

struct Prepared {
    std::string header;  // padded JSON
    std::vector<SafetensorsWriteTensor> tensors;
    uint64_t data_bytes = 0;
};

Expected<Prepared> prepare(std::vector<SafetensorsWriteTensor> tensors,
                           const std::map<std::string, std::string>& metadata, SafetensorsWriteOptions opts) {
    std::stable_sort(tensors.begin(), tensors.end(),
                     [](const SafetensorsWriteTensor& a, const SafetensorsWriteTensor& b) {
                         if (a.dtype != b.dtype) return a.dtype > b.dtype;
                         return a.name < b.name;
                     });
    Prepared p;
    std::string& h = p.header;
    h = "{";
    bool first = true;
    if (!metadata.empty() || opts.always_write_metadata) {
        h += "\"__metadata__\":{";
        bool mfirst = true;
        for (const auto& [k, v] : metadata) {
            PELICAN_ASSIGN(std::string qk, quote(k, fmt::format("metadata key '{}'", k)));
            PELICAN_ASSIGN(std::string qv, quote(v, fmt::format("metadata value for '{}'", k)));
            h += (mfirst ? "" : ",") + qk + ":" + qv;
            mfirst = false;
        }
        h += "}";
        first = false;
    }
    std::set<std::string_view> seen;
    for (const auto& t : tensors) {
        if (t.name == "__metadata__")
            return make_error("safetensors writer: '__metadata__' is not a tensor name");
        if (!seen.insert(t.name).second)
            return make_error("safetensors writer: tensor '{}' given twice", t.name);
        const auto& info = st_dtype_info(t.dtype);
        uint64_t n = info.elem_bytes;
        bool overflow = false;
        for (uint64_t d : t.shape) overflow |= __builtin_mul_overflow(n, d, &n);
        if (overflow) return make_error("safetensors writer: tensor '{}': shape overflows", t.name);
        if (n != t.data.size())
            return make_error("safetensors writer: tensor '{}': {} [{}] needs {} bytes, got {}", t.name,
                              info.name, fmt::join(t.shape, ", "), n, t.data.size());
        PELICAN_ASSIGN(std::string qn, quote(t.name, fmt::format("tensor name '{}'", t.name)));
        uint64_t begin = p.data_bytes;
        p.data_bytes += n;
        h += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                         first ? "" : ",", qn, info.name, fmt::join(t.shape, ","), begin, p.data_bytes);
        first = false;
    }
    h += "}";
    h.append((8 - h.size() % 8) % 8, ' ');  // data starts 8-byte aligned
    p.tensors = std::move(tensors);
    return p;
}

void put_u64_le(uint8_t* out, uint64_t v) {
    for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

SafetensorsWriteTensor to_write_tensor(const SafetensorsTensor& t) {
    return SafetensorsWriteTensor{t.name, t.st_dtype, t.shape, t.data};
}

Expected<std::vector<uint8_t>> safetensors_serialize(std::vector<SafetensorsWriteTensor> tensors,
                                                     const std::map<std::string, std::string>& metadata,
                                                     SafetensorsWriteOptions opts) {
    PELICAN_ASSIGN(Prepared p, prepare(std::move(tensors), metadata, opts));
    std::vector<uint8_t> out(8);
    put_u64_le(out.data(), p.header.size());
    out.reserve(8 + p.header.size() + p.data_bytes);
    out.insert(out.end(), p.header.begin(), p.header.end());
    for (const auto& t : p.tensors) out.insert(out.end(), t.data.begin(), t.data.end());
    return out;
}

Status safetensors_write(const std::string& path, std::vector<SafetensorsWriteTensor> tensors,
                         const std::map<std::string, std::string>& metadata, SafetensorsWriteOptions opts) {
    PELICAN_ASSIGN(Prepared p, prepare(std::move(tensors), metadata, opts));
    PELICAN_ASSIGN(OutputFile out, OutputFile::create(path, opts.force));
    std::FILE* f = out.stream();
    uint8_t len[8];
    put_u64_le(len, p.header.size());
    bool ok = std::fwrite(len, 1, 8, f) == 8;
    ok = ok && std::fwrite(p.header.data(), 1, p.header.size(), f) == p.header.size();
    for (const auto& t : p.tensors)
        if (ok && !t.data.empty()) ok = std::fwrite(t.data.data(), 1, t.data.size(), f) == t.data.size();
    if (!ok)  // out's destructor removes the temporary
        return make_error("cannot write '{}' ({} bytes): {}", path, 8 + p.header.size() + p.data_bytes,
                          std::strerror(errno));
    return out.commit();
}

}  // namespace pelican
