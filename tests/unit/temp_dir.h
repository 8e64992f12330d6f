// A temporary directory for tests: created empty under the system temp directory, removed with
// everything in it when the object goes. Names: pelican_<tag>_<pid>_<n> (n counts the process's
// directories, so equal tags never collide).
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include <fmt/format.h>

namespace pelican::test {

struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& tag = "tmp") {
        static std::atomic<int> counter{0};
        path = std::filesystem::temp_directory_path() /
               fmt::format("pelican_{}_{}_{}", tag, ::getpid(), counter.fetch_add(1));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    // The path of `name` inside the directory (the directory itself for "").
    std::string str(const std::string& name = "") const { return (path / name).string(); }
    std::string operator/(const std::string& name) const { return str(name); }
};

}  // namespace pelican::test
