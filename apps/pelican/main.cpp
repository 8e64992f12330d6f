// pelican: one binary, many subcommands (see command.h for how they register).
#include <algorithm>
#include <cstdio>
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

}  // namespace

int register_command(const char* name, CommandSetup setup) {
    registry().push_back({name, setup});
    return 0;
}

void set_exit_code(int code) { g_exit_code = code; }

int report_error(std::string_view message) {
    std::fprintf(stderr, "pelican: error: %.*s\n", static_cast<int>(message.size()), message.data());
    return 1;
}

int report_error(const Error& e) { return report_error(e.message); }

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
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    return g_exit_code;
}
