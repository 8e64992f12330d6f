// Leveled logging to stderr. Level comes from PELICAN_LOG (error|warn|info|debug), default info.
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace pelican {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_write(LogLevel level, std::string_view msg);

template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... a) {
    log_write(LogLevel::Error, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... a) {
    if (log_level() >= LogLevel::Warn) log_write(LogLevel::Warn, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... a) {
    if (log_level() >= LogLevel::Info) log_write(LogLevel::Info, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... a) {
    if (log_level() >= LogLevel::Debug) log_write(LogLevel::Debug, fmt::format(f, std::forward<Args>(a)...));
}

}  // namespace pelican
