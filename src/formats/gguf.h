// GGUF v3 (and v2) files: metadata key/values, tensor infos, data section.
// Reader validates everything (see gguf_reader.cpp); writer reproduces a read file byte for byte.
// Layout reference: ../shared/research/formats-architectures.md §4.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"
#include "core/status.h"

namespace pelican {

// Default data alignment when general.alignment is absent.
inline constexpr uint32_t kGgufDefaultAlignment = 32;
// Deepest array nesting the reader accepts (an array of arrays is depth 2).
inline constexpr int kGgufMaxArrayDepth = 8;

// GGUF metadata value types (ids as in the file).
enum class GgufType : uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
};

// One metadata value. Scalars live in the union-like fields; arrays hold their element type
// and elements (arrays may nest).
struct GgufValue {
    GgufType type = GgufType::U8;
    uint64_t u = 0;                     // U8/U16/U32/U64/BOOL
    int64_t i = 0;                      // I8/I16/I32/I64
    double f = 0;                       // F32/F64 (F32 stored exactly as its float value)
    std::string str;                    // STRING
    GgufType elem_type = GgufType::U8;  // ARRAY
    std::vector<GgufValue> arr;         // ARRAY

    std::optional<int64_t> as_int() const;   // any integer or bool type
    std::optional<double> as_float() const;  // F32/F64 or any integer
};

// "u32", "string", "array"...; "?" for ids outside the enum.
std::string_view gguf_type_name(GgufType t);
// Bytes of one scalar of type t in the file; 0 for STRING/ARRAY and unknown ids.
size_t gguf_scalar_size(GgufType t);

struct GgufKV {
    std::string key;
    GgufValue value;
};

struct GgufTensorInfo {
    std::string name;
    std::vector<uint64_t> dims;  // dims[0] varies fastest (GGUF order): a torch [out,in] is {in,out}
    DType type = DType::F32;
    uint64_t offset = 0;   // relative to the data section
    uint64_t n_bytes = 0;  // computed from dims and type
    uint64_t n_elements() const;
};

class GgufFile {
public:
    // Maps and validates a file. Errors name the file and what is wrong.
    static Expected<GgufFile> open(const std::string& path);
    // Parses bytes owned by the caller (they must outlive the GgufFile). Used by the fuzzer.
    static Expected<GgufFile> parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    const std::vector<GgufKV>& kvs() const { return kvs_; }
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    uint64_t data_offset() const { return data_offset_; }  // absolute file offset of the data section

    const GgufValue* find(std::string_view key) const;
    std::optional<std::string> get_string(std::string_view key) const;
    std::optional<int64_t> get_int(std::string_view key) const;
    std::optional<double> get_float(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    // Array accessors return nullopt when the key is missing or of another element type.
    std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
    std::optional<std::vector<float>> get_f32_array(std::string_view key) const;
    std::optional<std::vector<int32_t>> get_i32_array(std::string_view key) const;

    const GgufTensorInfo* find_tensor(std::string_view name) const;
    // Bytes of one tensor inside the mapped file (empty if t does not fit this file).
    std::span<const uint8_t> tensor_data(const GgufTensorInfo& t) const;

    const std::string& name() const { return name_; }          // path, or the name given to parse()
    std::span<const uint8_t> bytes() const { return bytes_; }  // the whole file
    // The file's mapping (empty when parsed from caller memory): see MappedFile::release_pages.
    const MappedFile& mapping() const { return file_; }

private:
    MappedFile file_;                 // empty when parsed from caller memory
    std::span<const uint8_t> bytes_;  // the whole file
    std::string name_;
    uint32_t version_ = 3;
    uint32_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<GgufKV> kvs_;
    std::vector<GgufTensorInfo> tensors_;
    std::vector<size_t> kv_index_;      // indices into kvs_, sorted by key (for find)
    std::vector<size_t> tensor_index_;  // indices into tensors_, sorted by name

    friend struct GgufParser;
};

}  // namespace pelican
