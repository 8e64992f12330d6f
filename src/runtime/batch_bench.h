// `pelican bench --batch 1,8,32,128`: aggregate prefill and decode speed of B sequences decoded
// together through the Scheduler (runtime/scheduler.h) on the engine's executor, measured the way
// llama.cpp's llama-batched-bench measures -npp P -ntg N -npl B:
//
//   for each B: an empty memory; B requests of P random tokens (the ids bench uses), greedy, no stop
//   ids, N + 1 tokens each;
//   prefill: with decode paused, steps of at most n_batch rows until every prompt is done (each
//     request samples its first token at the end of its prompt): pp = B * P / t_pp;
//   decode: then N steps of B rows (one per sequence, each at its own position, every step sampling B
//     tokens on the device when the executor can): tg = B * N / t_tg;
//   total = (B * P + B * N) / (t_pp + t_tg) (llama-batched-bench's S).
// With a pool too small for the batch (--kv-memory), prefill ends when no prompt can go on (those
// done hold their blocks while decode is paused): pp then counts the prompt rows fed, the rest of the
// prompts (and any recomputation after preemption) run inside the decode phase, and tg counts the
// tokens generated there.
// One untimed warm-up (the smallest B, N = 4) runs first. The KV pool holds B * (P + N + 1) positions
// unless --kv-memory gives its size; its capacity in tokens and bytes is reported, and a pool too
// small for the batch shows up as preemptions (evict and recompute), which are counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace pelican {

class Engine;

struct BatchBenchParams {
    std::vector<int32_t> batches{1, 8, 32, 128};  // B values (--batch)
    int64_t n_prompt = 128;                       // P (-p)
    int64_t n_gen = 128;                          // N (-n)
    int64_t n_batch = 512;                        // most rows per step (-b)
    int32_t block_tokens = 16;                    // KV block size
    double kv_memory_gib = 0;                     // KV pool size; 0 = B * (P + N + 1) positions
    int n_threads = 0;                            // CPU threads (0: default)
    uint64_t seed = 1234;                         // prompt tokens
};

struct BatchBenchRow {
    int32_t batch = 0;
    double pp_s = 0, tg_s = 0;
    double pp_tps = 0, tg_tps = 0, total_tps = 0;
    int64_t kv_capacity_tokens = 0;  // positions the pool holds
    double kv_bytes = 0;             // bytes of the pool (and recurrent state)
    int64_t preemptions = 0;
    int64_t device_sampled = 0;  // tokens sampled on the device
    int64_t steps = 0;
};

struct BatchBenchResult {
    BatchBenchParams params;
    std::string model_path, model_desc, device;
    std::vector<BatchBenchRow> rows;
};

// The --batch argument: a comma-separated list of positive sizes. Errors name the bad entry.
Expected<std::vector<int32_t>> parse_batches(const std::string& s);

// Errors: bad parameters, executor / memory creation (out of memory), a failed step.
Expected<BatchBenchResult> run_batch_bench(const Engine& engine, const BatchBenchParams& p);

// Markdown table (B, PP, TG, t_pp, S_pp, t_tg, S_tg, S total, KV capacity, preemptions), and JSON
// (one line per B).
std::string batch_bench_table(const BatchBenchResult& r);
std::string batch_bench_json(const BatchBenchResult& r);

}  // namespace pelican
