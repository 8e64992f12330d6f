#include "jinja/jinja.h"

#include <exception>

#include <nlohmann/json.hpp>

#include "jinja/ast.h"
#include "jinja/budget.h"
#include "jinja/interp.h"

namespace pelican::jinja {

struct Template::Impl {
    Body body;
};

Template::Template() = default;
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

Expected<Template> Template::parse(std::string_view source) {
    try {
        Template t;
        t.impl_ = std::make_unique<Impl>();
        t.impl_->body = parse_template(source);
        return t;
    } catch (const RenderError& e) {
        return Error{e.message};
    } catch (const std::exception& e) {
        return Error{std::string("template parse failed: ") + e.what()};
    }
}

Expected<std::string> Template::render(const nlohmann::ordered_json& context,
                                       const RenderOptions& opt) const {
    if (!impl_) return Error{"template: render called on an empty Template"};
    if (!context.is_object() && !context.is_null())
        return Error{"template: render context must be a JSON object"};
    try {
        // Declared first, destroyed last: every value of the render holds bytes against it.
        Budget budget(opt.max_steps, opt.max_bytes);
        Interp interp(opt.now);
        Value ctx = Value::from_json(context);
        return interp.render(impl_->body, ctx);
    } catch (const RenderError& e) {
        return Error{e.message};
    } catch (const std::exception& e) {
        return Error{std::string("template render failed: ") + e.what()};
    }
}

}  // namespace pelican::jinja
