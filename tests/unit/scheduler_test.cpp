// The Scheduler (runtime/scheduler.h) on the CPU executor: many requests decoded together with
// chunked prefill under a small token budget generate exactly what each generates alone (greedy and
// seeded sampling); a pool too small for all of them preempts and recomputes with the same output
// and no leaked block; cancel, stop ids, max_tokens and the context end requests with the right
// reason; bad requests are refused.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "backend/cpu/cpu_executor.h"
#include "model/model.h"
#include "model_test_util.h"
#include "runtime/forward_factory.h"

namespace pelican {
namespace {

using test::TempDir;
using test::TinySpec;

struct Fixture {
    TempDir dir{"sched"};
    std::unique_ptr<Model> model;
    std::unique_ptr<cpu::CpuExecutor> exec;
    ThreadPool pool{2};
    Fixture() {
        TinySpec s;
        s.model_type = "qwen3";
        s.qk_norm = true;
        test::write_hf_folder(dir.str("hf"), s, test::make_weights(s));
        auto m = Model::load(dir.str("hf"));
        EXPECT_TRUE(m.ok()) << m.error().message;
        model = std::move(m).value();
        auto e = cpu::CpuExecutor::create(*model, {.max_batch_tokens = 64});
        EXPECT_TRUE(e.ok());
        exec = std::move(e).value();
    }
    int64_t V() const { return model->hparams().n_vocab; }

    // What the request generates run alone: prompt, then one token per step with its own sampler.
    std::vector<int32_t> alone(const RequestOptions& r) {
        auto pass = create_cpu_pass(*model, ForwardOptions{.n_ctx = 64});
        EXPECT_TRUE(pass.ok());
        auto s = Sampler::create(r.sampling);
        EXPECT_TRUE(s.ok());
        for (int32_t t : r.prompt) s->accept(t);
        std::vector<int32_t> out;
        EXPECT_TRUE((*pass)->eval(r.prompt, 0, pool).ok());
        int64_t pos = static_cast<int64_t>(r.prompt.size());
        while (static_cast<int64_t>(out.size()) < r.max_tokens) {
            std::vector<float> l((*pass)->last_logits().begin(), (*pass)->last_logits().end());
            const int32_t t = s->sample(l);
            s->accept(t);
            out.push_back(t);
            if (std::find(r.stop_ids.begin(), r.stop_ids.end(), t) != r.stop_ids.end()) break;
            if (static_cast<int64_t>(out.size()) == r.max_tokens) break;
            EXPECT_TRUE((*pass)->eval(std::span(&out.back(), 1), pos++, pool).ok());
        }
        return out;
    }
};

std::vector<int32_t> random_prompt(size_t n, int64_t V, std::mt19937& rng) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
    return t;
}

// Runs every request to the end; returns the tokens and finish reason of each.
struct Result {
    std::vector<int32_t> tokens;
    FinishReason finish = FinishReason::kNone;
};
std::map<RequestId, Result> drain(Scheduler& s, ThreadPool& pool, int max_steps = 10000) {
    std::map<RequestId, Result> out;
    std::vector<TokenEvent> ev;
    for (int i = 0; i < max_steps && !s.idle(); ++i) {
        ev.clear();
        Status st = s.step(ev, pool);
        EXPECT_TRUE(st.ok()) << st.error().message;
        for (const TokenEvent& e : ev) {
            auto& r = out[e.id];
            EXPECT_EQ(r.finish, FinishReason::kNone) << "event after the end of request " << e.id;
            if (e.token != kNoToken) r.tokens.push_back(e.token);
            r.finish = e.finish;
        }
    }
    EXPECT_TRUE(s.idle());
    return out;
}

SamplerParams greedy() {
    SamplerParams p;
    p.temperature = 0;
    return p;
}

// Twelve requests of 1..30 prompt tokens, greedy and seeded, budget 16 rows per step: prefill is
// chunked and mixed with decode rows of the others; each output equals the request alone.
TEST(Scheduler, ManyRequestsGenerateWhatEachGeneratesAlone) {
    Fixture fx;
    auto mem = fx.exec->create_memory({.max_seqs = 6, .max_seq_tokens = 64, .block_tokens = 4});
    ASSERT_TRUE(mem.ok());
    const int32_t free0 = (*mem)->n_free_blocks();
    Scheduler s(*fx.exec, **mem, {.token_budget = 16});
    std::mt19937 rng(4);
    std::map<RequestId, RequestOptions> reqs;
    for (int i = 0; i < 12; ++i) {
        RequestOptions r;
        r.prompt = random_prompt(1 + rng() % 30, fx.V(), rng);
        r.max_tokens = 3 + static_cast<int64_t>(rng() % 12);
        r.sampling = i % 2 ? greedy() : SamplerParams{};
        r.sampling.seed = 100 + static_cast<uint64_t>(i);
        auto id = s.admit(r);
        ASSERT_TRUE(id.ok()) << id.error().message;
        reqs[*id] = r;
    }
    const auto got = drain(s, fx.pool);
    ASSERT_EQ(got.size(), reqs.size());
    for (const auto& [id, r] : reqs) {
        EXPECT_EQ(got.at(id).tokens, fx.alone(r)) << "request " << id;
        EXPECT_EQ(got.at(id).finish, FinishReason::kLength);
    }
    EXPECT_GT(s.stats().steps, 0);
    EXPECT_EQ(s.stats().device_sampled, 0);  // the CPU executor samples on the host
    EXPECT_EQ((*mem)->n_open(), 0);
    EXPECT_EQ((*mem)->n_free_blocks(), free0);
}

// A pool of 24 positions for requests needing up to 30 each: the scheduler preempts and
// recomputes, and every output is still what the request generates alone.
TEST(Scheduler, PreemptsWhenThePoolIsFullAndRecomputes) {
    Fixture fx;
    auto mem =
        fx.exec->create_memory({.max_seqs = 4, .max_seq_tokens = 64, .kv_tokens = 48, .block_tokens = 4});
    ASSERT_TRUE(mem.ok());
    const int32_t free0 = (*mem)->n_free_blocks();
    Scheduler s(*fx.exec, **mem, {.token_budget = 32});
    std::mt19937 rng(8);
    std::map<RequestId, RequestOptions> reqs;
    for (int i = 0; i < 6; ++i) {
        RequestOptions r;
        r.prompt = random_prompt(10 + rng() % 8, fx.V(), rng);
        r.max_tokens = 12;
        r.sampling = greedy();
        reqs[s.admit(r).value()] = r;
    }
    const auto got = drain(s, fx.pool);
    EXPECT_GT(s.stats().preemptions, 0);
    for (const auto& [id, r] : reqs) EXPECT_EQ(got.at(id).tokens, fx.alone(r)) << "request " << id;
    EXPECT_EQ((*mem)->n_free_blocks(), free0);
}

TEST(Scheduler, CancelStopAndContextEndRequests) {
    Fixture fx;
    auto mem = fx.exec->create_memory({.max_seqs = 4, .max_seq_tokens = 20, .block_tokens = 4});
    ASSERT_TRUE(mem.ok());
    Scheduler s(*fx.exec, **mem, {.token_budget = 64});
    std::mt19937 rng(2);
    RequestOptions base;
    base.prompt = random_prompt(5, fx.V(), rng);
    base.max_tokens = 10;
    base.sampling = greedy();
    const auto want = fx.alone(base);
    // Stop at the third generated token: reported, then kStop.
    RequestOptions stop = base;
    stop.stop_ids = {want[2]};
    const auto stop_want = fx.alone(stop);
    const RequestId a = s.admit(stop).value();
    // Cancelled after its first token.
    const RequestId b = s.admit(base).value();
    // Context: 17-token prompt in a context of 20 -> 4 tokens at most (positions 17, 18, 19 fed).
    RequestOptions ctx = base;
    ctx.prompt = random_prompt(17, fx.V(), rng);
    ctx.max_tokens = 50;
    const RequestId c = s.admit(ctx).value();
    std::map<RequestId, Result> got;
    std::vector<TokenEvent> ev;
    while (!s.idle()) {
        ev.clear();
        ASSERT_TRUE(s.step(ev, fx.pool).ok());
        for (const auto& e : ev) {
            if (e.token != kNoToken) got[e.id].tokens.push_back(e.token);
            got[e.id].finish = e.finish;
            if (e.id == b && e.finish == FinishReason::kNone) s.cancel(b);
        }
    }
    EXPECT_EQ(got[a].tokens, stop_want);
    EXPECT_EQ(got[a].tokens.back(), want[2]);
    EXPECT_EQ(got[a].finish, FinishReason::kStop);
    EXPECT_EQ(got[b].tokens.size(), 1u);
    EXPECT_EQ(got[b].finish, FinishReason::kCancelled);
    EXPECT_EQ(got[c].tokens.size(), 4u);
    EXPECT_EQ(got[c].finish, FinishReason::kContext);
    EXPECT_EQ((*mem)->n_open(), 0);
}

TEST(Scheduler, BadRequestsAreRefused) {
    Fixture fx;
    auto mem = fx.exec->create_memory({.max_seqs = 2, .max_seq_tokens = 16});
    ASSERT_TRUE(mem.ok());
    Scheduler s(*fx.exec, **mem, {});
    const auto refused = [&](RequestOptions r, const char* what) {
        auto id = s.admit(std::move(r));
        ASSERT_FALSE(id.ok()) << what;
        EXPECT_NE(id.error().message.find(what), std::string::npos) << id.error().message;
    };
    refused({}, "empty");
    refused({.prompt = {static_cast<int32_t>(fx.V())}}, "outside the vocabulary");
    refused({.prompt = {1}, .max_tokens = 0}, "max_tokens");
    refused({.prompt = std::vector<int32_t>(16, 1)}, "no room");
    RequestOptions bad{.prompt = {1}};
    bad.sampling.top_p = 2;
    refused(bad, "top_p");
    EXPECT_TRUE(s.idle());
}

}  // namespace
}  // namespace pelican
