// GGUF parser: header, metadata, tensor infos, data section layout. Every length and count is
// checked against the bytes that remain BEFORE anything is allocated, so corrupt or hostile files
// produce an Error naming the file, the byte offset and the key or tensor involved.
#include <algorithm>
#include <cstring>
#include <string_view>
#include <unordered_set>

#include "formats/gguf.h"

namespace pelican {
namespace {

constexpr uint32_t kMaxTensorDims = 4;
// Upper bound on metadata values (array elements included): bounds memory for pathological
// files whose arrays are huge but tiny per element (one GgufValue is ~100 bytes); real files
// carry well under 1M values (vocab + merges + token types).
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 24;
// Smallest tensor info on disk: name length (8) + n_dims (4) + type (4) + offset (8).
constexpr uint64_t kMinTensorInfoBytes = 24;
// Smallest KV on disk: key length (8) + value type (4) + one byte of value.
constexpr uint64_t kMinKvBytes = 13;

size_t min_value_bytes(GgufType t) {
    if (t == GgufType::STRING) return 8;
    if (t == GgufType::ARRAY) return 12;  // elem type (4) + count (8)
    return gguf_scalar_size(t);
}

// Names quoted in messages are clipped so a corrupt 1 MB "name" does not flood the terminal.
std::string_view clip(std::string_view s) { return s.substr(0, 120); }

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

template <typename T>
T load_le(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);  // host is little-endian (x86-64, aarch64)
    return v;
}

}  // namespace

struct GgufParser {
    std::span<const uint8_t> b;
    const std::string& file;
    GgufFile& out;
    size_t pos = 0;
    uint64_t values_left = kMaxMetadataValues;
    std::string context;           // "key 'x'" or "tensor 'y'" for messages
    std::vector<size_t> info_pos;  // file offset of each tensor info

    template <typename... Args>
    Error fail(size_t at, fmt::format_string<Args...> f, Args&&... args) const {
        std::string msg = fmt::format(f, std::forward<Args>(args)...);
        if (context.empty()) return make_error("{}: at byte {}: {}", file, at, msg);
        return make_error("{}: at byte {}: {}: {}", file, at, context, msg);
    }

    uint64_t remaining() const { return b.size() - pos; }

    template <typename T>
    Expected<T> read(const char* what) {
        if (remaining() < sizeof(T))
            return fail(pos, "truncated: {} needs {} bytes, {} left", what, sizeof(T), remaining());
        T v = load_le<T>(b.data() + pos);
        pos += sizeof(T);
        return v;
    }

    // A u64 length followed by that many bytes. Returns a view into the file.
    Expected<std::string_view> read_str(const char* what) {
        size_t at = pos;
        PELICAN_ASSIGN(uint64_t n, read<uint64_t>(what));
        if (n > remaining())
            return fail(at, "{} length {} runs past the end of the file ({} bytes left)", what, n,
                        remaining());
        std::string_view s(reinterpret_cast<const char*>(b.data() + pos), n);
        pos += n;
        return s;
    }

    Status read_scalar(GgufType t, GgufValue& v) {
        const uint8_t* p = b.data() + pos;
        size_t n = gguf_scalar_size(t);
        if (remaining() < n)
            return fail(pos, "truncated: {} value needs {} bytes, {} left", gguf_type_name(t), n,
                        remaining());
        switch (t) {
            case GgufType::U8:
                v.u = p[0];
                break;
            case GgufType::I8:
                v.i = static_cast<int8_t>(p[0]);
                break;
            case GgufType::U16:
                v.u = load_le<uint16_t>(p);
                break;
            case GgufType::I16:
                v.i = load_le<int16_t>(p);
                break;
            case GgufType::U32:
                v.u = load_le<uint32_t>(p);
                break;
            case GgufType::I32:
                v.i = load_le<int32_t>(p);
                break;
            case GgufType::U64:
                v.u = load_le<uint64_t>(p);
                break;
            case GgufType::I64:
                v.i = load_le<int64_t>(p);
                break;
            case GgufType::F32:
                v.f = load_le<float>(p);
                break;
            case GgufType::F64:
                v.f = load_le<double>(p);
                break;
            case GgufType::BOOL:
                if (p[0] > 1) return fail(pos, "bool value {} is neither 0 nor 1", p[0]);
                v.u = p[0];
                break;
            default:
                return fail(pos, "internal: not a scalar type");
        }
        pos += n;
        return {};
    }

    Status read_value(GgufType t, int depth, GgufValue& v) {
        v.type = t;
        if (t == GgufType::STRING) {
            PELICAN_ASSIGN(std::string_view s, read_str("string"));
            v.str.assign(s);
            return {};
        }
        if (t != GgufType::ARRAY) return read_scalar(t, v);

        size_t at = pos;
        PELICAN_ASSIGN(uint32_t et, read<uint32_t>("array element type"));
        if (!valid_type(et)) return fail(at, "unknown array element type {}", et);
        v.elem_type = static_cast<GgufType>(et);
        if (v.elem_type == GgufType::ARRAY && depth + 1 >= kGgufMaxArrayDepth)
            return fail(at, "arrays nested deeper than {}", kGgufMaxArrayDepth);
        at = pos;
        PELICAN_ASSIGN(uint64_t count, read<uint64_t>("array length"));
        uint64_t min = min_value_bytes(v.elem_type);
        if (count > remaining() / min)
            return fail(at, "array of {} {} elements runs past the end of the file ({} bytes left)", count,
                        gguf_type_name(v.elem_type), remaining());
        if (count > values_left)
            return fail(at, "too many metadata values (array of {}; limit {} in all)", count,
                        kMaxMetadataValues);
        values_left -= count;
        v.arr.resize(count);
        for (auto& e : v.arr) PELICAN_TRY(read_value(v.elem_type, depth + 1, e));
        return {};
    }

    Status read_kvs(uint64_t n_kv) {
        std::unordered_set<std::string_view> seen;
        out.kvs_.reserve(n_kv);
        for (uint64_t k = 0; k < n_kv; ++k) {
            context.clear();
            size_t at = pos;
            PELICAN_ASSIGN(std::string_view key, read_str("key"));
            context = fmt::format("key '{}'", clip(key));
            if (key.empty()) return fail(at, "empty key");
            if (!seen.insert(key).second) return fail(at, "duplicate key");
            at = pos;
            PELICAN_ASSIGN(uint32_t t, read<uint32_t>("value type"));
            if (!valid_type(t)) return fail(at, "unknown value type {}", t);
            GgufKV kv;
            kv.key.assign(key);
            PELICAN_TRY(read_value(static_cast<GgufType>(t), 0, kv.value));
            if (key == "general.alignment") PELICAN_TRY(check_alignment(at, kv.value));
            out.kvs_.push_back(std::move(kv));
        }
        context.clear();
        return {};
    }

    Status check_alignment(size_t at, const GgufValue& v) {
        if (v.type != GgufType::U32) return fail(at, "must be u32, found {}", gguf_type_name(v.type));
        if (v.u == 0 || (v.u & (v.u - 1)) != 0) return fail(at, "alignment {} is not a power of two", v.u);
        out.alignment_ = static_cast<uint32_t>(v.u);
        return {};
    }

    Status read_tensor_info(GgufTensorInfo& t, std::unordered_set<std::string_view>& seen) {
        context.clear();
        size_t at = pos;
        PELICAN_ASSIGN(std::string_view name, read_str("tensor name"));
        context = fmt::format("tensor '{}'", clip(name));
        if (name.empty()) return fail(at, "empty tensor name");
        if (!seen.insert(name).second) return fail(at, "duplicate tensor name");
        t.name.assign(name);
        at = pos;
        PELICAN_ASSIGN(uint32_t n_dims, read<uint32_t>("n_dims"));
        if (n_dims > kMaxTensorDims) return fail(at, "n_dims {} exceeds {}", n_dims, kMaxTensorDims);
        t.dims.resize(n_dims);
        uint64_t n_elems = 1;
        for (auto& d : t.dims) {
            at = pos;
            PELICAN_ASSIGN(d, read<uint64_t>("dimension"));
            if (d > static_cast<uint64_t>(INT64_MAX)) return fail(at, "dimension {} is too large", d);
            if (d != 0 && n_elems > static_cast<uint64_t>(INT64_MAX) / d)
                return fail(at, "element count overflows (dims {})", fmt::join(t.dims, " x "));
            n_elems *= d;
        }
        at = pos;
        PELICAN_ASSIGN(uint32_t ggml_type, read<uint32_t>("ggml type"));
        auto dt = dtype_from_ggml(ggml_type);
        if (!dt) return fail(at, "unknown ggml type {}", ggml_type);
        t.type = *dt;
        PELICAN_ASSIGN(t.offset, read<uint64_t>("data offset"));

        const auto& info = dtype_info(t.type);
        uint64_t row = t.dims.empty() ? 1 : t.dims[0];
        auto row_bytes = dtype_row_bytes(t.type, row);
        if (!row_bytes)
            return fail(at, "dims[0] = {} is not a whole number of {} blocks ({} elements each)", row,
                        info.name, info.block_elems);
        uint64_t n_rows = row == 0 ? 0 : n_elems / row;
        if (n_rows != 0 && *row_bytes > UINT64_MAX / n_rows) return fail(at, "byte size overflows");
        t.n_bytes = *row_bytes * n_rows;
        return {};
    }

    Status read_tensor_infos(uint64_t n_tensors) {
        std::unordered_set<std::string_view> seen;
        out.tensors_.resize(n_tensors);
        info_pos.resize(n_tensors);
        for (size_t i = 0; i < n_tensors; ++i) {
            info_pos[i] = pos;
            PELICAN_TRY(read_tensor_info(out.tensors_[i], seen));
        }
        context.clear();
        return {};
    }

    // Offsets must be aligned, inside the file, and tensors must not overlap.
    Status check_tensor_data() {
        const uint64_t a = out.alignment_;
        uint64_t data = pos + (a - pos % a) % a;
        out.data_offset_ = data;
        if (out.tensors_.empty()) return {};
        if (data > b.size())
            return make_error("{}: data section would start at byte {}, past the end of the file ({} bytes)",
                              file, data, b.size());
        uint64_t avail = b.size() - data;
        for (size_t i = 0; i < out.tensors_.size(); ++i) {
            const auto& t = out.tensors_[i];
            context = fmt::format("tensor '{}'", clip(t.name));
            if (t.offset % a != 0)
                return fail(info_pos[i], "data offset {} is not a multiple of the alignment {}", t.offset, a);
            if (t.offset > avail || t.n_bytes > avail - t.offset)
                return fail(
                    info_pos[i],
                    "data [{}, +{}) runs past the end of the file (data section: {} bytes from byte {})",
                    t.offset, t.n_bytes, avail, data);
        }
        context.clear();
        std::vector<const GgufTensorInfo*> by_offset;
        by_offset.reserve(out.tensors_.size());
        for (const auto& t : out.tensors_)
            if (t.n_bytes > 0) by_offset.push_back(&t);
        std::sort(by_offset.begin(), by_offset.end(),
                  [](const auto* x, const auto* y) { return x->offset < y->offset; });
        for (size_t i = 1; i < by_offset.size(); ++i) {
            const auto* p = by_offset[i - 1];
            const auto* q = by_offset[i];
            if (p->offset + p->n_bytes > q->offset)
                return make_error(
                    "{}: at byte {}: tensor '{}' (data [{}, {})) overlaps tensor '{}' (data [{}, {}))", file,
                    data + q->offset, clip(q->name), q->offset, q->offset + q->n_bytes, clip(p->name),
                    p->offset, p->offset + p->n_bytes);
        }
        return {};
    }

    Status run() {
        if (b.size() < 4 || std::memcmp(b.data(), "GGUF", 4) != 0)
            return make_error("{}: not a GGUF file (bad magic)", file);
        pos = 4;
        PELICAN_ASSIGN(uint32_t version, read<uint32_t>("version"));
        if (version != 2 && version != 3) {
            if (version > 0xffff)
                return fail(4, "unsupported GGUF version {:#x} (a big-endian file?)", version);
            return fail(4, "unsupported GGUF version {} (only 2 and 3 are read)", version);
        }
        out.version_ = version;
        size_t at = pos;
        PELICAN_ASSIGN(uint64_t n_tensors, read<uint64_t>("tensor count"));
        size_t at_kv = pos;
        PELICAN_ASSIGN(uint64_t n_kv, read<uint64_t>("kv count"));
        if (n_tensors > remaining() / kMinTensorInfoBytes)
            return fail(at, "tensor count {} cannot fit in the {} remaining bytes", n_tensors, remaining());
        if (n_kv > remaining() / kMinKvBytes)
            return fail(at_kv, "kv count {} cannot fit in the {} remaining bytes", n_kv, remaining());
        PELICAN_TRY(read_kvs(n_kv));
        if (n_tensors > remaining() / kMinTensorInfoBytes)
            return fail(at, "tensor count {} cannot fit in the {} remaining bytes", n_tensors, remaining());
        PELICAN_TRY(read_tensor_infos(n_tensors));
        return check_tensor_data();
    }
};

Expected<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
    GgufFile f;
    f.bytes_ = bytes;
    f.name_ = std::move(name);
    GgufParser p{bytes, f.name_, f};
    PELICAN_TRY(p.run());
    f.kv_index_.resize(f.kvs_.size());
    for (size_t i = 0; i < f.kv_index_.size(); ++i) f.kv_index_[i] = i;
    std::sort(f.kv_index_.begin(), f.kv_index_.end(),
              [&](size_t x, size_t y) { return f.kvs_[x].key < f.kvs_[y].key; });
    f.tensor_index_.resize(f.tensors_.size());
    for (size_t i = 0; i < f.tensor_index_.size(); ++i) f.tensor_index_[i] = i;
    std::sort(f.tensor_index_.begin(), f.tensor_index_.end(),
              [&](size_t x, size_t y) { return f.tensors_[x].name < f.tensors_[y].name; });
    return f;
}

Expected<GgufFile> GgufFile::open(const std::string& path) {
    PELICAN_ASSIGN(MappedFile m, MappedFile::open(path));
    PELICAN_ASSIGN(GgufFile f, parse(m.bytes(), path));
    f.file_ = std::move(m);  // the mapping's address (and so bytes_) is unchanged by the move
    return f;
}

}  // namespace pelican
