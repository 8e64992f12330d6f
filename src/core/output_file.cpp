// Output-file rules and the temporary-then-rename writer (see output_file.h).
#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

namespace pelican {
namespace {

namespace fs = std::filesystem;

const char* kind_of(mode_t m) {
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

// The folder the output (and its temporary) goes into: "." for a bare file name.
std::string parent_of(const std::string& path) {
    const std::string p = fs::path(path).parent_path().string();
    return p.empty() ? "." : p;
}

// Whether the user may write the existing file st at path. Root may write anything, so for root the
// mode bits decide: a file without any write bit is read-only for everyone.
bool user_may_write(const std::string& path, const struct stat& st) {
    if (::geteuid() == 0) return (st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) != 0;
    return ::faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0;
}

Status check_parent(const std::string& path) {
    const std::string dir = parent_of(path);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
        if (errno == ENOENT) return make_error("cannot write '{}': folder '{}' does not exist", path, dir);
        return make_error("cannot write '{}': folder '{}': {}", path, dir, std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return make_error("cannot write '{}': '{}' is not a folder", path, dir);
    if (::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
        return make_error("cannot write '{}': folder '{}' is not writable ({})", path, dir,
                          std::strerror(errno));
    return {};
}

// ".NAME.tmp.PID.N" next to path; NAME shortened so the whole name stays within NAME_MAX.
std::string temp_name(const std::string& path, unsigned n) {
    std::string name = fs::path(path).filename().string();
    if (name.size() > 200) name.resize(200);
    const fs::path dir = fs::path(path).parent_path();
    return (dir / fmt::format(".{}.tmp.{}.{}", name, ::getpid(), n)).string();
}

}  // namespace

Status check_output_path(const std::string& path, bool force) {
    if (path.empty()) return make_error("no output file given");
    if (path == "-")
        return make_error(
            "'-': cannot write to standard output; give a file name (./- for a file named '-')");
    if (fs::path(path).filename().empty())
        return make_error("'{}' names a folder; give the output's file name", path);
    PELICAN_TRY(check_parent(path));
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return {};
        return make_error("cannot write '{}': {}", path, std::strerror(errno));
    }
    if (S_ISLNK(st.st_mode))
        return make_error(
            "'{}' is a symbolic link; pelican neither writes through nor replaces links (give the real path, "
            "or remove the link)",
            path);
    if (S_ISDIR(st.st_mode)) return make_error("'{}' is a folder; give the output's file name", path);
    if (!S_ISREG(st.st_mode))
        return make_error("'{}' is {}; outputs must be regular files (or not exist yet)", path,
                          kind_of(st.st_mode));
    if (!force) return make_error("'{}' exists; pass --force to replace it", path);
    if (!user_may_write(path, st))
        return make_error(
            "'{}' is read-only (mode {:04o}); not replacing it, even with --force (make it writable or "
            "remove it first)",
            path, static_cast<unsigned>(st.st_mode & 07777));
    return {};
}

Status check_output_not_input(const std::string& output, const std::string& input) {
    std::error_code ec;
    if (output.empty() || input.empty() || !fs::exists(output, ec)) return {};
    if (fs::equivalent(input, output, ec))
        return make_error("'{}' is the input '{}' (the same file); give a different output file", output,
                          input);
    if (!fs::is_directory(input, ec)) return {};
    fs::directory_iterator it(input, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
        std::error_code ec2;
        if (fs::equivalent(it->path(), output, ec2))
            return make_error("'{}' is '{}' in the input folder '{}'; write the output somewhere else",
                              output, it->path().filename().string(), input);
    }
    return {};
}

Expected<OutputFile> OutputFile::create(const std::string& path, bool force) {
    PELICAN_TRY(check_output_path(path, force));
    struct stat target {};
    const bool replacing = ::lstat(path.c_str(), &target) == 0;
    static std::atomic<unsigned> counter{0};
    std::string tmp;
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
        tmp = temp_name(path, counter.fetch_add(1));
        // O_EXCL: never opens (or truncates) a file that exists, nor follows a link planted at tmp.
        fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, replacing ? 0600 : 0666);
        if (fd < 0 && errno != EEXIST)
            return make_error("cannot create a temporary file for '{}' ('{}'): {}", path, tmp,
                              std::strerror(errno));
    }
    if (fd < 0) return make_error("cannot create a temporary file for '{}': every name tried exists", path);
    if (replacing && ::fchmod(fd, target.st_mode & 0777) != 0) {
        const int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return make_error("cannot set the mode of '{}': {}", tmp, std::strerror(e));
    }
    std::FILE* f = ::fdopen(fd, "wb");
    if (!f) {
        const int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        return make_error("cannot write '{}': {}", tmp, std::strerror(e));
    }
    OutputFile out;
    out.stream_ = f;
    out.path_ = path;
    out.temp_path_ = std::move(tmp);
    out.force_ = force;
    return out;
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : stream_(std::exchange(o.stream_, nullptr)),
      path_(std::move(o.path_)),
      temp_path_(std::exchange(o.temp_path_, {})),
      force_(o.force_) {}

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
    if (this != &o) {
        discard();
        stream_ = std::exchange(o.stream_, nullptr);
        path_ = std::move(o.path_);
        temp_path_ = std::exchange(o.temp_path_, {});
        force_ = o.force_;
    }
    return *this;
}

void OutputFile::discard() {
    if (stream_) std::fclose(std::exchange(stream_, nullptr));
    if (!temp_path_.empty()) ::unlink(std::exchange(temp_path_, {}).c_str());
}

Status OutputFile::commit() {
    if (!stream_) return make_error("cannot write '{}': the output file is not open", path_);
    std::FILE* f = std::exchange(stream_, nullptr);
    int e = 0;
    if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0) e = errno;
    if (std::fclose(f) != 0 && e == 0) e = errno;
    if (e != 0) {
        discard();
        return make_error("cannot write '{}': {}", path_, std::strerror(e));
    }
    if (Status s = check_output_path(path_, force_); !s.ok()) {
        discard();
        return make_error("{} (it changed while being written; the new file was not kept)",
                          s.error().message);
    }
    int rc = 0;
    if (force_) {
        rc = std::rename(temp_path_.c_str(), path_.c_str());
    } else {
        // Atomic: fails with EEXIST when a file appeared since the check above.
        rc = ::renameat2(AT_FDCWD, temp_path_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE);
        if (rc != 0 && (errno == EINVAL || errno == ENOSYS))  // a file system without RENAME_NOREPLACE
            rc = std::rename(temp_path_.c_str(), path_.c_str());
    }
    if (rc != 0) {
        e = errno;
        discard();
        if (e == EEXIST) return make_error("'{}' exists; pass --force to replace it", path_);
        return make_error("cannot rename the temporary file onto '{}': {}", path_, std::strerror(e));
    }
    temp_path_.clear();
    return {};
}

}  // namespace pelican
