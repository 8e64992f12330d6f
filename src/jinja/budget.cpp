#include "jinja/budget.h"

#include <algorithm>

#include <fmt/format.h>

#include "jinja/value.h"

namespace pelican::jinja {
namespace {

std::string bytes_text(size_t n) {
    constexpr size_t kMiB = size_t{1} << 20, kGiB = size_t{1} << 30;
    if (n % kMiB == 0 && n != 0 && n < kGiB) return fmt::format("{} MiB", n / kMiB);
    if (n >= kGiB) return fmt::format("{:.1f} GiB", static_cast<double>(n) / kGiB);
    if (n >= kMiB) return fmt::format("{:.1f} MiB", static_cast<double>(n) / kMiB);
    return fmt::format("{} bytes", n);
}

}  // namespace

Budget::Budget(uint64_t max_steps, size_t max_bytes)
    : max_steps_(max_steps), max_bytes_(max_bytes), prev_(current_) {
    current_ = this;
}

Budget::~Budget() { current_ = prev_; }

void Budget::out_of_steps() const {
    fail(
        fmt::format("stopped after {} steps (the template's step budget; raise it with --template-max-steps)",
                    max_steps_));
}

void Budget::out_of_room(size_t bytes, std::string_view what) const {
    std::string need = bytes == SIZE_MAX ? std::string("more than 2^64 bytes") : bytes_text(bytes);
    fail(
        fmt::format("{}: {} more would exceed the template's memory limit of {} ({} held; raise it with "
                    "--template-max-bytes)",
                    what, need, bytes_text(max_bytes_), bytes_text(held_)));
}

void TextBuilder::hold_more(size_t n) {
    const size_t need = add_sat(text_.size(), n);
    size_t want = add_sat(need, std::max<size_t>(4096, need / 4));
    if (const Budget* b = Budget::current(); b && want - held_.bytes() > b->max_bytes() - b->held())
        want = need;  // near the limit: hold exactly what is needed
    held_.resize(want, what_);
    if (held_.bytes() != 0) text_.reserve(want);  // the string's capacity is what is held, not 2x
}

}  // namespace pelican::jinja
