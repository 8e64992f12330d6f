// ThreadPool: a fixed set of compute threads for data-parallel ops.
//
//   pool.parallel_for(n_tasks, [&](int64_t task, int thread) { ... });
//
// runs fn once for every task in [0, n_tasks), spread over the pool's threads, and returns when
// all are done. The calling thread takes part as thread 0; workers are threads 1..size()-1, so
// `thread` can index per-thread scratch of size() entries. Tasks are handed out dynamically
// (one atomic increment each): make a task a chunk of rows, not a single element.
//
// Hot path: no allocation per call (fn is passed by reference, never copied into a
// std::function); workers spin briefly after a job before sleeping, so back-to-back calls (one
// per op during decode) avoid most wake-up latency.
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
#include <thread>
#include <type_traits>
#include <vector>

namespace pelican {

class ThreadPool {
public:
    // n_threads counts the caller too; 0 picks default_thread_count(). 1 means no workers.
    explicit ThreadPool(int n_threads = 0);
    ~ThreadPool();  // joins the workers; must not run concurrently with parallel_for
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    template <typename F>
    void parallel_for(int64_t n_tasks, F&& fn) {
        using Fn = std::remove_reference_t<F>;
        TaskRef ref{const_cast<void*>(static_cast<const void*>(&fn)),
                    [](void* obj, int64_t task, int thread) { (*static_cast<Fn*>(obj))(task, thread); }};
        run(n_tasks, ref);
    }

    // hardware_concurrency(), at least 1; PELICAN_THREADS overrides it when set to a positive int.
    static int default_thread_count();

private:
    struct TaskRef {
        void* obj;
        void (*call)(void* obj, int64_t task, int thread);
    };

    void run(int64_t n_tasks, TaskRef fn);
    void run_serial(int64_t n_tasks, TaskRef fn, int thread);
    void work(int thread);  // takes tasks of the current job until none are left
    void worker_main(int thread);

    int n_threads_ = 1;
    std::vector<std::thread> workers_;

    std::mutex busy_;  // held by the thread that owns the current job

    // Current job: published by bumping generation_ under mu_.
    TaskRef job_{};
    int64_t job_n_ = 0;
    std::atomic<int64_t> next_{0};
    std::atomic<int> pending_{0};  // workers that have not finished the current job
    std::atomic<bool> failed_{false};
    std::exception_ptr error_;  // first exception of the job (guarded by mu_)

    std::mutex mu_;
    std::condition_variable wake_;  // workers wait for a new generation or stop
    std::condition_variable done_;  // the caller waits for pending_ == 0
    std::atomic<uint64_t> generation_{0};
    std::atomic<bool> stop_{false};
};

// A process-wide pool with default_thread_count() threads, created on first use.
ThreadPool& default_thread_pool();

}  // namespace pelican
