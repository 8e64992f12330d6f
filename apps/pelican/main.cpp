// pelican: one binary, many subcommands (see command.h for how they register).
//
// Exit codes: 0 success, 1 an error while running a command, 2 a usage error (unknown command or
// option, bad option value), 130 interrupted by Ctrl-C (run). Every error is one line on stderr
// starting "pelican: error: ", usage errors followed by a hint to --help.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "command.h"

namespace pelican::cli {
namespace {

struct Entry {
    const char* name;
    CommandSetup setup;
};

std::vector<Entry>& registry() {
    static std::vector<Entry> r;
    return r;
}

int g_exit_code = 0;

std::string command_list(const std::vector<Entry>& entries) {
    std::string s;
    for (const auto& e : entries) s += (s.empty() ? "" : ", ") + std::string(e.name);
    return s;
}

// A usage error: the message, a hint to --help (of the subcommand when one was named), exit 2.
int usage_error(const std::string& message, const std::string& sub) {
    std::fprintf(stderr, "pelican: error: %s\nRun 'pelican %s--help' for usage.\n", message.c_str(),
                 sub.empty() ? "" : (sub + " ").c_str());
    return kExitUsage;
}

}  // namespace

int register_command(const char* name, CommandSetup setup) {
    registry().push_back({name, setup});
    return 0;
}

void set_exit_code(int code) { g_exit_code = code; }

int report_error(std::string_view message) {
    std::fprintf(stderr, "pelican: error: %.*s\n", static_cast<int>(message.size()), message.data());
    return kExitError;
}

int report_error(const Error& e) { return report_error(e.message); }

int report_usage_error(std::string_view message) {
    // "run: ..." names the command: point at its --help.
    const size_t colon = message.find(':');
    const std::string_view sub =
        colon == std::string_view::npos ? std::string_view() : message.substr(0, colon);
    const bool is_command = !sub.empty() && std::any_of(registry().begin(), registry().end(),
                                                        [&](const Entry& e) { return sub == e.name; });
    std::fprintf(stderr, "pelican: error: %.*s\nRun 'pelican %.*s%s--help' for usage.\n",
                 static_cast<int>(message.size()), message.data(),
                 is_command ? static_cast<int>(sub.size()) : 0, sub.data(), is_command ? " " : "");
    return kExitUsage;
}

}  // namespace pelican::cli

int main(int argc, char** argv) {
    using namespace pelican::cli;
    CLI::App app{"pelican: fast LLM inference on one box"};
    app.set_version_flag("--version", "pelican 0.1.0");
    app.require_subcommand(1);
    auto entries = registry();
    std::sort(entries.begin(), entries.end(),
              [](const auto& a, const auto& b) { return std::string(a.name) < b.name; });
    for (const auto& e : entries) e.setup(app);
    // The first word that is not an option names the command: say so when it is not one.
    std::string sub;
    if (argc > 1 && argv[1][0] != '-') {
        sub = argv[1];
        const bool known =
            std::any_of(entries.begin(), entries.end(), [&](const Entry& e) { return sub == e.name; });
        if (!known)
            return usage_error(
                fmt::format("unknown command '{}'; the commands are {}", sub, command_list(entries)), "");
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::RequiredError& e) {
        if (sub.empty()) return usage_error(fmt::format("give a command: {}", command_list(entries)), "");
        return usage_error(e.what(), sub);
    } catch (const CLI::ParseError& e) {
        return usage_error(e.what(), sub);
    }
    return g_exit_code;
}
