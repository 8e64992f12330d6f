// Runs the pelican binary from tests: no shell (arguments pass byte for byte), working directory set to
// a temp dir, stdout/stderr captured through files.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model_test_util.h"

extern char** environ;

namespace pelican::test {

struct CliResult {
    int status = -1;  // exit status; -1 when the process did not exit normally
    std::string out, err;
};

// Runs PELICAN_BINARY with `args` inside `dir`; exit status, stdout, stderr.
inline CliResult run_pelican_in(const std::vector<std::string>& args, const TempDir& dir) {
    const std::string cwd = dir.str(), out_path = dir.str("stdout.bin"), err_path = dir.str("stderr.txt");
    std::string bin = PELICAN_BINARY;
    std::vector<std::string> copy = args;
    std::vector<char*> argv{bin.data()};
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CliResult r;
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        r.err = fmt::format("posix_spawn {}: error {}", bin, rc);
        return r;
    }
    int ws = 0;
    if (::waitpid(pid, &ws, 0) == pid && WIFEXITED(ws)) r.status = WEXITSTATUS(ws);
    auto slurp = [](const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    return r;
}

}  // namespace pelican::test
