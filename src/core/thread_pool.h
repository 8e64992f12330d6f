// ThreadPool: a fixed set of compute threads for data-parallel ops.
//
//   PELICAN_ASSIGN(auto pool, ThreadPool::create(n));    // Expected: thread creation can fail
//   pool->parallel_for(n_tasks, [&](int64_t task, int thread) { ... });
//
// runs fn once for every task in [0, n_tasks), spread over the pool's threads, and returns when
// all are done. The calling thread takes part as thread 0; workers are threads 1..size()-1, so
// `thread` can index per-thread scratch of size() entries. Tasks are handed out dynamically
// (one atomic increment each): make a task a chunk of rows, not a single element.
//
// Waiting: a job is open for workers to join only while it has tasks left. The caller runs tasks
// itself, then closes the job and waits only for the workers that joined it (those are running a
// task right now), never for a worker that has not been scheduled yet. So when the machine is
// busy (another process on a core, more threads than cores), a call costs about what the threads
// that did run make of it, instead of a scheduler time slice per call. Idle workers spin for a
// bounded time (~kSpinMicros, pausing, then yielding the core) before blocking on a condition
// variable, so back-to-back calls (one per op during decode) avoid most wake-up latency without
// burning a core when idle.
//
// Nesting and concurrency: a parallel_for issued from inside a task of the same pool runs all its
// tasks serially on that thread, with that thread's index (same results, no deadlock). Calls from
// different outside threads are serialised (the second waits), so thread indices never collide.
// Do not nest pools crosswise (a task of pool A calling pool B whose task calls pool A).
//
// Exceptions: if a task throws, tasks not yet started are skipped, every thread finishes its
// current task, and the first exception is rethrown from parallel_for on the calling thread.
// The pool stays usable.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <system_error>
#include <type_traits>
#include <vector>

#include "core/status.h"

namespace pelican {

class ThreadPool {
public:
    // n_threads counts the caller too; 0 picks default_thread_count(). 1 means no workers.
    // Throws std::system_error when a thread cannot be created: use create() where that must
    // be an error message (user-chosen thread counts).
    explicit ThreadPool(int n_threads = 0);
    ~ThreadPool();  // joins the workers; must not run concurrently with parallel_for
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    // The same, with an error instead of an exception: n_threads outside [0, max_thread_count()]
    // or a thread the system refuses ("cannot start compute thread 7 of 64: Resource temporarily
    // unavailable").
    static Expected<std::unique_ptr<ThreadPool>> create(int n_threads);

    int size() const { return n_threads_; }

    template <typename F>
    void parallel_for(int64_t n_tasks, F&& fn) {
        using Fn = std::remove_reference_t<F>;
        TaskRef ref{const_cast<void*>(static_cast<const void*>(&fn)),
                    [](void* obj, int64_t task, int thread) { (*static_cast<Fn*>(obj))(task, thread); }};
        run(n_tasks, ref);
    }

    // CPUs this process may run on (sched_getaffinity; hardware_concurrency where that fails),
    // at least 1.
    static int available_cores();
    // The default: available_cores() less the cores other processes keep busy right now
    // (busy_cores()), at least 1: with one of two cores taken by another program, one compute
    // thread beats two (a pool thread preempted in the middle of a task stalls the whole op).
    // PELICAN_THREADS overrides it when set to an integer in [1, max_thread_count()] (other values
    // are ignored with a warning on stderr, once).
    static int default_thread_count();
    // Runnable threads of other programs now: /proc/loadavg's running count (the kernel's
    // instantaneous figure, which includes the thread asking) minus one, the smallest of three
    // reads 1 ms apart, clamped to [0, available_cores() - 1]; 0 where /proc cannot be read.
    static int busy_cores();
    // "0.52 0.41 0.30 3/812 12345" -> 3 (the running count); -1 when the text is not that form.
    static int parse_loadavg_running(std::string_view loadavg);
    // The most threads a pool may have: 4 x available_cores(). More only slow a compute pool
    // down (each call wakes every thread) and can exhaust the system's thread limit.
    static int max_thread_count();

private:
    struct TaskRef {
        void* obj;
        void (*call)(void* obj, int64_t task, int thread);
    };

    struct NoStart {};
    explicit ThreadPool(NoStart) {}
    // Creates the workers; on failure stops those created, sets failed_at_ and returns the error.
    std::error_code start(int n_threads);
    void stop_workers();

    void run(int64_t n_tasks, TaskRef fn);
    void run_serial(int64_t n_tasks, TaskRef fn, int thread);
    void work(int thread, TaskRef fn, int64_t n_tasks);  // takes tasks of the current job
    void worker_main(int thread);

    int n_threads_ = 1;
    int failed_at_ = 0;  // the thread start() could not create: 1 is the caller, 2.. the workers
    std::vector<std::thread> workers_;

    std::mutex busy_;  // held by the thread that owns the current job

    // Current job, guarded by mu_ (workers copy it when they join).
    TaskRef job_{};
    int64_t job_n_ = 0;
    bool open_ = false;             // workers may still join the current job
    int sleeping_ = 0;              // workers blocked on wake_
    std::exception_ptr error_;      // first exception of the job
    std::atomic<int64_t> next_{0};  // next task index of the current job
    std::atomic<int> active_{0};    // workers that joined the current job and have not finished
    std::atomic<bool> failed_{false};

    std::mutex mu_;
    std::condition_variable wake_;  // workers wait for a new generation or stop
    std::condition_variable done_;  // the caller waits for active_ == 0
    std::atomic<uint64_t> generation_{0};
    std::atomic<bool> stop_{false};
};

// A process-wide pool with default_thread_count() threads, created on first use.
ThreadPool& default_thread_pool();

}  // namespace pelican
