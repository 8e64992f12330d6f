// Sampling defaults shipped with a model (formats/generation_config.h).
#include "formats/generation_config.h"

#include <cmath>
#include <filesystem>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "formats/gguf.h"

namespace pelican {
namespace {

// Reads a number from j[key] into out when it is a finite number within [lo, hi].
template <typename T>
void take_number(const nlohmann::json& j, const char* key, double lo, double hi, std::optional<T>& out,
                 GenerationDefaults& d) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_number()) {
        d.warnings.push_back(fmt::format("{}: {} is not a number, ignored", d.source, key));
        return;
    }
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi) {
        d.warnings.push_back(
            fmt::format("{}: {} = {} is outside [{}, {}], ignored", d.source, key, v, lo, hi));
        return;
    }
    if constexpr (std::is_integral_v<T>) {
        if (v != std::floor(v)) {
            d.warnings.push_back(fmt::format("{}: {} = {} is not an integer, ignored", d.source, key, v));
            return;
        }
    }
    out = static_cast<T>(v);
}

constexpr double kMaxInt = 2147483647.0;

}  // namespace

std::string GenerationDefaults::describe() const {
    if (empty()) return {};
    std::string s;
    auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
    if (do_sample && !*do_sample) add("do_sample false (greedy)");
    if (temperature) add(fmt::format("temperature {}", *temperature));
    if (top_p) add(fmt::format("top_p {}", *top_p));
    if (top_k) add(fmt::format("top_k {}", *top_k));
    if (min_p) add(fmt::format("min_p {}", *min_p));
    if (repetition_penalty) add(fmt::format("repetition_penalty {}", *repetition_penalty));
    if (penalty_last_n) add(fmt::format("penalty_last_n {}", *penalty_last_n));
    return fmt::format("{} ({})", s, source);
}

GenerationDefaults parse_generation_config(const std::string& json_text, const std::string& name) {
    GenerationDefaults d;
    d.source = name;
    const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
        d.warnings.push_back(fmt::format("{}: not a JSON object, ignored", name));
        return d;
    }
    take_number(j, "temperature", 0.0, 1e4, d.temperature, d);
    take_number(j, "top_p", 1e-9, 1.0, d.top_p, d);
    take_number(j, "top_k", 0.0, kMaxInt, d.top_k, d);
    take_number(j, "min_p", 0.0, 1.0, d.min_p, d);
    take_number(j, "repetition_penalty", 1e-9, 1e4, d.repetition_penalty, d);
    if (auto it = j.find("do_sample"); it != j.end() && !it->is_null()) {
        if (it->is_boolean())
            d.do_sample = it->get<bool>();
        else
            d.warnings.push_back(fmt::format("{}: do_sample is not true or false, ignored", name));
    }
    return d;
}

GenerationDefaults read_generation_config(const std::string& folder) {
    std::error_code ec;
    const std::filesystem::path file = std::filesystem::path(folder) / "generation_config.json";
    if (!std::filesystem::is_regular_file(file, ec)) return {};
    auto text = read_text_file(file.string(), size_t{1} << 20);
    if (!text) {
        GenerationDefaults d;
        d.warnings.push_back(fmt::format("{}, ignored", text.error().message));
        return d;
    }
    return parse_generation_config(*text, file.string());
}

GenerationDefaults gguf_generation_defaults(const GgufFile& g) {
    GenerationDefaults d;
    d.source = "GGUF general.sampling.*";
    nlohmann::json j = nlohmann::json::object();
    for (const char* key : {"temp", "top_p", "top_k", "min_p", "penalty_repeat", "penalty_last_n"}) {
        const std::string full = std::string("general.sampling.") + key;
        if (!g.find(full)) continue;
        if (auto v = g.get_float(full))
            j[key] = *v;
        else if (auto i = g.get_int(full))
            j[key] = *i;
        else
            j[key] = "not a number";
    }
    take_number(j, "temp", 0.0, 1e4, d.temperature, d);
    take_number(j, "top_p", 1e-9, 1.0, d.top_p, d);
    take_number(j, "top_k", 0.0, kMaxInt, d.top_k, d);
    take_number(j, "min_p", 0.0, 1.0, d.min_p, d);
    take_number(j, "penalty_repeat", 1e-9, 1e4, d.repetition_penalty, d);
    take_number(j, "penalty_last_n", -1.0, kMaxInt, d.penalty_last_n, d);
    return d;
}

}  // namespace pelican
