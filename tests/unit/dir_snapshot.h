// What a folder holds, to check that a refused write created, replaced or modified nothing: each entry
// (links not followed) with its type and mode, inode, size, mtime, and a hash of a regular file's bytes
// or a link's target. FIFOs and devices are never opened.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>

#include <fmt/format.h>

namespace pelican::test {

// name -> "mode ino size mtime hash"; equal snapshots: nothing changed.
using DirSnapshot = std::map<std::string, std::string>;

inline DirSnapshot snapshot(const std::filesystem::path& dir) {
    DirSnapshot out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string p = e.path().string();
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0) continue;
        std::string body;
        if (S_ISREG(st.st_mode)) {
            std::ifstream in(p, std::ios::binary);
            body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        } else if (S_ISLNK(st.st_mode)) {
            body = std::filesystem::read_symlink(e.path()).string();
        }
        out[e.path().filename().string()] =
            fmt::format("mode {:o} ino {} size {} mtime {}.{:09} hash {:x}",
                        static_cast<unsigned>(st.st_mode), static_cast<uint64_t>(st.st_ino),
                        static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec),
                        static_cast<int64_t>(st.st_mtim.tv_nsec), std::hash<std::string>{}(body));
    }
    return out;
}

// Sets a file's (or, for a link, the link's own) mtime an hour back, so a later write shows in it.
inline void age(const std::string& path) {
    struct timespec ts[2];
    ::clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= 3600;
    ts[1] = ts[0];
    ::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW);
}

// Writes text to a new or existing file with the given mode, aged (see age()).
inline void make_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
    std::ofstream(path, std::ios::binary) << text;
    ::chmod(path.c_str(), mode);
    age(path);
}

inline std::string file_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline mode_t mode_of(const std::string& path) {
    struct stat st {};
    ::lstat(path.c_str(), &st);
    return st.st_mode & 07777;
}

}  // namespace pelican::test
