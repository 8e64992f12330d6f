// `pelican bench`: prefill and decode speed of a loaded model, measured the way llama-bench measures
// pp512 / tg128, plus the bytes one decoded token reads (weights and KV cache) and the GB/s that
// makes.
//
//   PELICAN_ASSIGN(auto engine, Engine::load(path));
//   PELICAN_ASSIGN(BenchResult r, run_bench(*engine, {.n_prompt = 512, .n_gen = 128, .reps = 3}));
//   std::fputs(bench_table(r).c_str(), stdout);
//
// Prefill: n_prompt random tokens evaluated in one call from an empty cache (chunked by n_batch
//   inside the engine), logits of the last token only.
// Decode: the cache is emptied, `depth` random tokens are evaluated untimed, then n_gen single-token
//   steps are timed. Each step feeds a pre-drawn random token without sampling, as llama-bench's tg
//   test does (it calls llama_decode on rand() % n_vocab): the figure is the forward pass alone, with
//   no sampler or argmax cost.
// Tokens are drawn from a seeded generator among the ids the tokenizer calls normal or byte tokens
// (no control, user-defined, unused or unknown tokens, no BOS or end-of-generation ids).
// One untimed warm-up repetition (prefill and decode) precedes the `reps` timed ones.
// Roofline: unless the bytes one CPU decode step reads fit in the last-level cache (then no
//   roofline applies and none is printed), after the timed runs the machine's streaming-read
//   bandwidth is measured once with the
//   same thread count (backend/cpu/mem_bandwidth.h: 1 GiB on huge pages, less if that cannot be
//   allocated, ~0.5 s), and decode GB/s is reported as a percentage of it. A known figure can be
//   given instead (roofline_gbps), or the probe skipped (measure_roofline = false).
// On CUDA (an engine loaded for the GPU): prefill is the same eval, synchronised before the clock
//   stops; decode is n_gen graph-replayed steps without logits or sampling (CudaForward::
//   decode_no_logits) with one synchronisation after the last; bytes per token are the GPU
//   weights one step reads (GpuModel::decode_read_bytes) plus the KV cache at its element size
//   (F16: 2 bytes); the roofline is the device's measured copy bandwidth (a 1 GiB device-to-device
//   cudaMemcpy, read + write bytes, median of 10).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/proc_memory.h"
#include "core/status.h"

namespace pelican {

class Engine;
class Model;

struct BenchParams {
    int64_t n_prompt = 512;               // prefill tokens (-p)
    int64_t n_gen = 128;                  // decoded tokens (-n)
    int64_t depth = 0;                    // tokens in the cache before decoding starts (-d)
    int reps = 3;                         // timed repetitions (-r)
    int n_threads = 0;                    // compute threads (-t); 0 = ThreadPool::default_thread_count()
    int64_t n_batch = 512;                // most prompt tokens per forward step (llama-bench's n_ubatch)
    uint64_t seed = 1234;                 // token generator seed
    bool measure_roofline = true;         // probe the read bandwidth unless given (--no-roofline: false)
    std::optional<double> roofline_gbps;  // a known read roofline in GB/s (--roofline-gbps)
};

// Bytes of the weights one decode step reads, from the loaded model's tensors: every layer matrix,
// norm and bias, the output norm and output (LM head) matrix at their stored type, and one row of
// the token embedding. Matrices count at their stored type (logical rows, without the padding a
// 16-row repack adds to the last group); norms and biases as the fp32 vectors the kernels read.
struct ModelBytes {
    int64_t decode_weight_bytes = 0;  // read per decoded token
    int64_t total_bytes = 0;          // every weight tensor once (the embedding whole; a tied output once)
    int64_t n_params = 0;             // elements of every weight tensor (a tied output once)
    std::string types;                // matrix/embedding types, most bytes first: "q4_0, q6_k"
};
ModelBytes model_bytes(const Model& model);

// KV-cache bytes one decode step reads, averaged over the steps at positions depth .. depth +
// n_gen - 1: the step at position pos attends min(pos + 1, sliding window) positions, K and V,
// every layer, fp32 rows of kv_dim.
struct KvBytes {
    double mean_positions = 0;  // positions attended per step, averaged
    double bytes_per_token = 0;
};
// elem_bytes: bytes of one cached K or V element (fp32 on the CPU; the GPU's F16 cache: 2).
KvBytes decode_kv_bytes(const Model& model, int64_t depth, int64_t n_gen, int elem_bytes = 4);

// Errors with the option to change: non-positive -p/-n/-r, negative -d or -t, too many threads,
// a --roofline-gbps that is not a positive finite number,
// a context the model does not have (n_ctx_train; a model that does not say is not limited).
Status check_bench_params(const BenchParams& p, int64_t n_ctx_train);

struct BenchRun {
    double prefill_s = 0;  // wall time of the n_prompt-token prefill
    double decode_s = 0;   // wall time of the n_gen decode steps (the depth prefill excluded)
};

struct RateStats {
    double median = 0, min = 0, max = 0;  // tok/s over the repetitions
};

struct BenchResult {
    BenchParams params;
    std::string model_path;
    std::string model_desc;       // Model::describe()
    int n_threads = 0;            // threads actually used
    std::string device = "cpu";   // "cpu" or "cuda: <GPU>" (Engine::device_description)
    std::string kv_type = "f32";  // KV cache element type
    int64_t n_ctx = 0;            // session context: max(n_prompt, depth + n_gen)
    ModelBytes model;
    KvBytes kv;
    std::vector<BenchRun> runs;  // the timed repetitions, in order
    RateStats prefill;
    RateStats decode;
    double gbps = 0;  // (decode weight + KV bytes per token) * median decode tok/s / 1e9
    // Read roofline: 0 when skipped (--no-roofline); roofline_pct = 100 * gbps / roofline_gbps.
    double roofline_gbps = 0;
    double roofline_pct = 0;
    std::string roofline_source;  // "measured: 1.00 GiB, 2 threads, median of 9 passes", "given", "skipped"
    // CPU: the last-level cache (0: unknown), and whether the bytes read per token fit in it (then
    // no roofline is measured: roofline_gbps 0 unless given, the table says "in cache").
    int64_t llc_bytes = 0;
    bool fits_in_cache = false;
    // This process' memory (core/proc_memory.h): right after Engine::load (set by the caller, which
    // sees the load; unset: not shown), and after the timed runs (set by run_bench when
    // /proc/self/status can be read; before the roofline probe, whose buffer would raise the peak).
    std::optional<ProcMemory> memory_after_load;
    std::optional<ProcMemory> memory_after_runs;
};

Expected<BenchResult> run_bench(const Engine& engine, const BenchParams& p);

// Ids a benchmark may feed: normal and byte tokens below the model's vocabulary, minus BOS/EOS and
// end-of-generation ids (every id when there is no tokenizer).
std::vector<int32_t> plain_token_ids(const Engine& engine);

// The -d argument: one depth or a comma-separated list ("0,4096,32768": one bench per depth on the
// same loaded model, as llama-bench's -d). Errors name the bad entry.
Expected<std::vector<int64_t>> parse_depths(const std::string& s);

// Median, min and max of n / seconds over the runs.
RateStats rate_stats(const std::vector<double>& seconds, int64_t n);

// A short markdown table (model, types, size, params, threads, pp/tg tok/s, bytes/token, GB/s,
// % of roofline), a line "decode: X GB/s = Y% of measured read roofline Z GB/s (how)" and, when
// known, "memory after load: RSS .. (anon .., file ..), peak ..; after the runs: ...".
std::string bench_table(const BenchResult& r);
// One JSON object (one line): medians, min/max, bytes, GB/s, roofline_gbps / roofline_pct (null
// when skipped), the parameters, every run's times, and memory_after_load / memory_after_runs
// ({"rss", "anon", "file", "shmem", "peak"} in bytes, or null when unknown).
std::string bench_json(const BenchResult& r);

}  // namespace pelican
