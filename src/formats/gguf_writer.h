// GGUF writer. Metadata and tensor infos are collected first; tensor bytes are then streamed in
// tensor order (any chunking), so a multi-GB model never has to sit in one buffer:
//
//   GgufWriter w;
//   w.add_kv("general.architecture", gguf_string("llama"));
//   w.add_tensor("token_embd.weight", DType::Q4_K, {4096, 32000});
//   w.begin("out.gguf", force);          // writes header, KVs, tensor infos, padding to a temporary
//   w.write_tensor_data(chunk) ...       // bytes of tensor 0, then tensor 1, ...
//   w.finish();                          // pads, flushes, fsyncs, renames onto out.gguf
//
// The output follows core/output_file.h: a new file or (force) a writable regular file, written through a
// unique temporary next to it that is removed on any error.
//
// Layout: tensor i starts at align(end of tensor i-1), the data section at align(end of tensor infos),
// alignment from general.alignment (default 32); zero padding follows every tensor. A file with no
// tensors ends right after its metadata (as llama.cpp's vocab-only files do).
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "core/output_file.h"
#include "formats/gguf.h"

namespace pelican {

// Value constructors for add_kv.
GgufValue gguf_u32(uint32_t v);
GgufValue gguf_i32(int32_t v);
GgufValue gguf_u64(uint64_t v);
GgufValue gguf_f32(float v);
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
GgufValue gguf_array(GgufType elem_type, std::vector<GgufValue> elems);
GgufValue gguf_string_array(const std::vector<std::string>& v);

class GgufWriter {
public:
    explicit GgufWriter(uint32_t version = 3) : version_(version) {}
    GgufWriter(const GgufWriter&) = delete;
    GgufWriter& operator=(const GgufWriter&) = delete;
    ~GgufWriter();  // removes the temp file when finish() was not reached

    // Errors: duplicate key, empty key, array elements whose type differs from elem_type, arrays
    // nested deeper than kGgufMaxArrayDepth, general.alignment not a power-of-two u32.
    Status add_kv(std::string key, GgufValue value);
    // Errors: duplicate or empty name, more than 4 dims, type not in GGUF, dims[0] not a whole
    // number of blocks, size overflow.
    Status add_tensor(std::string name, DType type, std::vector<uint64_t> dims);

    uint32_t alignment() const { return alignment_; }
    const std::vector<GgufKV>& kvs() const { return kvs_; }
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // offsets assigned
    uint64_t data_offset() const;  // absolute offset of the data section
    uint64_t file_size() const;

    // Errors: the output rules of check_output_path (force: replace an existing file).
    Status begin(const std::string& path, bool force = false);
    // As begin(), but writes straight into the open descriptor fd (a duplicate of it, from offset 0;
    // e.g. a memfd), without the temporary file and rename; name is for messages only.
    Status begin_fd(int fd, const std::string& name);
    Status write_tensor_data(std::span<const uint8_t> chunk);
    Status finish();

    // The whole file in memory; data[i] must hold exactly tensors()[i].n_bytes bytes.
    Expected<std::vector<uint8_t>> to_bytes(std::span<const std::span<const uint8_t>> data) const;

private:
    std::vector<uint8_t> encode_header() const;  // magic .. end of tensor infos, unpadded
    void relayout();                             // recomputes offsets (alignment changed)
    Status put(std::span<const uint8_t> bytes);
    Status put_zeros(uint64_t n);
    Status fail_stream(Error e);

    uint32_t version_;
    uint32_t alignment_ = kGgufDefaultAlignment;
    std::vector<GgufKV> kvs_;
    std::vector<GgufTensorInfo> tensors_;
    uint64_t data_end_ = 0;  // end of the last tensor, relative to the data section (unpadded)

    // Streaming state.
    Status write_header();      // header, KVs, tensor infos and padding to the data section (begin*)
    OutputFile file_;           // begin(): the temporary, renamed by finish()
    std::FILE* out_ = nullptr;  // file_'s stream, or (begin_fd) a stream on a duplicate of the fd
    std::string path_;
    size_t cur_ = 0;            // tensor being written
    uint64_t cur_written_ = 0;  // bytes of tensors_[cur_] written so far
};

// Writes a read file back out: same version, KVs, tensor order and bytes. Files laid out as this
// writer lays them out (llama.cpp's layout) come back byte-identical. force: as GgufWriter::begin.
Status write_gguf(const GgufFile& f, const std::string& path, bool force = false);
Expected<std::vector<uint8_t>> gguf_to_bytes(const GgufFile& f);

}  // namespace pelican
