#include "core/mmap_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "core/format_bytes.h"
#include "core/output_file.h"

namespace pelican {

Expected<MappedFile> MappedFile::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return make_error("cannot open '{}': {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        return make_error("cannot stat '{}': {}", path, std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return make_error("'{}' is not a regular file", path);
    }
    MappedFile f;
    f.path_ = path;
    f.size_ = static_cast<size_t>(st.st_size);
    if (f.size_ > 0) {
        void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            return make_error("cannot mmap '{}' ({} bytes): {}", path, f.size_, std::strerror(e));
        }
        f.data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
    return f;
}

MappedFile::MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_), path_(std::move(o.path_)) {
    o.data_ = nullptr;
    o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
    if (this != &o) {
        if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
        data_ = o.data_;
        size_ = o.size_;
        path_ = std::move(o.path_);
        o.data_ = nullptr;
        o.size_ = 0;
    }
    return *this;
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

size_t MappedFile::release_pages(std::span<const uint8_t> range) const {
    if (data_ == nullptr || range.empty()) return 0;
    const auto map_begin = reinterpret_cast<uintptr_t>(data_);
    const auto map_end = map_begin + size_;
    const uintptr_t begin = std::max(reinterpret_cast<uintptr_t>(range.data()), map_begin);
    const uintptr_t end = std::min(reinterpret_cast<uintptr_t>(range.data()) + range.size(), map_end);
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t first = (begin + page - 1) / page * page;  // whole pages only
    const uintptr_t last = end / page * page;
    if (begin >= end || first >= last) return 0;
    // MADV_DONTNEED on a private, never-written file mapping: unmaps the pages from this process;
    // the next access reads the file again (same bytes).
    if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
    return last - first;
}

Expected<std::string> read_text_stream(std::FILE* f, const std::string& name, size_t max_bytes) {
    std::string out;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
        if (out.size() + n > max_bytes)
            return make_error("'{}' is larger than {} (the most pelican reads from a text input)", name,
                              human_bytes(max_bytes));
        out.append(buf, n);
    }
    if (std::ferror(f)) return make_error("error reading '{}': {}", name, std::strerror(errno));
    return out;
}

Expected<std::string> read_text_file(const std::string& path, size_t max_bytes) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return make_error("'{}' is a folder, not a file", path);
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return make_error("cannot open '{}': {}", path, std::strerror(errno));
    auto out = read_text_stream(f, path, max_bytes);
    std::fclose(f);
    return out;
}

Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes, bool force) {
    PELICAN_ASSIGN(OutputFile out, OutputFile::create(path, force));
    const size_t w = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), out.stream());
    if (w != bytes.size())  // out's destructor removes the temporary
        return make_error("cannot write '{}' ({} bytes): {}", path, bytes.size(), std::strerror(errno));
    return out.commit();
}

}  // namespace pelican
