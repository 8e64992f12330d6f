// Subcommand registry for the pelican CLI. Each cmd_*.cpp registers itself:
//
//   static int run_info(const InfoArgs&);
//   PELICAN_COMMAND(info, [](CLI::App& app) { auto* sub = app.add_subcommand("info", "..."); ... });
//
// A command's callback stores its exit code with set_exit_code(); errors go to stderr as
// "pelican: error: ..." via report_error() (exit 1) or report_usage_error() (exit 2).
#pragma once

#include <string_view>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace pelican::cli {

using CommandSetup = void (*)(CLI::App& app);

// Registers a subcommand setup function; called from static initializers. Returns a dummy.
int register_command(const char* name, CommandSetup setup);

// Exit codes (main.cpp): 1 a command failed, 2 a usage error, 130 interrupted (SIGINT).
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 130;

void set_exit_code(int code);
// Prints "pelican: error: <message>" to stderr and returns kExitError.
int report_error(const Error& e);
int report_error(std::string_view message);
// The same for a usage error (a bad combination of options), with a hint to the command's --help
// when the message starts with "<command>:": returns kExitUsage.
int report_usage_error(std::string_view message);

}  // namespace pelican::cli

#define PELICAN_COMMAND(name, setup) \
    static const int pelican_command_registered_##name = ::pelican::cli::register_command(#name, setup)
