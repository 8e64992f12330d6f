// run_batch_bench (batch_bench.h).
#include "runtime/batch_bench.h"

#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "model/model.h"
#include "pelican/engine.h"
#include "runtime/bench.h"
#include "runtime/forward_factory.h"
#include "runtime/scheduler.h"

namespace pelican {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// KV bytes per position of this executor's memory (two pools of different sizes, their difference).
Expected<double> bytes_per_position(Executor& exec, int32_t bt) {
    PELICAN_ASSIGN(auto a, exec.create_memory(
                               {.max_seqs = 1, .max_seq_tokens = bt, .kv_tokens = bt, .block_tokens = bt}));
    PELICAN_ASSIGN(
        auto b,
        exec.create_memory({.max_seqs = 1, .max_seq_tokens = bt, .kv_tokens = 2 * bt, .block_tokens = bt}));
    return static_cast<double>(b->storage().bytes() - a->storage().bytes()) / bt;
}

struct Phase {
    double pp_s = 0, tg_s = 0;
    int64_t pp_tokens = 0;  // prompt rows fed while decode was paused
    int64_t tg_tokens = 0;
};

// B requests through a fresh scheduler: prefill with decode paused, then decode.
Expected<Phase> run_one(Executor& exec, SequenceMemory& mem, int32_t B, int64_t P, int64_t N, int64_t n_batch,
                        const std::vector<int32_t>& ids, std::mt19937_64& rng, ThreadPool& pool,
                        SchedulerStats* stats) {
    Scheduler s(exec, mem, {.token_budget = n_batch});
    for (int32_t i = 0; i < B; ++i) {
        RequestOptions r;
        r.prompt.resize(static_cast<size_t>(P));
        for (auto& t : r.prompt) t = ids[rng() % ids.size()];
        r.sampling.temperature = 0;
        r.max_tokens = N + 1;
        PELICAN_ASSIGN(const RequestId id, s.admit(std::move(r)));
        (void)id;
    }
    std::vector<TokenEvent> ev;
    ev.reserve(static_cast<size_t>(B) * 2);
    Phase ph;
    s.set_decode_paused(true);
    PELICAN_TRY(exec.synchronize());
    const auto t0 = Clock::now();
    // Until every prompt is done, or no prompt can go on with decode paused (a pool too small for
    // the batch: the prompts that are done hold their blocks until decode frees them).
    while (s.n_decoding() < B && !s.idle()) {
        ev.clear();
        const int64_t rows = s.stats().rows;
        PELICAN_TRY(s.step(ev, pool));
        if (s.stats().rows == rows && s.stats().preemptions > 0) break;
    }
    PELICAN_TRY(exec.synchronize());
    ph.pp_s = since(t0);
    ph.pp_tokens = s.stats().rows;
    s.set_decode_paused(false);
    const auto t1 = Clock::now();
    while (!s.idle()) {
        ev.clear();
        PELICAN_TRY(s.step(ev, pool));
        for (const TokenEvent& e : ev) ph.tg_tokens += e.token != kNoToken;
    }
    PELICAN_TRY(exec.synchronize());
    ph.tg_s = since(t1);
    if (stats) *stats = s.stats();
    return ph;
}

}  // namespace

Expected<std::vector<int32_t>> parse_batches(const std::string& s) {
    std::vector<int32_t> out;
    size_t i = 0;
    while (i <= s.size()) {
        const size_t j = std::min(s.find(',', i), s.size());
        const std::string item = s.substr(i, j - i);
        size_t used = 0;
        long v = 0;
        try {
            v = std::stol(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (item.empty() || used != item.size() || v <= 0 || v > 65536)
            return make_error("--batch: '{}' is not a batch size (1 to 65536; e.g. --batch 1,8,32,128)",
                              item);
        out.push_back(static_cast<int32_t>(v));
        i = j + 1;
    }
    return out;
}

Expected<BatchBenchResult> run_batch_bench(const Engine& engine, const BatchBenchParams& p) {
    if (p.batches.empty()) return make_error("bench --batch: no batch sizes");
    if (p.n_prompt <= 0 || p.n_gen <= 0)
        return make_error("bench --batch: -p and -n must be positive (got {} and {})", p.n_prompt, p.n_gen);
    if (p.n_batch <= 0) return make_error("bench --batch: -b must be positive, got {}", p.n_batch);
    if (!(p.kv_memory_gib >= 0)) return make_error("bench --batch: --kv-memory must be >= 0 GiB");
    const int64_t ctx = p.n_prompt + p.n_gen + 1;
    if (engine.n_ctx_train() > 0 && ctx > engine.n_ctx_train())
        return make_error("bench --batch: -p + -n + 1 = {} exceeds the model's context of {}", ctx,
                          engine.n_ctx_train());
    const int32_t max_b = *std::max_element(p.batches.begin(), p.batches.end());
    // The pool-size probe (bytes_per_position) makes memories of one block: the executor must take a
    // sequence of a block's positions even when -p + -n + 1 is shorter.
    PELICAN_ASSIGN(std::unique_ptr<Executor> exec,
                   create_executor(engine, {.max_batch_tokens = p.n_batch,
                                            .max_seqs = max_b,
                                            .max_seq_tokens = std::max<int64_t>(ctx, p.block_tokens)}));
    PELICAN_ASSIGN(std::unique_ptr<ThreadPool> pool, ThreadPool::create(p.n_threads));
    PELICAN_ASSIGN(const double per_pos, bytes_per_position(*exec, p.block_tokens));
    const std::vector<int32_t> ids = plain_token_ids(engine);
    if (ids.empty()) return make_error("bench --batch: the vocabulary has no plain tokens to feed");
    std::mt19937_64 rng(p.seed);

    BatchBenchResult res;
    res.params = p;
    res.model_path = engine.model().path();
    res.model_desc = engine.model().describe();
    res.device = engine.device_description();
    const auto memory_for = [&](int32_t B) {
        // One recurrent checkpoint: the bench never truncates (a recurrent state entry per sequence and
        // checkpoint is the bulk of a hybrid model's memory: 60 MiB per entry for the 35B-A3B shape).
        MemoryOptions mo{
            .max_seqs = B, .max_seq_tokens = ctx, .block_tokens = p.block_tokens, .checkpoints = 1};
        if (p.kv_memory_gib > 0 && per_pos > 0)
            mo.kv_tokens = std::max<int64_t>(
                p.block_tokens, static_cast<int64_t>(p.kv_memory_gib * 1024.0 * 1024.0 * 1024.0 / per_pos));
        return exec->create_memory(mo);
    };
    {  // warm-up: kernels' first launches, cuBLAS handles, GEMV tuning
        const int32_t B = *std::min_element(p.batches.begin(), p.batches.end());
        PELICAN_ASSIGN(auto mem, memory_for(B));
        PELICAN_ASSIGN(const Phase warm, run_one(*exec, *mem, B, p.n_prompt, std::min<int64_t>(4, p.n_gen),
                                                 p.n_batch, ids, rng, *pool, nullptr));
        (void)warm;
    }
    for (int32_t B : p.batches) {
        PELICAN_ASSIGN(auto mem, memory_for(B));
        SchedulerStats st;
        PELICAN_ASSIGN(Phase ph,
                       run_one(*exec, *mem, B, p.n_prompt, p.n_gen, p.n_batch, ids, rng, *pool, &st));
        BatchBenchRow r;
        r.batch = B;
        r.pp_s = ph.pp_s;
        r.tg_s = ph.tg_s;
        r.pp_tps = static_cast<double>(ph.pp_tokens) / ph.pp_s;
        r.tg_tps = static_cast<double>(ph.tg_tokens) / ph.tg_s;
        r.total_tps =
            static_cast<double>(B) * static_cast<double>(p.n_prompt + p.n_gen) / (ph.pp_s + ph.tg_s);
        r.kv_capacity_tokens = mem->capacity_tokens();
        r.kv_bytes = static_cast<double>(mem->storage().bytes());
        r.preemptions = st.preemptions;
        r.device_sampled = st.device_sampled;
        r.steps = st.steps;
        res.rows.push_back(r);
    }
    return res;
}

std::string batch_bench_table(const BatchBenchResult& r) {
    std::string s = fmt::format("model: {} ({})\ndevice: {}\n\n", r.model_path, r.model_desc, r.device);
    s += "|    B |   PP |   TG |  t_pp s |  S_pp tok/s |  t_tg s |  S_tg tok/s | S tok/s | KV tokens |   KV "
         "GiB | "
         "preempted | steps |\n";
    s += "|-----:|-----:|-----:|--------:|------------:|--------:|------------:|--------:|----------:|-------"
         "--:|"
         "----------:|------:|\n";
    for (const BatchBenchRow& x : r.rows)
        s += fmt::format(
            "| {:4} | {:4} | {:4} | {:7.3f} | {:11.1f} | {:7.3f} | {:11.1f} | {:7.1f} | {:9} | {:8.3f} | "
            "{:9} | {:5} |\n",
            x.batch, r.params.n_prompt, r.params.n_gen, x.pp_s, x.pp_tps, x.tg_s, x.tg_tps, x.total_tps,
            x.kv_capacity_tokens, x.kv_bytes / (1024.0 * 1024.0 * 1024.0), x.preemptions, x.steps);
    return s;
}

std::string batch_bench_json(const BatchBenchResult& r) {
    std::string s;
    for (const BatchBenchRow& x : r.rows) {
        const nlohmann::json j = {
            {"model", r.model_path},
            {"device", r.device},
            {"batch", x.batch},
            {"n_prompt", r.params.n_prompt},
            {"n_gen", r.params.n_gen},
            {"n_batch", r.params.n_batch},
            {"pp_s", x.pp_s},
            {"pp_tps", x.pp_tps},
            {"tg_s", x.tg_s},
            {"tg_tps", x.tg_tps},
            {"total_tps", x.total_tps},
            {"kv_capacity_tokens", x.kv_capacity_tokens},
            {"kv_bytes", x.kv_bytes},
            {"preemptions", x.preemptions},
            {"device_sampled", x.device_sampled},
            {"steps", x.steps},
        };
        s += j.dump() + "\n";
    }
    return s;
}

}  // namespace pelican
