#include <algorithm>
#include <cstring>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"

namespace pelican {

using json = nlohmann::json;

struct SafetensorsParser {
    SafetensorsFile& f;

    // A JSON value as a u64; nullopt for negative, fractional or non-number values.
    static std::optional<uint64_t> as_u64(const json& v) {
        if (v.is_number_unsigned()) return v.get<uint64_t>();
        if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
        return std::nullopt;
    }

    Status parse_metadata(const json& m) {
        f.has_metadata_ = true;
        if (m.is_null()) return {};
        if (!m.is_object())
            return make_error("{}: \"__metadata__\" must be an object of strings, found {}", f.name_,
                              m.type_name());
        for (const auto& [k, v] : m.items()) {
            if (!v.is_string())
                return make_error("{}: \"__metadata__\" value for '{}' must be a string, found {}", f.name_,
                                  k, v.type_name());
            f.metadata_[k] = v.get<std::string>();
        }
        return {};
    }

    Expected<SafetensorsTensor> parse_tensor(const std::string& name, const json& v, uint64_t data_bytes) {
        auto err = [&](std::string_view what) {
            return make_error("{}: tensor '{}': {}", f.name_, name, what);
        };
        if (!v.is_object()) return err(fmt::format("entry must be an object, found {}", v.type_name()));
        SafetensorsTensor t;
        t.name = name;

        auto dt = v.find("dtype");
        if (dt == v.end() || !dt->is_string()) return err("missing or non-string \"dtype\"");
        t.dtype_str = dt->get<std::string>();
        auto st = st_dtype_from_name(t.dtype_str);
        if (!st) return err(fmt::format("unknown dtype \"{}\"", t.dtype_str));
        t.st_dtype = *st;
        t.dtype = st_dtype_info(*st).dt;

        auto sh = v.find("shape");
        if (sh == v.end() || !sh->is_array()) return err("missing or non-array \"shape\"");
        uint64_t n_elems = 1;
        bool overflow = false;
        t.shape.reserve(sh->size());
        for (const auto& d : *sh) {
            auto u = as_u64(d);
            if (!u) return err("\"shape\" entries must be non-negative integers");
            t.shape.push_back(*u);
            overflow |= __builtin_mul_overflow(n_elems, *u, &n_elems);
        }
        uint64_t n_bytes = 0;
        overflow |= __builtin_mul_overflow(n_elems, uint64_t{st_dtype_info(*st).elem_bytes}, &n_bytes);
        if (overflow) return err(fmt::format("shape [{}] overflows 64-bit size", fmt::join(t.shape, ", ")));

        auto off = v.find("data_offsets");
        if (off == v.end() || !off->is_array() || off->size() != 2)
            return err("\"data_offsets\" must be an array [begin, end]");
        auto b = as_u64((*off)[0]), e = as_u64((*off)[1]);
        if (!b || !e) return err("\"data_offsets\" must be non-negative integers");
        t.begin = *b;
        t.end = *e;
        if (t.end < t.begin)
            return err(fmt::format("data_offsets [{}, {}] end before begin", t.begin, t.end));
        if (t.end > data_bytes)
            return err(fmt::format("data_offsets [{}, {}] outside the data section ({} bytes)", t.begin,
                                   t.end, data_bytes));
        if (t.end - t.begin != n_bytes)
            return err(fmt::format("{} [{}] needs {} bytes but data_offsets [{}, {}] span {}", t.dtype_str,
                                   fmt::join(t.shape, ", "), n_bytes, t.begin, t.end, t.end - t.begin));
        return t;
    }

    // Tensors sorted by offset must tile [0, data_bytes) exactly.
    Status check_tiling(uint64_t data_bytes) {
        auto& ts = f.tensors_;
        std::sort(ts.begin(), ts.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
            if (a.begin != b.begin) return a.begin < b.begin;
            if (a.end != b.end) return a.end < b.end;
            return a.name < b.name;
        });
        uint64_t cursor = 0;
        const SafetensorsTensor* prev = nullptr;
        for (const auto& t : ts) {
            if (t.begin < cursor)
                return make_error("{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}' (ends at {})",
                                  f.name_, t.name, t.begin, t.end, prev ? prev->name : "", cursor);
            if (t.begin > cursor)
                return make_error(
                    "{}: tensor '{}': {} unused bytes before its data_offsets [{}, {}] (gaps are "
                    "not allowed)",
                    f.name_, t.name, t.begin - cursor, t.begin, t.end);
            cursor = t.end;
            prev = &t;
        }
        if (cursor != data_bytes)
            return make_error(
                "{}: {} trailing bytes after the last tensor (data section {} bytes, tensors cover {})",
                f.name_, data_bytes - cursor, data_bytes, cursor);
        return {};
    }

    Status run(std::span<const uint8_t> bytes) {
        f.bytes_ = bytes;
        if (bytes.size() < 8)
            return make_error("{}: not a safetensors file: {} bytes, too small for the 8-byte header length",
                              f.name_, bytes.size());
        uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
        if (n > SafetensorsFile::kMaxHeaderBytes)
            return make_error("{}: header length {} is absurd (limit {}); not a safetensors file?", f.name_,
                              n, SafetensorsFile::kMaxHeaderBytes);
        if (n > bytes.size() - 8)
            return make_error("{}: header length {} runs past the end of the file ({} bytes)", f.name_, n,
                              bytes.size());
        f.header_bytes_ = n;
        const char* hb = reinterpret_cast<const char*>(bytes.data() + 8);
        // nlohmann's lexer stops at a NUL byte; valid JSON never holds one, so reject it first.
        if (std::memchr(hb, 0, n) != nullptr)
            return make_error("{}: header is not valid JSON (NUL byte)", f.name_);
        json h = json::parse(hb, hb + n, nullptr, /*allow_exceptions=*/false);
        if (h.is_discarded()) return make_error("{}: header is not valid JSON", f.name_);
        if (!h.is_object())
            return make_error("{}: header must be a JSON object, found {}", f.name_, h.type_name());

        const uint64_t data_bytes = bytes.size() - 8 - n;
        const uint8_t* data = bytes.data() + 8 + n;
        f.tensors_.reserve(h.size());
        for (const auto& [k, v] : h.items()) {
            if (k == "__metadata__") {
                PELICAN_TRY(parse_metadata(v));
                continue;
            }
            PELICAN_ASSIGN(auto t, parse_tensor(k, v, data_bytes));
            t.data = {data + t.begin, static_cast<size_t>(t.end - t.begin)};
            f.tensors_.push_back(std::move(t));
        }
        PELICAN_TRY(check_tiling(data_bytes));
        f.index_.reserve(f.tensors_.size());
        for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
        return {};
    }
};

Expected<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes, std::string name) {
    SafetensorsFile f;
    f.name_ = std::move(name);
    SafetensorsParser p{f};
    PELICAN_TRY(p.run(bytes));
    return f;
}

Expected<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
    PELICAN_ASSIGN(MappedFile m, MappedFile::open(path));
    auto bytes = m.bytes();
    PELICAN_ASSIGN(SafetensorsFile f, parse(bytes, path));
    f.file_ = std::move(m);  // the mapping's address does not change on move
    return f;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace pelican
