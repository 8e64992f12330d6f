// Parses bytes as config.json text; must return a value or an Error, never crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "formats/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto c = pelican::parse_hf_config(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    if (c.ok() && (c->head_dim <= 0 || c->num_key_value_heads <= 0)) __builtin_trap();
    return 0;
}
