// A Jinja2 subset interpreter for chat templates, rendering exactly as Python's jinja2 does
// under Hugging Face transformers' settings: sandboxed, trim_blocks and lstrip_blocks on,
// loop controls (break/continue), raise_exception(msg), strftime_now(fmt), tojson with
// ensure_ascii off. Unsupported constructs fail at parse or render time with an error naming
// the construct and its line.
//
// Templates are untrusted input (they come with downloaded models): a render runs under a step
// budget and a memory limit (RenderOptions; what counts is in budget.h) and past either fails with
// an error naming the limit. The process and the Template stay usable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace pelican::jinja {

// Defaults of the render limits: far above what real chat templates use (the 65 reference templates
// take at most 5.4e5 steps and 2 MB for a 420 KB, 200-message conversation; Reka-Edge's, which
// accumulates its prompt in a namespace, 8.2e6 steps and 7.9 MB for 1.7 MB), low enough that a
// runaway template stops within seconds.
inline constexpr uint64_t kDefaultMaxSteps = 100'000'000;
inline constexpr size_t kDefaultMaxBytes = size_t{64} << 20;

struct RenderOptions {
    // Clock for strftime_now(); nullopt means the current local time. Tests pin it.
    std::optional<std::time_t> now;
    // Step budget: statements, expressions, loop iterations and calls, plus one per element a
    // builtin makes or visits and per 256 bytes of text built or scanned.
    uint64_t max_steps = kDefaultMaxSteps;
    // Memory the render may hold at once (strings, lists, dicts, output), estimated; checked
    // before a result is allocated.
    size_t max_bytes = kDefaultMaxBytes;
};

class Template {
public:
    // Parses a template. Errors: "template line N: <what>".
    static Expected<Template> parse(std::string_view source);
    // Renders with the given context (a JSON object whose keys become template variables).
    // Objects reach the template in the context's key order (ordered_json keeps the order of the
    // JSON text or of insertion), so `tojson` and `items()` list keys as Python's dicts would.
    // A raise_exception() in the template returns an Error whose message is the template's text.
    // Past opt.max_steps: "template line N: stopped after <max_steps> steps (...)"; past
    // opt.max_bytes: "template line N: <what> too large: ... memory limit of <max_bytes> ...".
    Expected<std::string> render(const nlohmann::ordered_json& context, const RenderOptions& opt = {}) const;

    Template();
    ~Template();
    Template(Template&&) noexcept;
    Template& operator=(Template&&) noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace pelican::jinja
