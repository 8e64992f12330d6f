#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>

#include "core/log.h"

namespace pelican {
namespace {

// Which pool (if any) the current thread is running tasks for, and its index there.
thread_local const ThreadPool* tl_pool = nullptr;
thread_local int tl_thread = 0;

// How long an idle thread waits actively before blocking: long enough to bridge the gap between
// two ops of one decode step (a few microseconds), short enough not to burn a core when idle.
// The first kPauseMicros pause the core (cheap, keeps the thread on it); the rest yield it, so a
// thread that waits does not starve one that works on the same core (a busy machine, or more
// threads than cores).
constexpr int64_t kPauseMicros = 20;
constexpr int64_t kSpinMicros = 200;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#else
    std::this_thread::yield();
#endif
}

// Spins until done() or kSpinMicros have passed; returns done().
template <typename Done>
bool spin_until(Done&& done) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    for (int i = 0;; ++i) {
        if (done()) return true;
        if ((i & 63) != 63) {
            cpu_relax();
            continue;
        }
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - start).count();
        if (us >= kSpinMicros) return done();
        if (us >= kPauseMicros) std::this_thread::yield();
    }
}

// Marks the current thread as running tasks of pool p as `thread`; restores on scope exit.
struct ScopedPoolThread {
    const ThreadPool* prev_pool;
    int prev_thread;
    ScopedPoolThread(const ThreadPool* p, int thread) : prev_pool(tl_pool), prev_thread(tl_thread) {
        tl_pool = p;
        tl_thread = thread;
    }
    ~ScopedPoolThread() {
        tl_pool = prev_pool;
        tl_thread = prev_thread;
    }
};

}  // namespace

int ThreadPool::available_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    const unsigned hc = std::thread::hardware_concurrency();
    return hc > 0 ? static_cast<int>(hc) : 1;
}

int ThreadPool::max_thread_count() { return 4 * available_cores(); }

int ThreadPool::default_thread_count() {
    if (const char* env = std::getenv("PELICAN_THREADS")) {
        char* end = nullptr;
        const long v = std::strtol(env, &end, 10);
        if (end != env && *end == '\0' && v >= 1 && v <= max_thread_count()) return static_cast<int>(v);
        static std::once_flag warned;
        std::call_once(warned, [&] {
            log_warn("PELICAN_THREADS={} ignored: give a thread count from 1 to {} (4 x the {} cores)", env,
                     max_thread_count(), available_cores());
        });
    }
    return std::max(1, available_cores() - busy_cores());
}

int ThreadPool::parse_loadavg_running(std::string_view s) {
    // Skip the three load averages, then read "R/T".
    size_t i = 0;
    for (int field = 0; field < 3; ++field) {
        while (i < s.size() && s[i] != ' ') ++i;
        while (i < s.size() && s[i] == ' ') ++i;
    }
    int running = 0;
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && running < 1000000)
        running = running * 10 + (s[i++] - '0');
    if (i == start || i >= s.size() || s[i] != '/') return -1;
    return running;
}

int ThreadPool::busy_cores() {
    int least = -1;
    for (int k = 0; k < 3; ++k) {
        if (k > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::ifstream f("/proc/loadavg");
        std::string line;
        if (!f || !std::getline(f, line)) return 0;
        const int r = parse_loadavg_running(line);
        if (r < 0) return 0;
        least = least < 0 ? r : std::min(least, r);
    }
    return std::clamp(least - 1, 0, available_cores() - 1);
}

ThreadPool::ThreadPool(int n_threads) {
    const int n = n_threads > 0 ? n_threads : default_thread_count();
    if (const std::error_code ec = start(n)) throw std::system_error(ec, "cannot start compute threads");
}

Expected<std::unique_ptr<ThreadPool>> ThreadPool::create(int n_threads) {
    const int max = max_thread_count();
    if (n_threads < 0 || n_threads > max)
        return make_error(
            "{} compute threads requested; this machine has {} cores, so use 1 to {} (0 picks the "
            "default, {})",
            n_threads, available_cores(), max, default_thread_count());
    std::unique_ptr<ThreadPool> pool(new ThreadPool(NoStart{}));
    const int n = n_threads > 0 ? n_threads : default_thread_count();
    if (const std::error_code ec = pool->start(n))
        return make_error(
            "cannot start compute thread {} of {}: {} (fewer threads with -t, or raise the "
            "process limit: ulimit -u)",
            pool->failed_at_, n, ec.message());
    return pool;
}

std::error_code ThreadPool::start(int n_threads) {
    n_threads_ = n_threads;
    try {
        workers_.reserve(static_cast<size_t>(n_threads_ - 1));
        for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
    } catch (const std::system_error& e) {
        failed_at_ = static_cast<int>(workers_.size()) + 2;
        stop_workers();
        n_threads_ = 1;
        return e.code();
    } catch (const std::bad_alloc&) {
        failed_at_ = static_cast<int>(workers_.size()) + 2;
        stop_workers();
        n_threads_ = 1;
        return std::make_error_code(std::errc::not_enough_memory);
    }
    return {};
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
    {
        std::lock_guard lk(mu_);
        stop_.store(true, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
}

void ThreadPool::run_serial(int64_t n_tasks, TaskRef fn, int thread) {
    for (int64_t i = 0; i < n_tasks; ++i) fn.call(fn.obj, i, thread);
}

void ThreadPool::run(int64_t n_tasks, TaskRef fn) {
    if (n_tasks <= 0) return;
    if (tl_pool == this) {  // nested call from one of our own tasks
        run_serial(n_tasks, fn, tl_thread);
        return;
    }
    std::unique_lock busy(busy_);  // one external caller at a time
    ScopedPoolThread scoped(this, 0);
    if (n_tasks == 1 || n_threads_ == 1) {
        run_serial(n_tasks, fn, 0);
        return;
    }
    bool wake = false;
    {
        std::lock_guard lk(mu_);
        job_ = fn;
        job_n_ = n_tasks;
        next_.store(0, std::memory_order_relaxed);
        failed_.store(false, std::memory_order_relaxed);
        error_ = nullptr;
        active_.store(0, std::memory_order_relaxed);
        open_ = true;
        generation_.fetch_add(1, std::memory_order_release);
        wake = sleeping_ > 0;
    }
    if (wake) wake_.notify_all();
    work(0, fn, n_tasks);
    // Every task is taken (or the job failed): no worker may join from now on, so the wait
    // below is only for workers running a task of this job.
    {
        std::lock_guard lk(mu_);
        open_ = false;
    }
    if (!spin_until([this] { return active_.load(std::memory_order_acquire) == 0; })) {
        std::unique_lock lk(mu_);
        done_.wait(lk, [this] { return active_.load(std::memory_order_acquire) == 0; });
    }
    std::exception_ptr err;
    {
        std::lock_guard lk(mu_);
        err = std::exchange(error_, nullptr);
    }
    if (err) std::rethrow_exception(err);
}

void ThreadPool::work(int thread, TaskRef fn, int64_t n_tasks) {
    while (!failed_.load(std::memory_order_relaxed)) {
        const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
        if (i >= n_tasks) break;
        try {
            fn.call(fn.obj, i, thread);
        } catch (...) {
            std::lock_guard lk(mu_);
            if (!error_) error_ = std::current_exception();
            failed_.store(true, std::memory_order_relaxed);
        }
    }
}

void ThreadPool::worker_main(int thread) {
    ScopedPoolThread scoped(this, thread);
    uint64_t seen = 0;  // workers start before the first job (generation 0)
    for (;;) {
        if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
            std::unique_lock lk(mu_);
            ++sleeping_;
            wake_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            --sleeping_;
        }
        TaskRef fn{};
        int64_t n = 0;
        {
            std::lock_guard lk(mu_);
            if (stop_.load(std::memory_order_relaxed)) return;
            seen = generation_.load(std::memory_order_relaxed);
            if (!open_) continue;  // finished without us: wait for the next one
            active_.fetch_add(1, std::memory_order_relaxed);
            fn = job_;
            n = job_n_;
        }
        work(thread, fn, n);
        if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard lk(mu_);
            done_.notify_one();
        }
    }
}

ThreadPool& default_thread_pool() {
    static ThreadPool pool;
    return pool;
}

}  // namespace pelican
