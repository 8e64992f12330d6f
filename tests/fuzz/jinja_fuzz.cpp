// Fuzzes the Jinja interpreter: the input is a template source, rendered against a small
// chat-like context. Any outcome is fine except a crash, hang or runaway allocation (small render
// limits keep each input fast).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jinja/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 64 * 1024) return 0;
    static const nlohmann::ordered_json ctx = {
        {"messages",
         {{{"role", "system"}, {"content", "sys"}},
          {{"role", "user"}, {"content", "héllo"}},
          {{"role", "assistant"},
           {"content", nullptr},
           {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", {{"a", 1.5}}}}}}}}}}},
        {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
        {"add_generation_prompt", true},
        {"bos_token", "<s>"},
        {"eos_token", "</s>"}};
    auto t = pelican::jinja::Template::parse(std::string_view(reinterpret_cast<const char*>(data), size));
    if (!t) return 0;
    pelican::jinja::RenderOptions opt;
    opt.now = 0;
    opt.max_steps = 1'000'000;  // runaway inputs stop in milliseconds, not seconds
    opt.max_bytes = 4u << 20;
    (void)t->render(ctx, opt);
    return 0;
}
