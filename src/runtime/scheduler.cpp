// Scheduler (scheduler.h): planning, reservation with preemption, sampling and events.
#include "runtime/scheduler.h"

#include <algorithm>

#include "model/model.h"

namespace pelican {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kNone:
            return "none";
        case FinishReason::kLength:
            return "length";
        case FinishReason::kStop:
            return "stop";
        case FinishReason::kContext:
            return "context";
        case FinishReason::kCancelled:
            return "cancelled";
    }
    return "?";
}

Scheduler::Scheduler(Executor& exec, SequenceMemory& mem, const SchedulerOptions& opt)
    : exec_(exec), mem_(mem), opt_(opt), n_vocab_(exec.model().hparams().n_vocab) {
    opt_.token_budget = std::clamp<int64_t>(opt_.token_budget, 1, exec.max_batch_tokens());
    const auto T = static_cast<size_t>(opt_.token_budget);
    runs_.reserve(T);
    tok_.reserve(T);
    out_rows_.reserve(T);
    sampled_.reserve(T);
    pos_.reserve(T);
    seq_.reserve(T);
    out_req_.reserve(T);
    sample_.reserve(T);
}

Expected<RequestId> Scheduler::admit(RequestOptions r) {
    if (r.prompt.empty()) return make_error("request: the prompt is empty");
    for (size_t i = 0; i < r.prompt.size(); ++i)
        if (r.prompt[i] < 0 || r.prompt[i] >= n_vocab_)
            return make_error("request: prompt token {} (at {}) is outside the vocabulary of {}", r.prompt[i],
                              i, n_vocab_);
    if (r.max_tokens <= 0) return make_error("request: max_tokens must be positive, got {}", r.max_tokens);
    if (static_cast<int64_t>(r.prompt.size()) >= mem_.max_seq_tokens())
        return make_error("request: a prompt of {} tokens leaves no room to generate in a context of {}",
                          r.prompt.size(), mem_.max_seq_tokens());
    PELICAN_ASSIGN(Sampler s, Sampler::create(r.sampling));
    auto q = std::make_unique<Request>();
    q->id = next_id_++;
    q->n_prompt = static_cast<int64_t>(r.prompt.size());
    q->tokens = std::move(r.prompt);
    q->max_tokens = r.max_tokens;
    q->stop_ids = std::move(r.stop_ids);
    q->sampler = std::make_unique<Sampler>(std::move(s));
    q->step = step_sampling(r.sampling);
    q->on_device = exec_.samples_on_device(q->step);
    for (int32_t t : q->tokens) q->sampler->accept(t);
    const RequestId id = q->id;
    active_.push_back(std::move(q));
    return id;
}

int64_t Scheduler::n_decoding() const {
    return std::count_if(active_.begin(), active_.end(), [](const std::unique_ptr<Request>& r) {
        return !r->done && r->seq >= 0 && r->n_computed == static_cast<int64_t>(r->tokens.size()) - 1;
    });
}

void Scheduler::cancel(RequestId id) {
    for (auto& r : active_)
        if (r->id == id) r->cancel_requested = true;
}

void Scheduler::finish(Request& r, FinishReason why, std::vector<TokenEvent>& events, int32_t token) {
    if (r.seq >= 0) mem_.close(r.seq);
    r.seq = -1;
    r.done = true;  // dropped by drop_finished
    events.push_back({r.id, token, why});
}

void Scheduler::drop_finished() {
    std::erase_if(active_, [](const std::unique_ptr<Request>& r) { return r->done; });
}

void Scheduler::preempt(Request& r) {
    mem_.close(r.seq);
    r.seq = -1;
    r.n_computed = 0;  // recompute prompt + generated tokens when it runs again
    ++stats_.preemptions;
}

// Decode rows first (one per request whose known tokens are all but the last computed), then
// prompt chunks in admission order while the budget lasts.
void Scheduler::plan(std::vector<Run>& runs) {
    runs.clear();
    int64_t left = opt_.token_budget;
    for (auto& r : active_) {
        if (left == 0 || decode_paused_) break;
        if (r->seq >= 0 && r->n_computed == static_cast<int64_t>(r->tokens.size()) - 1) {
            runs.push_back({r.get(), 1});
            --left;
        }
    }
    for (auto& r : active_) {
        if (left == 0) break;
        const int64_t want = static_cast<int64_t>(r->tokens.size()) - r->n_computed;
        if (r->seq >= 0 && want <= 1) continue;  // in decode (planned above)
        if (r->seq < 0) {
            auto s = mem_.open();
            if (!s.ok()) break;  // every sequence slot is taken: later requests wait too
            r->seq = *s;
        }
        const int64_t n = std::min(want, left);
        runs.push_back({r.get(), n});
        left -= n;
    }
}

// Blocks for every run; when the pool is out of them, preempts the most recently admitted running
// request (dropping its run) and tries again. A request that cannot fit even alone finishes.
bool Scheduler::reserve_or_preempt(std::vector<Run>& runs, std::vector<TokenEvent>& events) {
    for (;;) {
        bool ok = true;
        for (const Run& run : runs)
            if (!mem_.reserve(run.req->seq, run.req->n_computed + run.n).ok()) {
                ok = false;
                break;
            }
        if (ok) return !runs.empty();
        Request* victim = nullptr;
        int n_running = 0;
        for (auto it = active_.rbegin(); it != active_.rend(); ++it)
            if ((*it)->seq >= 0) {
                if (!victim) victim = it->get();
                ++n_running;
            }
        if (!victim) return false;
        std::erase_if(runs, [&](const Run& r) { return r.req == victim; });
        if (n_running == 1)  // alone and still too big for the whole pool
            finish(*victim, FinishReason::kContext, events);
        else
            preempt(*victim);
        if (runs.empty()) return false;
    }
}

Status Scheduler::step(std::vector<TokenEvent>& events, ThreadPool& pool) {
    for (auto& r : active_)
        if (r->cancel_requested && !r->done) finish(*r, FinishReason::kCancelled, events);
    drop_finished();
    if (active_.empty()) return {};
    plan(runs_);
    const bool have = reserve_or_preempt(runs_, events);
    drop_finished();
    if (!have) return {};

    tok_.clear(), pos_.clear(), seq_.clear(), out_rows_.clear(), out_req_.clear();
    for (const Run& run : runs_) {
        Request& r = *run.req;
        for (int64_t i = 0; i < run.n; ++i) {
            tok_.push_back(r.tokens[static_cast<size_t>(r.n_computed + i)]);
            pos_.push_back(r.n_computed + i);
            seq_.push_back(r.seq);
        }
        if (r.n_computed + run.n == static_cast<int64_t>(r.tokens.size())) {
            out_rows_.push_back(static_cast<int32_t>(tok_.size() - 1));
            out_req_.push_back(&r);
        }
    }
    const size_t n_out = out_rows_.size();
    bool on_device = n_out > 0;
    for (Request* r : out_req_) on_device = on_device && r->on_device;
    sampled_.assign(n_out, kNoToken);
    StepOutputs out;
    if (on_device) {
        sample_.clear();
        for (Request* r : out_req_) {
            RowSample s;
            s.params = r->step;
            s.window = r->sampler->penalty_window();
            s.seed = r->sampler->seed();
            s.counter = r->sampler->counter();
            if (s.params.temperature > 0)
                (void)r->sampler->draw_uniform();  // the device draws that counter's u
            sample_.push_back(s);
        }
        out.sample = sample_;
        out.tokens = sampled_;
    } else if (n_out > 0) {
        logits_.resize(n_out * static_cast<size_t>(n_vocab_));
        out.logits = logits_;
    }
    const Batch b{tok_, pos_, seq_, out_rows_};
    PELICAN_TRY(exec_.step(b, mem_, out, pool));

    ++stats_.steps;
    stats_.rows += static_cast<int64_t>(tok_.size());
    for (const Run& run : runs_) {
        if (run.n > 1 || run.req->n_computed < run.req->n_prompt) stats_.prefill_rows += run.n;
        run.req->n_computed += run.n;
    }
    const auto V = static_cast<size_t>(n_vocab_);
    for (size_t i = 0; i < n_out; ++i) {
        Request& r = *out_req_[i];
        int32_t t = sampled_[i];
        if (!on_device) t = r.sampler->sample(std::span(logits_).subspan(i * V, V));
        if (t == kNoToken) {  // no finite logit: nothing can be generated
            finish(r, FinishReason::kStop, events);
            continue;
        }
        r.sampler->accept(t);
        r.tokens.push_back(t);
        ++r.n_generated;
        ++stats_.sampled;
        if (on_device) ++stats_.device_sampled;
        if (std::find(r.stop_ids.begin(), r.stop_ids.end(), t) != r.stop_ids.end())
            finish(r, FinishReason::kStop, events, t);
        else if (r.n_generated >= r.max_tokens)
            finish(r, FinishReason::kLength, events, t);
        else if (static_cast<int64_t>(r.tokens.size()) >
                 mem_.max_seq_tokens())  // no position left to feed it
            finish(r, FinishReason::kContext, events, t);
        else
            events.push_back({r.id, t, FinishReason::kNone});
    }
    drop_finished();
    return {};
}

}  // namespace pelican
