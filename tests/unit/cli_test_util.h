// Runs the pelican binary from tests: no shell (arguments pass byte for byte), working directory set to
// a temp dir, stdout/stderr captured through files.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "model_test_util.h"

extern char** environ;

namespace pelican::test {

struct CliResult {
    int status = -1;  // exit status; -1 when the process did not exit normally
    std::string out, err;
};

// Runs PELICAN_BINARY with `args` inside `dir`; exit status, stdout, stderr. timeout_s > 0: a run that
// takes longer is killed (status -1, "timed out" in err), so a test that would hang fails instead.
inline CliResult run_pelican_in(const std::vector<std::string>& args, const TempDir& dir, int timeout_s = 0) {
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
    bool timed_out = false;
    if (timeout_s > 0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
        while (::waitpid(pid, &ws, WNOHANG) == 0) {
            if (std::chrono::steady_clock::now() > deadline) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &ws, 0);
                timed_out = true;
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    } else {
        ::waitpid(pid, &ws, 0);
    }
    if (!timed_out && WIFEXITED(ws)) r.status = WEXITSTATUS(ws);
    auto slurp = [](const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    if (timed_out) r.err += fmt::format("\n(timed out after {} s and killed)", timeout_s);
    return r;
}

}  // namespace pelican::test
