#include "core/thread_pool.h"

#include <cstdlib>
#include <utility>

namespace pelican {
namespace {

// Which pool (if any) the current thread is running tasks for, and its index there.
thread_local const ThreadPool* tl_pool = nullptr;
thread_local int tl_thread = 0;

// Busy-wait iterations before blocking (~tens of microseconds): long enough to bridge the gap
// between two ops of one decode step, short enough not to burn a core when idle.
constexpr int kSpinIters = 4000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#else
    std::this_thread::yield();
#endif
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

int ThreadPool::default_thread_count() {
    if (const char* env = std::getenv("PELICAN_THREADS")) {
        const long v = std::strtol(env, nullptr, 10);
        if (v > 0 && v <= 4096) return static_cast<int>(v);
    }
    const unsigned hc = std::thread::hardware_concurrency();
    return hc > 0 ? static_cast<int>(hc) : 1;
}

ThreadPool::ThreadPool(int n_threads) {
    n_threads_ = n_threads > 0 ? n_threads : default_thread_count();
    workers_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lk(mu_);
        stop_.store(true, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
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
    {
        std::lock_guard lk(mu_);
        job_ = fn;
        job_n_ = n_tasks;
        next_.store(0, std::memory_order_relaxed);
        failed_.store(false, std::memory_order_relaxed);
        error_ = nullptr;
        pending_.store(n_threads_ - 1, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work(0);
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
        if (spin < kSpinIters) {
            cpu_relax();
            continue;
        }
        std::unique_lock lk(mu_);
        done_.wait(lk, [this] { return pending_.load(std::memory_order_acquire) == 0; });
        break;
    }
    std::exception_ptr err;
    {
        std::lock_guard lk(mu_);
        err = std::exchange(error_, nullptr);
    }
    if (err) std::rethrow_exception(err);
}

void ThreadPool::work(int thread) {
    while (!failed_.load(std::memory_order_relaxed)) {
        const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
        if (i >= job_n_) break;
        try {
            job_.call(job_.obj, i, thread);
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
        uint64_t g = generation_.load(std::memory_order_acquire);
        for (int spin = 0; g == seen && spin < kSpinIters; ++spin) {
            cpu_relax();
            g = generation_.load(std::memory_order_acquire);
        }
        if (g == seen) {
            std::unique_lock lk(mu_);
            wake_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            g = generation_.load(std::memory_order_acquire);
        }
        if (stop_.load(std::memory_order_relaxed)) return;  // ordered by the acquire of generation_
        seen = g;
        work(thread);
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
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
