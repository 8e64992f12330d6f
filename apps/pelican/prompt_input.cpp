// Prompt input and seeds (prompt_input.h).
#include "prompt_input.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/mmap_file.h"

namespace pelican::cli {

Expected<std::string> read_prompt_input(const std::string& path, bool keep_newline) {
    Expected<std::string> text = path == "-" ? read_text_stream(stdin, "stdin", kMaxPromptBytes)
                                             : read_text_file(path, kMaxPromptBytes);
    if (!text) return text;
    std::string s = std::move(text).value();
    if (!keep_newline && !s.empty() && s.back() == '\n') {
        s.pop_back();
        if (!s.empty() && s.back() == '\r') s.pop_back();
    }
    return s;
}

Expected<uint64_t> parse_seed(const std::string& text, uint64_t random_value) {
    if (text == "-1") return random_value;
    const uint64_t max = std::numeric_limits<uint64_t>::max() - 1;
    bool digits = !text.empty() && text.size() <= 20;
    for (char c : text) digits = digits && c >= '0' && c <= '9';
    if (digits) {
        errno = 0;
        char* end = nullptr;
        const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
        if (errno == 0 && *end == '\0' && v <= max) return static_cast<uint64_t>(v);
    }
    return make_error("--seed {}: give -1 (a random seed) or an integer from 0 to {}", text, max);
}

}  // namespace pelican::cli
