// Read-only memory-mapped file. Move-only owner of the mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "core/status.h"

namespace pelican {

class MappedFile {
public:
    // Maps the whole file read-only. Empty files map to an empty span.
    static Expected<MappedFile> open(const std::string& path);

    MappedFile() = default;
    MappedFile(MappedFile&& o) noexcept;
    MappedFile& operator=(MappedFile&& o) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    std::span<const uint8_t> bytes() const { return {data_, size_}; }
    const std::string& path() const { return path_; }

    // Drops the whole pages inside `range` (clamped to this mapping; bytes outside it, or an empty
    // mapping, are ignored) from this process' resident set: for bytes a loader has copied and will
    // not read again, so they are not held twice. The contents do not change: the mapping is
    // private and read-only, so no page holds private data, and a later read faults the page back
    // in from the file (from the OS page cache, which keeps it while memory allows). Pages only
    // partly inside `range` are kept (a neighbour may still be read). Returns the bytes advised
    // (0 when nothing was or the advice was refused, or where there is no madvise).
    size_t release_pages(std::span<const uint8_t> range) const;

private:
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    std::string path_;
};

// Whole file as text (a regular file, pipe or device). Errors: cannot open, a directory, read
// errors, more than max_bytes (a runaway input such as /dev/zero stops there).
inline constexpr size_t kMaxTextFileBytes = size_t{256} << 20;
Expected<std::string> read_text_file(const std::string& path, size_t max_bytes = kMaxTextFileBytes);
// The same from an open stream (stdin); `name` names it in errors.
Expected<std::string> read_text_stream(std::FILE* f, const std::string& name, size_t max_bytes);
// Writes bytes to path atomically (a unique temporary next to it, then rename) so a failure never leaves
// a half file. The path follows core/output_file.h: a new file, or (force) a writable regular file,
// whose mode is kept; never a folder, link, device or FIFO.
Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes, bool force = true);

}  // namespace pelican
