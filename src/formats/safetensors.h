// safetensors files: u64 little-endian header length N, N bytes of JSON header, tensor data.
// The header maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the data section) plus an optional "__metadata__" string->string map.
//
// Validation follows the reference library (huggingface/safetensors, Metadata::validate): tensors
// sorted by offset must tile the data section exactly — no overlaps, no gaps, no trailing bytes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"
#include "core/status.h"

namespace pelican {

// Element types of the format. Enum order is the reference library's alignment order, which its
// writer (and ours) uses to sort tensors: larger alignment first.
enum class StDType : uint8_t {
    BOOL,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    F64,
    I64,
    U64,
};

struct StDTypeInfo {
    StDType type;
    std::string_view name;    // as spelled in the header: "BF16"
    uint32_t elem_bytes;      // bytes per element
    std::optional<DType> dt;  // pelican's DType where one exists (none for BOOL, U8, F8_E5M2, ...)
};

const StDTypeInfo& st_dtype_info(StDType t);
// Parses a header dtype string (exact, case-sensitive as the format requires).
std::optional<StDType> st_dtype_from_name(std::string_view name);
// The safetensors dtype for a pelican element type (nullopt for block-quantized types).
std::optional<StDType> st_dtype_from_dtype(DType t);

struct SafetensorsTensor {
    std::string name;
    StDType st_dtype = StDType::F32;
    std::string dtype_str;        // raw header string, e.g. "BF16"
    std::optional<DType> dtype;   // pelican type where one exists
    std::vector<uint64_t> shape;  // torch order: a linear weight is [out, in]
    uint64_t begin = 0, end = 0;  // byte offsets relative to the data section
    std::span<const uint8_t> data;

    uint64_t n_elements() const;
    uint64_t n_bytes() const { return end - begin; }
};

class SafetensorsFile {
public:
    // Largest header the reference library accepts.
    static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

    // Maps and validates a file. Errors name the file (and the tensor where one is at fault).
    static Expected<SafetensorsFile> open(const std::string& path);
    // Parses bytes owned by the caller (they must outlive the result). Used by tests and the fuzzer.
    static Expected<SafetensorsFile> parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

    const std::string& name() const { return name_; }
    // Tensors in data-offset order.
    const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
    const SafetensorsTensor* find(std::string_view name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    bool has_metadata() const { return has_metadata_; }
    uint64_t header_bytes() const { return header_bytes_; }  // N, the JSON length (with padding)
    uint64_t data_offset() const { return 8 + header_bytes_; }
    uint64_t file_bytes() const { return bytes_.size(); }
    // The file's mapping (empty when parsed from caller memory): see MappedFile::release_pages.
    const MappedFile& mapping() const { return file_; }

private:
    MappedFile file_;  // empty when parsed from caller memory
    std::span<const uint8_t> bytes_;
    std::string name_;
    uint64_t header_bytes_ = 0;
    std::vector<SafetensorsTensor> tensors_;
    std::unordered_map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;
    bool has_metadata_ = false;

    friend struct SafetensorsParser;
};

// ---- writer ----------------------------------------------------------------------------------

struct SafetensorsWriteTensor {
    std::string name;
    StDType dtype = StDType::F32;
    std::vector<uint64_t> shape;    // torch order
    std::span<const uint8_t> data;  // exactly n_elements * elem_bytes, caller-owned
};

// A write request for an already-read tensor (copies name, dtype and shape; borrows the bytes).
SafetensorsWriteTensor to_write_tensor(const SafetensorsTensor& t);

// Writes like the reference library: tensors sorted by (alignment desc, name), compact JSON header
// with "__metadata__" first (keys sorted), padded with spaces to a multiple of 8 bytes.
// Metadata is written only when non-empty or when always_write_metadata is set.
struct SafetensorsWriteOptions {
    bool always_write_metadata = false;
    bool force = true;  // safetensors_write: replace an existing file (core/output_file.h rules)
};

// Serializes to memory (small files, tests).
Expected<std::vector<uint8_t>> safetensors_serialize(std::vector<SafetensorsWriteTensor> tensors,
                                                     const std::map<std::string, std::string>& metadata,
                                                     SafetensorsWriteOptions opts = {});
// Streams to path through a unique temporary next to it, renamed on success (never leaves a half file).
// The path follows core/output_file.h: a new file, or (opts.force) a writable regular file, whose mode
// is kept; never a folder, link, device or FIFO.
Status safetensors_write(const std::string& path, std::vector<SafetensorsWriteTensor> tensors,
                         const std::map<std::string, std::string>& metadata,
                         SafetensorsWriteOptions opts = {});

}  // namespace pelican
