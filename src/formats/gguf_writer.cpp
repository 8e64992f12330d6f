// GGUF writer: encoding of metadata and tensor infos, offset layout, streamed tensor data.
#include "formats/gguf_writer.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>
#include <unordered_set>

namespace pelican {
namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

class Encoder {
public:
    std::vector<uint8_t> out;

    // resize + memcpy rather than vector::insert: GCC 12 warns falsely (-Wstringop-overflow) on
    // small inserts at -O3.
    void raw(const void* p, size_t n) {
        if (n == 0) return;
        size_t at = out.size();
        out.resize(at + n);
        std::memcpy(out.data() + at, p, n);
    }
    template <typename T>
    void put(T v) {
        raw(&v, sizeof(T));  // little-endian host
    }
    void str(std::string_view s) {
        put<uint64_t>(s.size());
        raw(s.data(), s.size());
    }
    void value(const GgufValue& v) {
        switch (v.type) {
            case GgufType::U8:
                put<uint8_t>(static_cast<uint8_t>(v.u));
                break;
            case GgufType::I8:
                put<int8_t>(static_cast<int8_t>(v.i));
                break;
            case GgufType::U16:
                put<uint16_t>(static_cast<uint16_t>(v.u));
                break;
            case GgufType::I16:
                put<int16_t>(static_cast<int16_t>(v.i));
                break;
            case GgufType::U32:
                put<uint32_t>(static_cast<uint32_t>(v.u));
                break;
            case GgufType::I32:
                put<int32_t>(static_cast<int32_t>(v.i));
                break;
            case GgufType::U64:
                put<uint64_t>(v.u);
                break;
            case GgufType::I64:
                put<int64_t>(v.i);
                break;
            case GgufType::F32:
                put<float>(static_cast<float>(v.f));
                break;
            case GgufType::F64:
                put<double>(v.f);
                break;
            case GgufType::BOOL:
                put<uint8_t>(v.u != 0 ? 1 : 0);
                break;
            case GgufType::STRING:
                str(v.str);
                break;
            case GgufType::ARRAY:
                put<uint32_t>(static_cast<uint32_t>(v.elem_type));
                put<uint64_t>(v.arr.size());
                for (const auto& e : v.arr) value(e);
                break;
        }
    }
};

// Array elements must carry the array's element type; nesting is bounded as in the reader.
Status check_value(const std::string& key, const GgufValue& v, int depth) {
    if (static_cast<uint32_t>(v.type) > static_cast<uint32_t>(GgufType::F64))
        return make_error("GGUF writer: key '{}': unknown value type {}", key, static_cast<uint32_t>(v.type));
    if (v.type != GgufType::ARRAY) return {};
    if (depth >= kGgufMaxArrayDepth)
        return make_error("GGUF writer: key '{}': arrays nested deeper than {}", key, kGgufMaxArrayDepth);
    for (const auto& e : v.arr) {
        if (e.type != v.elem_type)
            return make_error("GGUF writer: key '{}': array of {} holds a {} element", key,
                              gguf_type_name(v.elem_type), gguf_type_name(e.type));
        PELICAN_TRY(check_value(key, e, depth + 1));
    }
    return {};
}

}  // namespace

GgufValue gguf_u32(uint32_t v) {
    GgufValue x;
    x.type = GgufType::U32;
    x.u = v;
    return x;
}
GgufValue gguf_i32(int32_t v) {
    GgufValue x;
    x.type = GgufType::I32;
    x.i = v;
    return x;
}
GgufValue gguf_u64(uint64_t v) {
    GgufValue x;
    x.type = GgufType::U64;
    x.u = v;
    return x;
}
GgufValue gguf_f32(float v) {
    GgufValue x;
    x.type = GgufType::F32;
    x.f = v;
    return x;
}
GgufValue gguf_bool(bool v) {
    GgufValue x;
    x.type = GgufType::BOOL;
    x.u = v ? 1 : 0;
    return x;
}
GgufValue gguf_string(std::string v) {
    GgufValue x;
    x.type = GgufType::STRING;
    x.str = std::move(v);
    return x;
}
GgufValue gguf_array(GgufType elem_type, std::vector<GgufValue> elems) {
    GgufValue x;
    x.type = GgufType::ARRAY;
    x.elem_type = elem_type;
    x.arr = std::move(elems);
    return x;
}
GgufValue gguf_string_array(const std::vector<std::string>& v) {
    std::vector<GgufValue> elems;
    elems.reserve(v.size());
    for (const auto& s : v) elems.push_back(gguf_string(s));
    return gguf_array(GgufType::STRING, std::move(elems));
}

GgufWriter::~GgufWriter() {
    if (out_ && !file_.is_open()) std::fclose(out_);  // begin_fd's stream; file_ removes its temporary
}

Status GgufWriter::add_kv(std::string key, GgufValue value) {
    if (out_ || !path_.empty()) return make_error("GGUF writer: add_kv('{}') after begin()", key);
    if (key.empty()) return make_error("GGUF writer: empty key");
    for (const auto& kv : kvs_)
        if (kv.key == key) return make_error("GGUF writer: duplicate key '{}'", key);
    PELICAN_TRY(check_value(key, value, 0));
    if (key == "general.alignment") {
        if (value.type != GgufType::U32 || value.u == 0 || (value.u & (value.u - 1)) != 0)
            return make_error("GGUF writer: general.alignment must be a power-of-two u32");
        alignment_ = static_cast<uint32_t>(value.u);
        relayout();
    }
    kvs_.push_back({std::move(key), std::move(value)});
    return {};
}

Status GgufWriter::add_tensor(std::string name, DType type, std::vector<uint64_t> dims) {
    if (out_ || !path_.empty()) return make_error("GGUF writer: add_tensor('{}') after begin()", name);
    if (name.empty()) return make_error("GGUF writer: empty tensor name");
    for (const auto& t : tensors_)
        if (t.name == name) return make_error("GGUF writer: duplicate tensor '{}'", name);
    if (dims.size() > 4) return make_error("GGUF writer: tensor '{}' has {} dims (max 4)", name, dims.size());
    const auto& info = dtype_info(type);
    if (!info.in_gguf) return make_error("GGUF writer: tensor '{}': type {} has no GGUF id", name, info.name);
    uint64_t n = 1;
    for (uint64_t d : dims) {
        if (d > static_cast<uint64_t>(INT64_MAX) || (d != 0 && n > static_cast<uint64_t>(INT64_MAX) / d))
            return make_error("GGUF writer: tensor '{}': element count overflows", name);
        n *= d;
    }
    uint64_t row = dims.empty() ? 1 : dims[0];
    auto row_bytes = dtype_row_bytes(type, row);
    if (!row_bytes)
        return make_error("GGUF writer: tensor '{}': dims[0] = {} is not a whole number of {} blocks ({})",
                          name, row, info.name, info.block_elems);
    uint64_t n_rows = row == 0 ? 0 : n / row;
    if (n_rows != 0 && *row_bytes > UINT64_MAX / n_rows)
        return make_error("GGUF writer: tensor '{}': byte size overflows", name);
    GgufTensorInfo t;
    t.name = std::move(name);
    t.type = type;
    t.dims = std::move(dims);
    t.n_bytes = *row_bytes * n_rows;
    tensors_.push_back(std::move(t));
    relayout();
    return {};
}

void GgufWriter::relayout() {
    uint64_t off = 0;
    for (auto& t : tensors_) {
        t.offset = align_up(off, alignment_);
        off = t.offset + t.n_bytes;
    }
    data_end_ = off;
}

std::vector<uint8_t> GgufWriter::encode_header() const {
    Encoder e;
    e.raw("GGUF", 4);
    e.put<uint32_t>(version_);
    e.put<uint64_t>(tensors_.size());
    e.put<uint64_t>(kvs_.size());
    for (const auto& kv : kvs_) {
        e.str(kv.key);
        e.put<uint32_t>(static_cast<uint32_t>(kv.value.type));
        e.value(kv.value);
    }
    for (const auto& t : tensors_) {
        e.str(t.name);
        e.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
        for (uint64_t d : t.dims) e.put<uint64_t>(d);
        e.put<uint32_t>(static_cast<uint32_t>(t.type));
        e.put<uint64_t>(t.offset);
    }
    return std::move(e.out);
}

uint64_t GgufWriter::data_offset() const { return align_up(encode_header().size(), alignment_); }

uint64_t GgufWriter::file_size() const {
    if (tensors_.empty()) return encode_header().size();
    return data_offset() + align_up(data_end_, alignment_);
}

Status GgufWriter::fail_stream(Error e) {
    if (out_ && !file_.is_open()) std::fclose(out_);
    out_ = nullptr;
    file_.discard();
    return e;
}

Status GgufWriter::put(std::span<const uint8_t> bytes) {
    if (bytes.empty()) return {};
    if (std::fwrite(bytes.data(), 1, bytes.size(), out_) != bytes.size())
        return fail_stream(make_error("cannot write '{}': {}", path_, std::strerror(errno)));
    return {};
}

Status GgufWriter::put_zeros(uint64_t n) {
    static const uint8_t zeros[256] = {};
    while (n > 0) {
        size_t k = n < sizeof zeros ? static_cast<size_t>(n) : sizeof zeros;
        PELICAN_TRY(put({zeros, k}));
        n -= k;
    }
    return {};
}

Status GgufWriter::write_header() {
    std::vector<uint8_t> header = encode_header();
    PELICAN_TRY(put(header));
    if (!tensors_.empty()) PELICAN_TRY(put_zeros(align_up(header.size(), alignment_) - header.size()));
    cur_ = 0;
    cur_written_ = 0;
    return {};
}

Status GgufWriter::begin(const std::string& path, bool force) {
    if (out_ || !path_.empty()) return make_error("GGUF writer: begin() called twice");
    if (version_ != 2 && version_ != 3) return make_error("GGUF writer: cannot write version {}", version_);
    path_ = path;
    PELICAN_ASSIGN(file_, OutputFile::create(path, force));
    out_ = file_.stream();
    return write_header();
}

Status GgufWriter::begin_fd(int fd, const std::string& name) {
    if (out_ || !path_.empty()) return make_error("GGUF writer: begin() called twice");
    if (version_ != 2 && version_ != 3) return make_error("GGUF writer: cannot write version {}", version_);
    const int dup_fd = ::dup(fd);
    if (dup_fd < 0) return make_error("cannot write '{}': {}", name, std::strerror(errno));
    out_ = ::fdopen(dup_fd, "wb");
    if (!out_) {
        const int e = errno;
        ::close(dup_fd);
        return make_error("cannot write '{}': {}", name, std::strerror(e));
    }
    path_ = name;  // file_ stays closed: no rename, nothing to remove
    return write_header();
}

Status GgufWriter::write_tensor_data(std::span<const uint8_t> chunk) {
    if (!out_) return make_error("GGUF writer: write_tensor_data() without begin()");
    while (!chunk.empty()) {
        if (cur_ >= tensors_.size())
            return fail_stream(make_error("GGUF writer '{}': {} bytes of tensor data beyond the last tensor",
                                          path_, chunk.size()));
        const auto& t = tensors_[cur_];
        uint64_t want = t.n_bytes - cur_written_;
        size_t k = chunk.size() < want ? chunk.size() : static_cast<size_t>(want);
        PELICAN_TRY(put(chunk.first(k)));
        chunk = chunk.subspan(k);
        cur_written_ += k;
        if (cur_written_ == t.n_bytes) {
            PELICAN_TRY(put_zeros(align_up(t.n_bytes, alignment_) - t.n_bytes));
            ++cur_;
            cur_written_ = 0;
        }
    }
    return {};
}

Status GgufWriter::finish() {
    if (!out_) return make_error("GGUF writer: finish() without begin()");
    // Zero-byte tensors at the end need no data call; skip them.
    while (cur_ < tensors_.size() && tensors_[cur_].n_bytes == 0 && cur_written_ == 0) ++cur_;
    if (cur_ < tensors_.size())
        return fail_stream(make_error("GGUF writer '{}': tensor '{}' got {} of {} bytes", path_,
                                      tensors_[cur_].name, cur_written_, tensors_[cur_].n_bytes));
    if (file_.is_open()) {
        out_ = nullptr;
        return file_.commit();  // flush, fsync, rename; removes the temporary on failure
    }
    // begin_fd: written in place.
    bool bad = std::fflush(out_) != 0 || ::fsync(fileno(out_)) != 0;
    bad |= std::fclose(out_) != 0;
    out_ = nullptr;
    if (bad) return make_error("cannot write '{}': {}", path_, std::strerror(errno));
    return {};
}

Expected<std::vector<uint8_t>> GgufWriter::to_bytes(std::span<const std::span<const uint8_t>> data) const {
    if (version_ != 2 && version_ != 3) return make_error("GGUF writer: cannot write version {}", version_);
    if (data.size() != tensors_.size())
        return make_error("GGUF writer: {} data spans for {} tensors", data.size(), tensors_.size());
    for (size_t i = 0; i < data.size(); ++i)
        if (data[i].size() != tensors_[i].n_bytes)
            return make_error("GGUF writer: tensor '{}' needs {} bytes, got {}", tensors_[i].name,
                              tensors_[i].n_bytes, data[i].size());
    std::vector<uint8_t> out = encode_header();
    if (tensors_.empty()) return out;
    uint64_t base = align_up(out.size(), alignment_);
    out.resize(base + align_up(data_end_, alignment_), 0);
    for (size_t i = 0; i < data.size(); ++i)
        if (!data[i].empty())
            std::memcpy(out.data() + base + tensors_[i].offset, data[i].data(), data[i].size());
    return out;
}

namespace {

Status fill_writer(const GgufFile& f, GgufWriter& w) {
    for (const auto& kv : f.kvs()) PELICAN_TRY(w.add_kv(kv.key, kv.value));
    for (const auto& t : f.tensors()) PELICAN_TRY(w.add_tensor(t.name, t.type, t.dims));
    return {};
}

}  // namespace

Status write_gguf(const GgufFile& f, const std::string& path, bool force) {
    GgufWriter w(f.version());
    PELICAN_TRY(fill_writer(f, w));
    PELICAN_TRY(w.begin(path, force));
    for (const auto& t : f.tensors()) PELICAN_TRY(w.write_tensor_data(f.tensor_data(t)));
    return w.finish();
}

Expected<std::vector<uint8_t>> gguf_to_bytes(const GgufFile& f) {
    GgufWriter w(f.version());
    PELICAN_TRY(fill_writer(f, w));
    std::vector<std::span<const uint8_t>> data;
    for (const auto& t : f.tensors()) data.push_back(f.tensor_data(t));
    return w.to_bytes(data);
}

}  // namespace pelican
