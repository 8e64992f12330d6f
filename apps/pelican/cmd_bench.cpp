// pelican bench -m MODEL [-p 512] [-n 128] [-r 3] [-t THREADS] [-d DEPTH] [--roofline-gbps X | --no-roofline]
//   [--device auto|cpu|cuda] [--json]
// Prefill (pp) and decode (tg) speed like llama-bench's pp512 / tg128: median tok/s of r timed runs
// after one warm-up, with the weight and KV-cache bytes each decoded token reads and the GB/s that
// makes, and that as a % of the machine's streaming-read bandwidth (measured once, ~0.5 s, with the
// same threads, unless given or skipped). A markdown table on stdout, or with --json one JSON object
// (runtime/bench.h). On CUDA the decode steps are graph replays without logits and the roofline is the
// GPU's measured copy bandwidth.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "command.h"
#include "pelican/engine.h"
#include "runtime/bench.h"

namespace pelican::cli {
namespace {

struct BenchArgs {
    std::string model;
    BenchParams params;
    bool json = false;
    std::string device = "auto";
};

int run(const BenchArgs& a) {
    if (a.model.empty())
        return report_error("bench: give a model with -m MODEL (a GGUF file or a Hugging Face model folder)");
    std::error_code ec;
    if (!std::filesystem::exists(a.model, ec))
        return report_error(fmt::format("bench: model {} not found", a.model));
    // Check what can be checked before the (slow) load; the context is checked after it.
    Status s = check_bench_params(a.params, 0);
    if (!s.ok()) return report_error(s.error());
    auto device = parse_device(a.device);
    if (!device) return report_error(fmt::format("bench: --device: {}", device.error().message));

    auto engine = Engine::load(a.model, EngineOptions{.device = *device});
    if (!engine) return report_error(engine.error());
    auto result = run_bench(**engine, a.params);
    if (!result) return report_error(result.error());
    const std::string out = a.json ? bench_json(*result) + "\n" : bench_table(*result);
    std::fputs(out.c_str(), stdout);
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
    sub->add_option("-d,--depth", p.depth, "Tokens in the cache before decoding starts")
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
    sub->callback([a] { set_exit_code(run(*a)); });
}

}  // namespace
}  // namespace pelican::cli

PELICAN_COMMAND(bench, pelican::cli::setup);
