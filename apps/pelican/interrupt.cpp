// Ctrl-C handling shared by the commands (interrupt.h).
#include "interrupt.h"

#include <csignal>

namespace pelican::cli {
namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void pelican_on_interrupt(int sig) {
    g_interrupted.store(true);
    std::signal(sig, SIG_DFL);
}

}  // namespace

std::atomic<bool>& interrupt_flag() { return g_interrupted; }

InterruptGuard::InterruptGuard() {
    g_interrupted.store(false);
    old_int_ = std::signal(SIGINT, pelican_on_interrupt);
    old_term_ = std::signal(SIGTERM, pelican_on_interrupt);
}

InterruptGuard::~InterruptGuard() {
    std::signal(SIGINT, old_int_);
    std::signal(SIGTERM, old_term_);
}

}  // namespace pelican::cli
