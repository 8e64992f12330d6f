// Python's json.dumps over Jinja values (what HF's tojson filter calls), byte for byte.
#pragma once

#include <optional>
#include <string>

#include "jinja/value.h"

namespace pelican::jinja {

struct JsonDumpOptions {
    bool ensure_ascii = false;
    std::optional<std::string> indent;             // nullopt: one line; else the per-level indent string
    std::optional<std::string> item_sep, key_sep;  // defaults follow json.dumps
    bool sort_keys = false;
};

std::string py_json_dumps(const Value& v, const JsonDumpOptions& opt);

}  // namespace pelican::jinja
