// The Scheduler: requests in, tokens out, over one Executor and one SequenceMemory (docs/floor.md).
// It is what the server and `pelican bench --batch` drive:
//
//   Scheduler sched(*exec, *mem, {.token_budget = 512});
//   PELICAN_ASSIGN(RequestId id, sched.admit({.prompt = ids, .sampling = sp, .max_tokens = 128}));
//   std::vector<TokenEvent> ev;
//   while (!sched.idle()) { ev.clear(); PELICAN_TRY(sched.step(ev, pool)); /* stream ev */ }
//
// One step() is one Executor step of at most token_budget rows (continuous batching):
//   1. every request in decode (its prompt done) gives one row: its last sampled token;
//   2. what budget is left goes to prompts in admission order, in chunks (chunked prefill): the
//      request being prefilled first, then waiting requests, each opening a sequence when it starts;
//   3. blocks are reserved for every row; when the pool is full the most recently admitted running
//      request is preempted (evict and recompute: its sequence is closed and it waits again at the
//      front, its prompt now the prompt plus what it generated; the tokens it streamed stay valid);
//   4. the rows whose chunk ends a request's known tokens are sampled: on the executor's device
//      when it samples those parameters exactly (only the ids come back), else on the host from
//      their logits, each with the request's own Sampler (seeded per request; penalties over the
//      prompt and the generated tokens, as Session does);
//   5. every sampled token is an event; a request finishes at max_tokens, at a stop id (the stop
//      token is reported, finish kStop), when its context is full (kContext), or when cancelled.
// A finished request's sequence is closed at once. Nothing is allocated per step beyond the
// events the caller's vector grows by (buffers are sized at construction for token_budget rows).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "runtime/executor.h"
#include "runtime/sampler.h"

namespace pelican {

using RequestId = int64_t;

struct RequestOptions {
    std::vector<int32_t> prompt;    // token ids, not empty
    SamplerParams sampling;         // seed kRandomSeed: a random one per request
    int64_t max_tokens = 128;       // tokens to generate, > 0
    std::vector<int32_t> stop_ids;  // ids that end generation (reported, then kStop)
};

enum class FinishReason { kNone, kLength, kStop, kContext, kCancelled };
const char* finish_reason_name(FinishReason r);

// A sampled token (token >= 0) and/or the end of a request (finish != kNone; a cancelled request
// ends with token kNoToken).
struct TokenEvent {
    RequestId id = 0;
    int32_t token = kNoToken;
    FinishReason finish = FinishReason::kNone;
};

struct SchedulerOptions {
    int64_t token_budget = 512;  // rows per step, at most the executor's max_batch_tokens
};

struct SchedulerStats {
    int64_t steps = 0;
    int64_t rows = 0;            // tokens fed to the executor (recomputed ones included)
    int64_t prefill_rows = 0;    // rows of prompts (and recomputed tokens)
    int64_t sampled = 0;         // tokens generated
    int64_t preemptions = 0;     // requests evicted to make room
    int64_t device_sampled = 0;  // rows sampled on the executor's device
};

class Scheduler {
public:
    // The executor and the memory (made by that executor) must outlive the scheduler.
    Scheduler(Executor& exec, SequenceMemory& mem, const SchedulerOptions& opt);

    // Errors: empty prompt, ids outside the vocabulary, max_tokens <= 0, a prompt that leaves no room
    // to generate in the memory's context, bad sampling parameters.
    Expected<RequestId> admit(RequestOptions r);
    // Ends the request at the next step (event kCancelled); unknown or finished ids are ignored.
    void cancel(RequestId id);
    // One executor step (nothing to do: returns at once). Events are appended.
    // Errors: the executor failed (requests keep their state), or one request alone does not fit
    // in the memory's pool (it is finished with kContext instead; not an error).
    Status step(std::vector<TokenEvent>& events, ThreadPool& pool);

    // While paused, steps feed only prompts (and recomputation); requests whose prompt is done wait
    // with their first token, holding their blocks: with a pool too small for every prompt, steps
    // then make no progress (stats().rows stays) until decode resumes. `pelican bench --batch` uses
    // it to time prefill and decode apart.
    void set_decode_paused(bool paused) { decode_paused_ = paused; }
    // Requests that have their first token (their prompt is done) and are still running.
    int64_t n_decoding() const;

    bool idle() const { return active_.empty(); }
    size_t n_active() const { return active_.size(); }
    const SchedulerStats& stats() const { return stats_; }

private:
    struct Request {
        RequestId id = 0;
        std::vector<int32_t> tokens;  // prompt, then every generated token
        int64_t n_prompt = 0;
        int64_t n_generated = 0;
        int64_t max_tokens = 0;
        std::vector<int32_t> stop_ids;
        std::unique_ptr<Sampler> sampler;
        StepSampling step;              // sampler's parameters as the executor takes them
        bool on_device = false;         // the executor samples them exactly
        SeqId seq = -1;                 // open sequence, or -1 (waiting)
        int64_t n_computed = 0;         // tokens[0 .. n_computed) are in the sequence
        bool cancel_requested = false;  // cancel(): ends at the next step
        bool done = false;              // finished (events sent, sequence closed); dropped at the step's end
    };
    // A row group of this step: request r feeds tokens [r.n_computed, + n).
    struct Run {
        Request* req;
        int64_t n;
    };
    void plan(std::vector<Run>& runs);
    bool reserve_or_preempt(std::vector<Run>& runs, std::vector<TokenEvent>& events);
    void preempt(Request& r);
    void finish(Request& r, FinishReason why, std::vector<TokenEvent>& events, int32_t token = kNoToken);
    void drop_finished();

    Executor& exec_;
    SequenceMemory& mem_;
    SchedulerOptions opt_;
    int64_t n_vocab_ = 0;
    RequestId next_id_ = 1;
    bool decode_paused_ = false;
    std::deque<std::unique_ptr<Request>> active_;  // admission order (preempted ones keep their place)
    SchedulerStats stats_;

    // Per-step buffers, [token_budget] capacity.
    std::vector<Run> runs_;
    std::vector<int32_t> tok_, out_rows_, sampled_;
    std::vector<int64_t> pos_;
    std::vector<SeqId> seq_;
    std::vector<Request*> out_req_;
    std::vector<RowSample> sample_;
    std::vector<float>
        logits_;  // [out rows, n_vocab] when sampled on the host (grows to the largest such step)
};

}  // namespace pelican
