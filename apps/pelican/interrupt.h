// Ctrl-C for long commands: while an InterruptGuard lives, the first SIGINT/SIGTERM only sets a
// flag (the command finishes its current step, cleans up and reports); a second one kills the
// process at once (the handler restores the default action).
#pragma once

#include <atomic>

namespace pelican::cli {

// The flag the handler sets; commands poll it (or hand it to code taking a cancel flag).
std::atomic<bool>& interrupt_flag();

class InterruptGuard {
public:
    InterruptGuard();   // clears the flag and installs the handler for SIGINT and SIGTERM
    ~InterruptGuard();  // restores the previous handlers
    InterruptGuard(const InterruptGuard&) = delete;
    InterruptGuard& operator=(const InterruptGuard&) = delete;

private:
    void (*old_int_)(int) = nullptr;
    void (*old_term_)(int) = nullptr;
};

}  // namespace pelican::cli
