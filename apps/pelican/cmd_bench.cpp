// pelican bench -m MODEL [-p 512] [-n 128] [-r 3] [-t THREADS] [-d DEPTH[,DEPTH...]] [--roofline-gbps X |
// --no-roofline]
//   [--device auto|cpu|cuda] [--json]
// pelican bench -m MODEL --batch 1,8,32,128 [-p 128] [-n 128] [-b 512] [--kv-memory GIB]
//   B sequences decoded together through the scheduler (runtime/batch_bench.h), as llama-batched-bench.
// pelican bench --synthetic ARCH --config JSON --vocab VOCAB [--type q4_0] [--weights-seed S] ...
//   benchmarks a synthetic model (convert/synthetic.h) written into memory, not to disk: for shapes
//   larger than the disk (Qwen3.5-122B-A10B in Q4_0 is ~70 GB; it needs that much free RAM).
// Prefill (pp) and decode (tg) speed like llama-bench's pp512 / tg128: median tok/s of r timed runs
// after one warm-up, with the weight and KV-cache bytes each decoded token reads and the GB/s that
// makes, and that as a % of the machine's streaming-read bandwidth (measured once, ~0.5 s, with the
// same threads, unless given or skipped). A markdown table on stdout, or with --json one JSON object
// (runtime/bench.h); several depths (-d 0,32768) run one bench each on the model loaded once, one
// table or JSON line per depth. On CUDA the decode steps are graph replays without logits and the roofline is
// the GPU's measured copy bandwidth. Also reported: this process' memory (RSS, anonymous and file pages,
// peak; /proc/self/status) right after the load and after the timed runs.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <unistd.h>

#include "command.h"
#include "convert/synthetic.h"
#include "convert/tensor_plan.h"
#include "core/mmap_file.h"
#include "core/proc_memory.h"
#include "pelican/engine.h"
#include "runtime/batch_bench.h"
#include "runtime/bench.h"

namespace pelican::cli {
namespace {

struct BenchArgs {
    std::string model;
    BenchParams params;
    bool json = false;
    std::string depths = "0";  // -d: one or more decode depths
    std::string device = "auto";
    std::string batches;       // --batch: B values; set = the many-sequence bench
    double kv_memory_gib = 0;  // --kv-memory
    // --synthetic: a model generated into memory.
    std::string synthetic, config, vocab, type = "q4_0";
    uint64_t weights_seed = 0;
};

// The synthetic model's in-memory file (closed when the bench ends).
struct FdGuard {
    int fd = -1;
    ~FdGuard() {
        if (fd >= 0) ::close(fd);
    }
};

Expected<MemoryModel> synthetic_model(const BenchArgs& a) {
    if (!a.model.empty()) return make_error("bench: give either -m MODEL or --synthetic ARCH, not both");
    if (a.config.empty()) return make_error("bench --synthetic: --config JSON is required");
    if (a.vocab.empty())
        return make_error("bench --synthetic: --vocab (GGUF, tokenizer.json or HF folder) is required");
    SyntheticOptions s;
    s.arch = a.synthetic;
    s.vocab = a.vocab;
    s.seed = a.weights_seed;
    if (a.config.find('{') != std::string::npos) {
        s.config_json = a.config;
        s.config_name = "--config";
    } else {
        PELICAN_ASSIGN(s.config_json, read_text_file(a.config));
        s.config_name = a.config;
    }
    ConvertOptions opt;
    PELICAN_ASSIGN(opt.type, parse_convert_type(a.type));
    opt.name = "synthetic-" + a.synthetic;
    opt.emit.progress = true;
    return write_synthetic_to_memory(s, opt);
}

int run(const BenchArgs& a) {
    FdGuard mem;
    std::string model = a.model;
    auto depths = parse_depths(a.depths);
    if (!depths) return report_error(depths.error());
    BenchParams deepest = a.params;  // checked before the load: the largest depth
    for (int64_t d : *depths) deepest.depth = std::max(deepest.depth, d);
    if (!a.synthetic.empty()) {
        // Check the cheap parameters before writing gigabytes.
        Status s = check_bench_params(deepest, 0);
        if (!s.ok()) return report_error(s.error());
        auto m = synthetic_model(a);
        if (!m) return report_error(m.error());
        mem.fd = m->fd;
        model = m->path;
    }
    if (model.empty())
        return report_error(
            "bench: give a model with -m MODEL (a GGUF file or a Hugging Face model folder) or --synthetic "
            "ARCH");
    std::error_code ec;
    if (!std::filesystem::exists(model, ec))
        return report_error(fmt::format("bench: model {} not found", model));
    // Check what can be checked before the (slow) load; the context is checked after it.
    Status s = check_bench_params(deepest, 0);
    if (!s.ok()) return report_error(s.error());
    auto device = parse_device(a.device);
    if (!device) return report_error(fmt::format("bench: --device: {}", device.error().message));

    auto engine = Engine::load(model, EngineOptions{.device = *device});
    if (!engine) return report_error(engine.error());
    std::optional<ProcMemory> loaded;  // before any run allocates its cache and scratch
    if (auto m = read_proc_memory(); m.ok()) loaded = *m;
    // The model's context, before any timed run.
    if (Status c = check_bench_params(deepest, (*engine)->n_ctx_train()); !c.ok())
        return report_error(c.error());
    if (!a.batches.empty()) {
        auto batches = parse_batches(a.batches);
        if (!batches) return report_error(batches.error());
        BatchBenchParams bp;
        bp.batches = *batches;
        bp.n_prompt = a.params.n_prompt;
        bp.n_gen = a.params.n_gen;
        bp.n_batch = a.params.n_batch;
        bp.n_threads = a.params.n_threads;
        bp.seed = a.params.seed;
        bp.kv_memory_gib = a.kv_memory_gib;
        auto r = run_batch_bench(**engine, bp);
        if (!r) return report_error(r.error());
        const std::string out = a.json ? batch_bench_json(*r) : batch_bench_table(*r);
        std::fputs(out.c_str(), stdout);
        std::fflush(stdout);
        return 0;
    }
    for (int64_t depth : *depths) {
        BenchParams p = a.params;
        p.depth = depth;
        auto result = run_bench(**engine, p);
        if (!result) return report_error(result.error());
        result->memory_after_load = loaded;
        if (!a.synthetic.empty()) {  // name it by what it is, not by its /proc/self/fd path
            const std::string shape = a.config.find('{') != std::string::npos
                                          ? "inline"
                                          : std::filesystem::path(a.config).stem().string();
            result->model_path = fmt::format("synthetic {} {} {}", a.synthetic, shape, a.type);
        }
        const std::string out = a.json ? bench_json(*result) + "\n" : bench_table(*result);
        std::fputs(out.c_str(), stdout);
        std::fflush(stdout);
    }
    return 0;
}

void setup(CLI::App& app) {
    auto a = std::make_shared<BenchArgs>();
    BenchParams& p = a->params;
    auto* sub = app.add_subcommand("bench", "Measure prefill and decode speed (tok/s, bytes/token, GB/s)");
    sub->add_option("-m,--model", a->model, "GGUF file or Hugging Face model folder");
    sub->add_option("-p,--n-prompt", p.n_prompt, "Prefill tokens, from an empty cache")
        ->capture_default_str();
    sub->add_option("-n,--n-gen", p.n_gen, "Decoded tokens, one per step")->capture_default_str();
    sub->add_option("-r,--repetitions", p.reps, "Timed repetitions (after one warm-up)")
        ->capture_default_str();
    sub->add_option("-t,--threads", p.n_threads, "Compute threads (0: all cores)")->capture_default_str();
    sub->add_option("-d,--depth", a->depths,
                    "Tokens in the cache before decoding starts; a comma-separated list runs one bench per "
                    "depth on the model loaded once (-d 0,4096,32768)")
        ->capture_default_str();
    sub->add_option("-b,--batch-size", p.n_batch, "Most prompt tokens per forward step")
        ->capture_default_str();
    sub->add_option("-s,--seed", p.seed, "Seed of the random tokens")->capture_default_str();
    auto* given = sub->add_option("--roofline-gbps", p.roofline_gbps,
                                  "Known read bandwidth in GB/s for the % of roofline (skips measuring it)");
    sub->add_flag(
           "--no-roofline", [a](int64_t) { a->params.measure_roofline = false; },
           "Do not measure the read bandwidth (no % of roofline)")
        ->excludes(given);
    sub->add_option("--device", a->device,
                    "Where to run: auto (CUDA when available and supported), cpu or cuda")
        ->capture_default_str();
    sub->add_flag("--json", a->json, "Print one JSON object instead of the table");
    sub->add_option("--batch", a->batches,
                    "Many sequences decoded together through the scheduler, as llama-batched-bench -npl: a "
                    "comma-separated list of batch sizes (--batch 1,8,32,128 with -p 128 -n 128); -b is the "
                    "most rows per step");
    sub->add_option("--kv-memory", a->kv_memory_gib,
                    "--batch: KV pool size in GiB (default: room for every sequence's prompt and output)");
    sub->add_option(
        "--synthetic", a->synthetic,
        "Benchmark a synthetic model of this architecture generated into memory (no file; "
        "needs RAM for the whole model): llama, mistral, qwen2, qwen3, granite, qwen3_5_moe, qwen3_5");
    sub->add_option("--config", a->config, "--synthetic: config.json-style shape (a file or inline JSON)");
    sub->add_option("--vocab", a->vocab, "--synthetic: vocabulary (GGUF, tokenizer.json or HF folder)");
    sub->add_option("--type", a->type, "--synthetic: weight type (as pelican convert --type)")
        ->capture_default_str();
    sub->add_option("--weights-seed", a->weights_seed, "--synthetic: seed of the random weights")
        ->capture_default_str();
    sub->callback([a] { set_exit_code(run(*a)); });
}

}  // namespace
}  // namespace pelican::cli

PELICAN_COMMAND(bench, pelican::cli::setup);
