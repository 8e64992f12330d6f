// A Jinja2 subset interpreter for chat templates, rendering exactly as Python's jinja2 does
// under Hugging Face transformers' settings: sandboxed, trim_blocks and lstrip_blocks on,
// loop controls (break/continue), raise_exception(msg), strftime_now(fmt), tojson with
// ensure_ascii off. Unsupported constructs fail at parse or render time with an error naming
// the construct and its line.
#pragma once

#include <ctime>
#include <optional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace pelican::jinja {

struct RenderOptions {
    // Clock for strftime_now(); nullopt means the current local time. Tests pin it.
    std::optional<std::time_t> now;
};

class Template {
public:
    // Parses a template. Errors: "template line N: <what>".
    static Expected<Template> parse(std::string_view source);
    // Renders with the given context (a JSON object whose keys become template variables).
    // Objects reach the template in the context's key order (ordered_json keeps the order of the
    // JSON text or of insertion), so `tojson` and `items()` list keys as Python's dicts would.
    // A raise_exception() in the template returns an Error whose message is the template's text.
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
