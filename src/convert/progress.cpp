// Progress bar / periodic progress lines on stderr (see progress.h).
#include "convert/progress.h"

#include <cstdio>
#include <unistd.h>

#include <fmt/format.h>

namespace pelican {

std::string format_bytes(uint64_t n) {
    const double d = static_cast<double>(n);
    if (d >= 1e9) return fmt::format("{:.2f} GB", d / 1e9);
    if (d >= 1e6) return fmt::format("{:.1f} MB", d / 1e6);
    if (d >= 1e3) return fmt::format("{:.1f} KB", d / 1e3);
    return fmt::format("{} B", n);
}

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1) {
    start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() {
    if (open_line_) std::fputc('\n', stderr);
}

double Progress::elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(uint64_t done, std::string_view item) {
    done_ = done;
    if (!enabled_ || finished_) return;
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_draw_).count();
    if (tty_) {
        if (since < 0.1 && open_line_) return;
    } else {  // a line per 10% (at most one per 2 s) or per 10 s; none for jobs under 2 s
        const int decile = total_ ? static_cast<int>(done_ * 10 / total_) : 10;
        if (since < 2 || (decile == last_decile_ && since < 10)) return;
        last_decile_ = decile;
    }
    last_draw_ = now;
    draw(item, false);
}

void Progress::finish() {
    if (finished_) return;
    done_ = total_;
    if (enabled_ && (tty_ || last_decile_ >= 0)) draw({}, true);
    finished_ = true;
}

void Progress::draw(std::string_view item, bool final) {
    const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    const std::string amounts = fmt::format("{:3.0f}%  {}/{}  {:.1f} s", frac * 100, format_bytes(done_),
                                            format_bytes(total_), elapsed_s());
    if (tty_) {
        constexpr int kWidth = 30;
        const int filled = static_cast<int>(frac * kWidth);
        std::string bar(static_cast<size_t>(kWidth), ' ');
        for (int i = 0; i < filled; ++i) bar[static_cast<size_t>(i)] = '=';
        if (filled < kWidth) bar[static_cast<size_t>(filled)] = '>';
        std::string shown(item.substr(0, 40));
        fmt::print(stderr, "\r{} [{}] {}  {:<40}", label_, bar, amounts, shown);
        open_line_ = true;
        if (final) {
            std::fputc('\n', stderr);
            open_line_ = false;
        }
    } else {
        fmt::print(stderr, "{}: {}{}{}\n", label_, amounts, item.empty() ? "" : "  ", item);
    }
    std::fflush(stderr);
}

}  // namespace pelican
