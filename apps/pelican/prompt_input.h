// Prompt text from a file or stdin, for run and tokenize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace pelican::cli {

// The most bytes a prompt file (or stdin) may hold: 64 MiB, ~16M tokens of English, far beyond
// any context; a runaway input such as /dev/zero stops there with an error.
inline constexpr size_t kMaxPromptBytes = size_t{64} << 20;

// The text of `path` ("-": stdin). Unless keep_newline, one trailing newline ("\n" or "\r\n") is
// removed: `echo text | pelican run -f -` prompts with "text", as typing it with -p would.
Expected<std::string> read_prompt_input(const std::string& path, bool keep_newline);

// A --seed value: -1 (random) or 0 .. 2^64 - 2; anything else is an error, never clamped.
Expected<uint64_t> parse_seed(const std::string& text, uint64_t random_value);

}  // namespace pelican::cli
