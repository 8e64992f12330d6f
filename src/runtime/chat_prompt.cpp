// Chat prompts whose message text cannot forge control tokens (runtime/chat_prompt.h).
#include "runtime/chat_prompt.h"

#include <algorithm>
#include <random>

#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

using json = nlohmann::ordered_json;

// Calls fn(std::string&) for every string value (not keys) in j.
template <typename Fn>
void for_each_string(json& j, Fn&& fn) {
    if (j.is_string()) {
        fn(j.get_ref<std::string&>());
    } else if (j.is_array() || j.is_object()) {
        for (auto& v : j) for_each_string(v, fn);
    }
}

// The content slots of the messages: content strings, the "text" of content parts and
// reasoning_content strings.
template <typename Fn>
void for_each_content(json& messages, Fn&& fn) {
    if (!messages.is_array()) return;
    for (auto& m : messages) {
        if (!m.is_object()) continue;
        for (const char* key : {"content", "reasoning_content"}) {
            auto it = m.find(key);
            if (it == m.end()) continue;
            if (it->is_string()) {
                fn(it->get_ref<std::string&>());
            } else if (it->is_array()) {
                for (auto& part : *it) {
                    if (!part.is_object()) continue;
                    auto t = part.find("text");
                    if (t != part.end() && t->is_string()) fn(t->get_ref<std::string&>());
                }
            }
        }
    }
}

std::string trimmed_left(const std::string& s, const char* chars) {
    const size_t b = s.find_first_not_of(chars);
    return b == std::string::npos ? std::string() : s.substr(b);
}

std::string trimmed(const std::string& s, const char* chars) {
    const std::string l = trimmed_left(s, chars);
    const size_t e = l.find_last_not_of(chars);
    return e == std::string::npos ? std::string() : l.substr(0, e + 1);
}

std::string strip_specials(const std::string& s, const Tokenizer& tok) {
    const std::vector<TextRange> found = tok.find_special_texts(s);
    if (found.empty()) return s;
    std::string out;
    size_t at = 0;
    for (const TextRange& r : found) {
        out.append(s, at, r.begin - at);
        at = r.end;
    }
    out.append(s, at, std::string::npos);
    return out;
}

int64_t count_specials(const std::vector<int32_t>& ids, const Tokenizer& tok) {
    return std::count_if(ids.begin(), ids.end(), [&](int32_t id) { return tok.is_special(id); });
}

std::vector<TextRange> merge(std::vector<TextRange> v) {
    std::sort(v.begin(), v.end(), [](const TextRange& a, const TextRange& b) { return a.begin < b.begin; });
    std::vector<TextRange> out;
    for (const TextRange& r : v) {
        if (r.end <= r.begin) continue;
        if (!out.empty() && r.begin <= out.back().end)
            out.back().end = std::max(out.back().end, r.end);
        else
            out.push_back(r);
    }
    return out;
}

// Substitutes contents[k] for each occurrence of sentinel k in `rendered`; the ranges they land on.
std::string splice(const std::string& rendered, const std::string& prefix,
                   const std::vector<std::string>& contents, std::vector<TextRange>& ranges) {
    std::string out;
    size_t at = 0;
    for (;;) {
        const size_t p = rendered.find(prefix, at);
        if (p == std::string::npos) break;
        // The sentinel is prefix + index + "z".
        size_t q = p + prefix.size();
        size_t k = 0;
        bool digits = false;
        while (q < rendered.size() && rendered[q] >= '0' && rendered[q] <= '9') {
            k = k * 10 + static_cast<size_t>(rendered[q] - '0');
            ++q;
            digits = true;
        }
        if (!digits || q >= rendered.size() || rendered[q] != 'z' || k >= contents.size()) {
            out.append(rendered, at, p + prefix.size() - at);
            at = p + prefix.size();
            continue;
        }
        out.append(rendered, at, p - at);
        ranges.push_back({out.size(), out.size() + contents[k].size()});
        out += contents[k];
        at = q + 1;
    }
    out.append(rendered, at, std::string::npos);
    return out;
}

}  // namespace

Expected<ChatPrompt> render_chat_prompt(const jinja::ModelChatTemplate& tmpl, const json& messages,
                                        const json& tools, const jinja::ChatTemplateOptions& opt,
                                        const Tokenizer& tok) {
    auto render = [&](const json& m, const json& t) -> Expected<std::string> {
        auto out = jinja::apply_chat_template(tmpl.source, m, t, opt);
        if (!out) return make_error("{}: {}", tmpl.origin, out.error().message);
        return std::move(out).value();
    };
    ChatPrompt p;
    PELICAN_ASSIGN(p.text, render(messages, tools));

    // Which untrusted strings hold control-token text at all.
    json probe_m = messages, probe_t = tools;
    auto note = [&](std::string& s) {
        if (p.first_forged.empty()) {
            const std::vector<TextRange> f = tok.find_special_texts(s);
            if (!f.empty()) p.first_forged = s.substr(f[0].begin, f[0].end - f[0].begin);
        }
    };
    for_each_string(probe_m, note);
    for_each_string(probe_t, note);
    if (p.first_forged.empty()) {  // nothing to isolate: every control token is the template's
        p.template_controls = count_specials(tok.encode(p.text, {.parse_special = true}), tok);
        return p;
    }

    // Exact ranges of the contents through sentinels.
    std::random_device rd;
    const uint64_t nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    const std::string prefix = fmt::format("pelican{:016x}slot", nonce);
    json sent = messages;
    std::vector<std::string> contents;
    for_each_content(sent, [&](std::string& s) {
        contents.push_back(s);
        s = prefix + std::to_string(contents.size() - 1) + "z";
    });
    std::vector<TextRange> ranges;
    bool exact = false;
    if (!contents.empty()) {
        auto with_sentinels = render(sent, tools);
        if (with_sentinels) {
            std::vector<TextRange> r;
            if (splice(*with_sentinels, prefix, contents, r) == p.text) {
                ranges = std::move(r);
                exact = true;
            }
        }
    }
    {
        // Untrusted strings with control-token text that the sentinels did not place: every
        // verbatim occurrence in the prompt is untrusted.
        json all_m = messages, all_t = tools;
        // The string as given, and as the common transformations leave it (Jinja's trim, Python's
        // strip / lstrip("\n")), each looked up where it holds control-token text.
        auto mark = [&](std::string& s) {
            if (s.empty() || tok.find_special_texts(s).empty()) return;
            for (const std::string& v : {s, trimmed(s, " \t\r\n"), trimmed_left(s, "\n")}) {
                if (v.empty() || tok.find_special_texts(v).empty()) continue;
                for (size_t at = p.text.find(v); at != std::string::npos; at = p.text.find(v, at + 1))
                    ranges.push_back({at, at + v.size()});
            }
        };
        if (exact) {
            // Contents are placed; the other strings still need looking up.
            json rest = messages;
            for_each_content(rest, [](std::string& s) { s.clear(); });
            for_each_string(rest, mark);
        } else {
            for_each_string(all_m, mark);
        }
        for_each_string(all_t, mark);

        // The template's own control tokens: a rendering without control text in untrusted strings.
        json clean_m = messages, clean_t = tools;
        auto clean = [&](std::string& s) { s = strip_specials(s, tok); };
        for_each_string(clean_m, clean);
        for_each_string(clean_t, clean);
        auto neutral = render(clean_m, clean_t);
        if (!neutral)
            return make_error(
                "{} (rendering the conversation without the special-token text '{}' found in a message)",
                neutral.error().message, p.first_forged);
        p.template_controls = count_specials(tok.encode(*neutral, {.parse_special = true}), tok);
    }
    p.plain = merge(std::move(ranges));
    return p;
}

Expected<std::vector<int32_t>> tokenize_chat_prompt(const ChatPrompt& prompt, const Tokenizer& tok) {
    std::vector<int32_t> ids =
        tok.encode(prompt.text, {.add_special = false, .parse_special = true, .plain_ranges = prompt.plain});
    const int64_t n = count_specials(ids, tok);
    if (n != prompt.template_controls)
        return make_error(
            "a message holds the special-token text '{}', and this chat template transforms message text "
            "so that pelican cannot keep it as plain text ({} special tokens in the prompt, {} written by "
            "the "
            "template); remove it from the message",
            prompt.first_forged, n, prompt.template_controls);
    return ids;
}

}  // namespace pelican
