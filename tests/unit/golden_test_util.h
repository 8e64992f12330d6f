// Helpers for tests against the transformers golden fixtures (tests/golden/<variant>/, made by
// tools/golden/make_golden.py): the fixture list, the reference tensors, per-position logit
// comparisons (relative L2 error, KL divergence, top-1 agreement) and the lossy UTF-8 decoding
// transformers applies to generated text.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "formats/safetensors.h"
#include "pelican/engine.h"

namespace pelican::golden {

namespace fs = std::filesystem;

inline const fs::path kGoldenDir = fs::path(PELICAN_SOURCE_DIR) / "tests" / "golden";

// Names of dir's sub-folders that hold a reference.safetensors, sorted.
inline std::vector<std::string> fixtures_in(const fs::path& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return out;
    for (const auto& e : fs::directory_iterator(dir))
        if (fs::exists(e.path() / "reference.safetensors")) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

// Variant folder names that hold a reference, sorted.
inline std::vector<std::string> fixture_names() { return fixtures_in(kGoldenDir); }

// gtest parameter names: alphanumerics only.
// The hybrid Qwen3.5 fixtures under tests/golden/hybrid/ (sub-folders with a reference.safetensors).
inline const fs::path kHybridDir = kGoldenDir / "hybrid";
inline std::vector<std::string> hybrid_fixtures() { return fixtures_in(kHybridDir); }

inline std::string param_name(std::string n) {
    for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
}

// reference.safetensors + reference.json of one fixture.
struct Reference {
    std::vector<int32_t> tokens[2];  // tokens_a [40], tokens_b [17]
    std::vector<float> logits[2];    // [T, V] each, computed by transformers in float64
    std::vector<int32_t> greedy_prompt, greedy_tokens;
    nlohmann::json info;
};

template <typename T>
std::vector<T> tensor_values(const SafetensorsFile& f, const std::string& name) {
    const SafetensorsTensor* t = f.find(name);
    if (!t) return {};
    std::vector<T> v(t->data.size() / sizeof(T));
    std::memcpy(v.data(), t->data.data(), v.size() * sizeof(T));
    return v;
}

inline Expected<Reference> load_reference(const fs::path& dir) {
    PELICAN_ASSIGN(auto st, SafetensorsFile::open((dir / "reference.safetensors").string()));
    PELICAN_ASSIGN(auto text, read_text_file((dir / "reference.json").string()));
    Reference r;
    const char* seq[2] = {"a", "b"};
    for (int s = 0; s < 2; ++s) {
        r.tokens[s] = tensor_values<int32_t>(st, std::string("tokens_") + seq[s]);
        r.logits[s] = tensor_values<float>(st, std::string("logits_") + seq[s]);
    }
    r.greedy_prompt = tensor_values<int32_t>(st, "greedy_prompt");
    r.greedy_tokens = tensor_values<int32_t>(st, "greedy_tokens");
    r.info = nlohmann::json::parse(text);
    return r;
}

// Max over rows of max|a - b| / max|b| (each position's logits judged on their own scale): the f32
// golden tests' measure (bound 1e-4).
inline double row_rel_diff(const std::vector<float>& a, const std::vector<float>& b, size_t V) {
    double worst = 0;
    for (size_t r = 0; r * V < b.size(); ++r) {
        double scale = 0, d = 0;
        for (size_t i = r * V; i < (r + 1) * V; ++i) {
            scale = std::max(scale, std::abs(static_cast<double>(b[i])));
            d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
        }
        worst = std::max(worst, d / std::max(scale, 1e-6));
    }
    return worst;
}

// One position's logits against the reference: rel = ||got - ref||_2 / ||ref||_2;
// kld = KL(softmax(ref) || softmax(got)) in double; the reference's top-2 gap and row norm.
struct RowCompare {
    double rel = 0, kld = 0, ref_norm = 0, ref_gap = 0;
    bool same_top1 = false;
};

inline RowCompare compare_row(std::span<const float> got, std::span<const float> ref) {
    const size_t V = ref.size();
    RowCompare c;
    double d2 = 0, r2 = 0, max_r = -INFINITY, max_g = -INFINITY;
    size_t top_r = 0, top_g = 0;
    for (size_t i = 0; i < V; ++i) {
        const double r = ref[i], g = got[i];
        d2 += (g - r) * (g - r);
        r2 += r * r;
        if (r > max_r) max_r = r, top_r = i;
        if (g > max_g) max_g = g, top_g = i;
    }
    double second = -INFINITY, sum_r = 0, sum_g = 0;
    for (size_t i = 0; i < V; ++i) {
        if (i != top_r) second = std::max(second, static_cast<double>(ref[i]));
        sum_r += std::exp(ref[i] - max_r);
        sum_g += std::exp(got[i] - max_g);
    }
    // log p_i - log q_i = (r_i - lse_r) - (g_i - lse_g)
    const double lse_r = max_r + std::log(sum_r), lse_g = max_g + std::log(sum_g);
    for (size_t i = 0; i < V; ++i) {
        const double lp = ref[i] - lse_r, lq = got[i] - lse_g;
        c.kld += std::exp(lp) * (lp - lq);
    }
    c.rel = std::sqrt(d2 / std::max(r2, 1e-30));
    c.ref_norm = std::sqrt(r2);
    c.ref_gap = max_r - second;
    c.same_top1 = top_r == top_g;
    return c;
}

// Every position of both reference sequences, evaluated by `engine` (a fresh context per
// sequence), compared row by row.
inline Expected<std::vector<RowCompare>> compare_all(Engine& engine, const Reference& ref) {
    PELICAN_ASSIGN(auto session, engine.create_session(SessionOptions{.n_ctx = 64, .n_threads = 2}));
    const auto V = static_cast<size_t>(engine.n_vocab());
    std::vector<RowCompare> rows;
    for (int s = 0; s < 2; ++s) {
        const auto& want = ref.logits[s];
        if (want.size() != ref.tokens[s].size() * V)
            return make_error("reference logits: {} values for {} tokens x {} vocab", want.size(),
                              ref.tokens[s].size(), V);
        std::vector<float> got(want.size());
        session->reset();
        PELICAN_TRY(session->eval(ref.tokens[s], got));
        for (size_t t = 0; t < ref.tokens[s].size(); ++t)
            rows.push_back(compare_row(std::span<const float>(got).subspan(t * V, V),
                                       std::span<const float>(want).subspan(t * V, V)));
    }
    return rows;
}

// Bytes -> text the way Rust's String::from_utf8_lossy (tokenizers' byte-level decoder) and
// Python's decode("utf-8", "replace") do it: each maximal subpart of an ill-formed sequence (a
// lone invalid byte, or the valid start of a sequence cut short) becomes one U+FFFD.
inline std::string utf8_lossy(std::string_view s) {
    static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        size_t need = 0;                // continuation bytes after the lead
        unsigned lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
        if (b < 0x80) {
            out += s[i++];
            continue;
        } else if (b >= 0xC2 && b <= 0xDF) {
            need = 1;
        } else if (b >= 0xE0 && b <= 0xEF) {
            need = 2;
            if (b == 0xE0) lo = 0xA0;  // no overlongs
            if (b == 0xED) hi = 0x9F;  // no surrogates
        } else if (b >= 0xF0 && b <= 0xF4) {
            need = 3;
            if (b == 0xF0) lo = 0x90;  // no overlongs
            if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
        } else {
            out += kReplacement;  // 0x80..0xC1, 0xF5..0xFF never start a character
            ++i;
            continue;
        }
        size_t k = 1;  // bytes of the sequence that are valid so far
        while (k <= need && i + k < s.size()) {
            const auto c = static_cast<unsigned char>(s[i + k]);
            if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
            ++k;
        }
        if (k == need + 1)
            out.append(s.substr(i, k));
        else
            out += kReplacement;
        i += k;
    }
    return out;
}

// Summary of quantized-vs-reference logits over all positions (see model_quant_golden_test.cpp for the
// derivation of rho_bound): relative L2 error over all positions, mean KLD and its bound
// (KLD ~ Var(dlogit)/2), top-1 agreement, and the argmax check outside the near-tie band
// (top-2 gap <= tie_sigmas * sqrt(2) * sigma, sigma = rho_bound * |ref row| / sqrt(V)).
struct QuantSummary {
    double rho = 0, max_row = 0, mean_kld = 0, kld_bound = 0;
    int top1 = 0, ties = 0;
    int argmax_mismatches = 0;  // outside the near-tie band: must be 0
};

inline QuantSummary summarize_quant(const std::vector<RowCompare>& rows, double V, double rho_bound,
                                    double tie_sigmas) {
    QuantSummary s;
    double d2 = 0, r2 = 0, kld = 0;
    for (const RowCompare& r : rows) {
        d2 += r.rel * r.rel * r.ref_norm * r.ref_norm;
        r2 += r.ref_norm * r.ref_norm;
        s.max_row = std::max(s.max_row, r.rel);
        kld += r.kld;
        s.top1 += r.same_top1;
        const double sigma = rho_bound * r.ref_norm / std::sqrt(V);
        if (r.ref_gap <= tie_sigmas * std::sqrt(2.0) * sigma)
            ++s.ties;
        else if (!r.same_top1)
            ++s.argmax_mismatches;
    }
    const double n = static_cast<double>(rows.size());
    s.rho = std::sqrt(d2 / r2);
    s.mean_kld = kld / n;
    s.kld_bound = rho_bound * rho_bound * (r2 / n / V) / 2;
    return s;
}

}  // namespace pelican::golden
