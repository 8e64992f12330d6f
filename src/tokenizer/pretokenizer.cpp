#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace pelican {

namespace {

struct CodeDeleter {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
    void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
using CodePtr = std::unique_ptr<pcre2_code, CodeDeleter>;
using MatchDataPtr = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return "unknown PCRE2 error";
    return std::string(reinterpret_cast<const char*>(buf));
}

}  // namespace

struct PreTokenizer::Impl {
    std::vector<CodePtr> codes;

    // Splits one piece with regex `code`: matches and the gaps between them, in order.
    void split_one(const pcre2_code* code, pcre2_match_data* md, std::string_view piece,
                   std::vector<std::string_view>& out) const {
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
        size_t start = 0, prev = 0;
        while (start < piece.size()) {
            const int rc = pcre2_match(code, subject, piece.size(), start, 0, md, nullptr);
            if (rc < 0) break;  // no match, or a matcher limit: the rest stays one piece
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            const size_t s = ov[0], e = ov[1];
            if (s < start || e > piece.size() || e < s) break;
            if (e == s) {  // empty match: step over one character
                size_t len = 1;
                utf8_decode(piece, s, len);
                start = s + len;
                continue;
            }
            if (s > prev) out.push_back(piece.substr(prev, s - prev));
            out.push_back(piece.substr(s, e - s));
            prev = start = e;
        }
        if (prev < piece.size()) out.push_back(piece.substr(prev));
    }
};

PreTokenizer::PreTokenizer() : impl_(std::make_unique<Impl>()) {}
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Expected<PreTokenizer> PreTokenizer::create(const std::vector<std::string>& regexes) {
    PreTokenizer pt;
    for (const auto& re : regexes) {
        int err = 0;
        PCRE2_SIZE err_off = 0;
        CodePtr code(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr));
        if (!code) {
            return make_error("pre-tokenizer regex /{}/: {} at offset {}", re, pcre2_message(err), err_off);
        }
        // JIT is an optimization only: the interpreter is used when it is unavailable.
        (void)pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
        pt.impl_->codes.push_back(std::move(code));
    }
    return pt;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
    out.clear();
    if (text.empty()) return;
    out.push_back(text);
    if (impl_->codes.empty()) return;
    // One match block per call (2 ovector pairs is enough: only the whole match is read).
    MatchDataPtr md(pcre2_match_data_create(2, nullptr));
    if (!md) return;
    std::vector<std::string_view> next;
    for (const auto& code : impl_->codes) {
        next.clear();
        next.reserve(out.size() * 2);
        for (std::string_view piece : out) impl_->split_one(code.get(), md.get(), piece, next);
        out.swap(next);
    }
}

}  // namespace pelican
