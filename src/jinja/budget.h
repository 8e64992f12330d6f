// Resource limits of one render. Chat templates come from downloaded models and are untrusted, so
// rendering charges every unit of work against a step budget and every byte the render holds against a
// memory limit; a template over either stops with an error naming the limit instead of hanging or
// exhausting memory.
//
//  * Steps (time): one per statement, expression, loop iteration and call, one per element a builtin
//    makes or visits, one per kBytesPerStep bytes of text built, copied or scanned in bulk and one per
//    kCharBytesPerStep bytes processed character by character. One step is roughly 20-70 ns of work,
//    so the default budget (1e8, jinja.h) stops a runaway template within seconds.
//  * Bytes (memory): what the render's values hold at once (strings, lists, dicts, the output and
//    capture buffers), each estimated as payload + a fixed per-object overhead. Growth is checked before
//    a result is allocated where its size is known up front ('x' * n, s ~ t, range(n), list + list),
//    else as it grows (join, replace, tojson, printing a value).
//
// The budget of the render running on this thread is reachable from every builtin (filters, methods,
// Python printing) without threading it through each call: Template::render installs it as a Budget
// object on its stack. Outside a render nothing is counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pelican::jinja {

// Bytes per step of bulk work (copying, memchr / memcmp scans, storage of built values): memcpy-speed
// work is ~10x cheaper per byte than interpreting, and a template that accumulates its output
// (ns.out = ns.out ~ part: quadratic in the conversation) must render a 1M-token conversation.
inline constexpr size_t kBytesPerStep = 256;
// Bytes per step of work done character by character (UTF-8 decoding, case mapping, repr, JSON).
inline constexpr size_t kCharBytesPerStep = 8;
inline constexpr size_t kObjectBytes = 64;  // estimated overhead of one string, list or dict object

class Budget {
public:
    // Installs this budget for the calling thread until destroyed (the previous one is restored).
    Budget(uint64_t max_steps, size_t max_bytes);
    ~Budget();
    Budget(const Budget&) = delete;
    Budget& operator=(const Budget&) = delete;

    static Budget* current() { return current_; }

    void charge(uint64_t n) {
        steps_ += n;
        if (steps_ > max_steps_) out_of_steps();
    }
    // Fails naming `what` unless `bytes` more fit under the memory limit.
    void check_room(size_t bytes, std::string_view what) const {
        if (bytes > max_bytes_ - held_) out_of_room(bytes, what);
    }
    void hold(size_t bytes, std::string_view what) {
        check_room(bytes, what);
        held_ += bytes;
    }
    void release(size_t bytes) { held_ -= bytes; }

    uint64_t steps() const { return steps_; }
    size_t held() const { return held_; }
    uint64_t max_steps() const { return max_steps_; }
    size_t max_bytes() const { return max_bytes_; }

private:
    [[noreturn]] void out_of_steps() const;
    [[noreturn]] void out_of_room(size_t bytes, std::string_view what) const;

    uint64_t max_steps_;
    size_t max_bytes_;
    uint64_t steps_ = 0;
    size_t held_ = 0;  // bytes, <= max_bytes_
    Budget* prev_;
    static inline thread_local constinit Budget* current_ = nullptr;
};

// Shortcuts on the current budget; no-ops outside a render.
inline void charge(uint64_t steps) {
    if (Budget* b = Budget::current()) b->charge(steps);
}
inline void charge_bytes(size_t bytes) { charge(bytes / kBytesPerStep); }
inline void charge_chars(size_t bytes) { charge(bytes / kCharBytesPerStep); }
inline void check_room(size_t bytes, std::string_view what) {
    if (Budget* b = Budget::current()) b->check_room(bytes, what);
}

// Saturating size arithmetic for "would this fit" checks on untrusted counts.
inline size_t add_sat(size_t a, size_t b) { return a + b < a ? SIZE_MAX : a + b; }
inline size_t mul_sat(size_t a, size_t b) { return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b; }

// The bytes one object holds while it lives, registered with the budget current when it was made
// (none outside a render). Growing it checks the limit and charges a step per kBytesPerStep bytes.
class Held {
public:
    Held() : budget_(Budget::current()) {}
    Held(const Held& other) : Held() { resize(other.bytes_, "value copy"); }
    Held& operator=(const Held&) = delete;
    ~Held() {
        if (budget_) budget_->release(bytes_);
    }

    // Sets the held amount; `what` names the value in the error when growing does not fit.
    void resize(size_t bytes, std::string_view what) {
        if (!budget_) return;
        if (bytes > bytes_) {
            budget_->hold(bytes - bytes_, what);
            budget_->charge((bytes - bytes_) / kBytesPerStep);
        } else {
            budget_->release(bytes_ - bytes);
        }
        bytes_ = bytes;
    }
    size_t bytes() const { return bytes_; }

private:
    Budget* budget_;
    size_t bytes_ = 0;
};

// A string under construction whose bytes count against the budget as it grows (in chunks, so
// appending a character stays cheap). take() hands the text over and releases the hold: the Value
// made from it holds it again.
class TextBuilder {
public:
    explicit TextBuilder(std::string_view what) : what_(what) {}
    void append(std::string_view s) {
        grow(s.size());
        text_.append(s);
    }
    void append(size_t n, char c) {
        grow(n);
        text_.append(n, c);
    }
    void push_back(char c) {
        grow(1);
        text_.push_back(c);
    }
    TextBuilder& operator+=(std::string_view s) {
        append(s);
        return *this;
    }
    TextBuilder& operator+=(char c) {
        push_back(c);
        return *this;
    }
    size_t size() const { return text_.size(); }
    const std::string& str() const { return text_; }
    std::string take() {
        held_.resize(0, what_);
        return std::move(text_);
    }

private:
    // Outside a render held_ stays 0 and the unsigned difference never asks for more.
    void grow(size_t n) {
        if (n > held_.bytes() - text_.size()) hold_more(n);
    }
    void hold_more(size_t n);

    std::string text_;
    std::string_view what_;
    Held held_;  // >= text_.size()
};

}  // namespace pelican::jinja
