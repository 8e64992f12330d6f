// /proc/self/status parsing (core/proc_memory.h).
#include "core/proc_memory.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "core/format_bytes.h"
#include "core/mmap_file.h"

namespace pelican {
namespace {

// The value of "Key:   1234 kB" in bytes; nullopt when the line is absent or malformed.
std::optional<uint64_t> field_kb(std::string_view status, std::string_view key) {
    size_t at = 0;
    while (at < status.size()) {
        size_t end = status.find('\n', at);
        if (end == std::string_view::npos) end = status.size();
        std::string_view line = status.substr(at, end - at);
        at = end + 1;
        if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ':') continue;
        line.remove_prefix(key.size() + 1);
        while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
        uint64_t kb = 0;
        auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), kb);
        if (ec != std::errc() || std::string_view(p, line.data() + line.size()) != " kB") return std::nullopt;
        return kb * 1024;
    }
    return std::nullopt;
}

}  // namespace

Expected<ProcMemory> parse_proc_status(std::string_view status) {
    ProcMemory m;
    struct Field {
        const char* key;
        uint64_t* out;
    };
    for (const Field& f : {Field{"VmRSS", &m.rss}, Field{"RssAnon", &m.anon}, Field{"RssFile", &m.file},
                           Field{"RssShmem", &m.shmem}, Field{"VmHWM", &m.peak}}) {
        const std::optional<uint64_t> v = field_kb(status, f.key);
        if (!v) return make_error("process status: no \"{}: N kB\" line", f.key);
        *f.out = *v;
    }
    return m;
}

Expected<ProcMemory> read_proc_memory() {
    // /proc files report size 0, so they are read as a stream, not mapped.
    PELICAN_ASSIGN(std::string text, read_text_file("/proc/self/status"));
    return parse_proc_status(text);
}

Status reset_peak_memory() {
    std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
    if (!f) return make_error("cannot open /proc/self/clear_refs: {}", std::strerror(errno));
    const bool ok = std::fputs("5", f) >= 0;
    if (std::fclose(f) != 0 || !ok)
        return make_error("cannot reset the peak RSS through /proc/self/clear_refs: {}",
                          std::strerror(errno));
    return {};
}

std::string describe_memory(const ProcMemory& m) {
    std::string s =
        fmt::format("RSS {} (anon {}, file {}", human_bytes(m.rss), human_bytes(m.anon), human_bytes(m.file));
    if (m.shmem != 0) s += fmt::format(", shmem {}", human_bytes(m.shmem));
    return s + fmt::format("), peak {}", human_bytes(m.peak));
}

}  // namespace pelican
