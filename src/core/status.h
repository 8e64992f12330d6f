// Errors that cross layer boundaries: Error carries a message a user can act on
// (file, tensor, expected vs found); Expected<T> is either a value or an Error.
#pragma once

#include <cassert>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace pelican {

struct Error {
    std::string message;
};

// Builds an Error from a fmt format string: return make_error("{}: bad magic", path);
template <typename... Args>
Error make_error(fmt::format_string<Args...> f, Args&&... args) {
    return Error{fmt::format(f, std::forward<Args>(args)...)};
}

template <typename T>
class [[nodiscard]] Expected {
public:
    Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}
    Expected(Error err) : v_(std::in_place_index<1>, std::move(err)) {}

    bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }

    T& value() & {
        assert(ok());
        return std::get<0>(v_);
    }
    const T& value() const& {
        assert(ok());
        return std::get<0>(v_);
    }
    T&& value() && {
        assert(ok());
        return std::get<0>(std::move(v_));
    }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }

    const Error& error() const {
        assert(!ok());
        return std::get<1>(v_);
    }
    Error&& take_error() {
        assert(!ok());
        return std::get<1>(std::move(v_));
    }

private:
    std::variant<T, Error> v_;
};

// Status: Expected<void>.
class [[nodiscard]] Status {
public:
    Status() = default;
    Status(Error err) : err_(std::move(err)), failed_(true) {}
    static Status ok_status() { return Status(); }
    bool ok() const { return !failed_; }
    explicit operator bool() const { return ok(); }
    const Error& error() const {
        assert(failed_);
        return err_;
    }
    Error&& take_error() {
        assert(failed_);
        return std::move(err_);
    }

private:
    Error err_;
    bool failed_ = false;
};

}  // namespace pelican

#define PELICAN_CONCAT_INNER(a, b) a##b
#define PELICAN_CONCAT(a, b) PELICAN_CONCAT_INNER(a, b)

// PELICAN_TRY(status_expr): returns the error from the enclosing function on failure.
#define PELICAN_TRY(expr)                                             \
    do {                                                              \
        auto pelican_try_s_ = (expr);                                 \
        if (!pelican_try_s_.ok()) return pelican_try_s_.take_error(); \
    } while (0)

// PELICAN_ASSIGN(lhs, expected_expr): declares/assigns lhs from an Expected or returns its error.
#define PELICAN_ASSIGN(lhs, expr) PELICAN_ASSIGN_IMPL(PELICAN_CONCAT(pelican_e_, __LINE__), lhs, expr)
#define PELICAN_ASSIGN_IMPL(tmp, lhs, expr) \
    auto tmp = (expr);                      \
    if (!tmp.ok()) return tmp.take_error(); \
    lhs = std::move(tmp).value()
