// Runs the pelican binary from tests: no shell (arguments pass byte for byte), working directory set to
// a temp dir, stdout/stderr captured through files.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <algorithm>
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

struct CliOptions {
    int timeout_s = 0;               // > 0: killed after that long (status -1, "timed out" in err)
    std::string stdin_path;          // stdin from this file ("" = /dev/null)
    std::vector<std::string> env;    // extra "NAME=value" entries (override the test's own)
    std::vector<std::string> unset;  // variables removed from the environment
    int sigint_after_ms = 0;         // > 0: SIGINT sent that long after the start
};

// Runs PELICAN_BINARY with `args` inside `dir`; exit status, stdout, stderr.
inline CliResult run_pelican(const std::vector<std::string>& args, const TempDir& dir, const CliOptions& o) {
    const std::string cwd = dir.str(), out_path = dir.str("stdout.bin"), err_path = dir.str("stderr.txt");
    std::string bin = PELICAN_BINARY;
    std::vector<std::string> copy = args;
    std::vector<char*> argv{bin.data()};
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The environment: ours, minus what is unset or overridden, plus the extra entries.
    std::vector<std::string> env_copy;
    auto name_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
    for (char** e = environ; *e; ++e) {
        const std::string kv = *e, name = name_of(kv);
        bool drop = std::find(o.unset.begin(), o.unset.end(), name) != o.unset.end();
        for (const std::string& x : o.env) drop = drop || name_of(x) == name;
        if (!drop) env_copy.push_back(kv);
    }
    env_copy.insert(env_copy.end(), o.env.begin(), o.env.end());
    std::vector<char*> envp;
    for (std::string& kv : env_copy) envp.push_back(kv.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
    posix_spawn_file_actions_addopen(&fa, 0, o.stdin_path.empty() ? "/dev/null" : o.stdin_path.c_str(),
                                     O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CliResult r;
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        r.err = fmt::format("posix_spawn {}: error {}", bin, rc);
        return r;
    }
    int ws = 0;
    bool timed_out = false, signalled = false;
    const auto start = std::chrono::steady_clock::now();
    while (::waitpid(pid, &ws, WNOHANG) == 0) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start)
                .count();
        if (o.sigint_after_ms > 0 && !signalled && ms >= o.sigint_after_ms) {
            ::kill(pid, SIGINT);
            signalled = true;
        }
        if (o.timeout_s > 0 && ms > 1000LL * o.timeout_s) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &ws, 0);
            timed_out = true;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!timed_out && WIFEXITED(ws)) r.status = WEXITSTATUS(ws);
    auto slurp = [](const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    if (timed_out) r.err += fmt::format("\n(timed out after {} s and killed)", o.timeout_s);
    return r;
}

// The same with only a timeout (0: none).
inline CliResult run_pelican_in(const std::vector<std::string>& args, const TempDir& dir, int timeout_s = 0) {
    CliOptions o;
    o.timeout_s = timeout_s;
    return run_pelican(args, dir, o);
}

}  // namespace pelican::test
