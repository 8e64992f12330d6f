#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace pelican {
namespace {

LogLevel level_from_env() {
    const char* s = std::getenv("PELICAN_LOG");
    if (!s) return LogLevel::Info;
    if (!std::strcmp(s, "error")) return LogLevel::Error;
    if (!std::strcmp(s, "warn")) return LogLevel::Warn;
    if (!std::strcmp(s, "debug")) return LogLevel::Debug;
    return LogLevel::Info;
}

std::atomic<int>& level_ref() {
    static std::atomic<int> level{static_cast<int>(level_from_env())};
    return level;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_ref().load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { level_ref().store(static_cast<int>(level)); }

void log_write(LogLevel level, std::string_view msg) {
    static std::mutex mu;
    static const char* const tags[] = {"error", "warn", "info", "debug"};
    std::lock_guard<std::mutex> lock(mu);
    std::fprintf(stderr, "pelican %s: %.*s\n", tags[static_cast<int>(level)], static_cast<int>(msg.size()),
                 msg.data());
}

}  // namespace pelican
