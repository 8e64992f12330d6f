// pelican run [-m MODEL] (-p PROMPT | -f FILE) [--chat] [-n N] [-c N_CTX] [-t THREADS] [--temp T]
//             [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--stop TEXT]...
//             [--device auto|cpu|cuda]
// Streams the generated text to stdout (flushed per token, well-formed UTF-8 only) and ends with one
// line on stderr: prompt speed, decode forward passes and their speed, the seed, why it stopped.
// --chat renders the prompt as one user message with the model's chat template; the message's
// text never becomes special tokens. Sampling defaults come from the model (generation_config.json
// or GGUF general.sampling.*) where it has them; flags override. Generation ends at -n tokens, at
// an end-of-generation token, at a stop string, or when the context is full ("stop: context full").
// Ctrl-C stops generation, prints the line and exits 130. Without -m it runs the bundled default
// model (default_model.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "core/thread_pool.h"
#include "default_model.h"
#include "interrupt.h"
#include "model/model.h"
#include "pelican/engine.h"
#include "prompt_input.h"

namespace pelican::cli {
namespace {

struct RunArgs {
    std::string model;
    std::string prompt;
    std::string file;
    bool prompt_given = false;
    bool chat = false;
    bool keep_newline = false;
    bool no_special = false;
    int32_t n_predict = 256;
    int64_t n_ctx = 0;
    int n_threads = 0;
    // Sampling: flags given override the model's defaults (generation_defaults.h).
    float temp = 0, top_p = 0, min_p = 0, repeat_penalty = 0;
    int32_t top_k = 0;
    bool temp_given = false, top_p_given = false, min_p_given = false, repeat_given = false,
         top_k_given = false;
    std::string seed = "-1";
    std::vector<std::string> stop;
    bool ignore_eos = false;
    bool verbose = false;
    std::string device = "auto";
    long long template_max_steps = 100000000;  // signed: "-5" is an error, not a huge number
    long long template_max_bytes = 64LL * 1024 * 1024;
};

double rate(int64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; }

SamplerParams sampling(const RunArgs& a, const Engine& engine) {
    SamplerParams p = engine.default_sampling();
    if (a.temp_given) p.temperature = a.temp;
    if (a.top_k_given) p.top_k = a.top_k;
    if (a.top_p_given) p.top_p = a.top_p;
    if (a.min_p_given) p.min_p = a.min_p;
    if (a.repeat_given) p.repetition_penalty = a.repeat_penalty;
    return p;
}

std::string decode_summary(const GenerateResult& r) {
    const auto n_gen = static_cast<int64_t>(r.tokens.size());
    const std::string tokens = fmt::format("generated {} token{}", n_gen, n_gen == 1 ? "" : "s");
    if (r.n_decode_steps == 0)
        return tokens + " (no decode step: the first token comes from the prompt's logits)";
    return fmt::format("{}, decode {} forward pass{} in {:.3f} s ({:.1f} tok/s)", tokens, r.n_decode_steps,
                       r.n_decode_steps == 1 ? "" : "es", r.decode_seconds,
                       rate(r.n_decode_steps, r.decode_seconds));
}

int run(RunArgs a) {
    if (a.prompt_given == !a.file.empty())
        return report_usage_error("run: give the prompt with -p TEXT or -f FILE (one of them, not both)");
    if (a.prompt_given && a.prompt.empty())
        return report_usage_error(
            "run: the prompt is empty; give some text with -p TEXT (or a file with -f FILE)");
    if (a.n_predict == 0 || a.n_predict < -1)
        return report_usage_error(
            fmt::format("run: -n {}: give a positive token count, or -1 for no limit", a.n_predict));
    if (a.n_ctx < 0)
        return report_usage_error(
            fmt::format("run: -c {}: give a positive context size (0: default)", a.n_ctx));
    if (a.n_threads < 0 || a.n_threads > ThreadPool::max_thread_count())
        return report_usage_error(
            fmt::format("run: -t {}: this machine has {} cores; give 1 to {} threads (0: the default, {})",
                        a.n_threads, ThreadPool::available_cores(), ThreadPool::max_thread_count(),
                        ThreadPool::default_thread_count()));
    if (a.template_max_steps < 1 || a.template_max_bytes < 1)
        return report_usage_error("run: --template-max-steps and --template-max-bytes must be at least 1");
    const TemplateLimits limits{.max_steps = static_cast<uint64_t>(a.template_max_steps),
                                .max_bytes = static_cast<size_t>(a.template_max_bytes)};
    auto seed = parse_seed(a.seed, kRandomSeed);
    if (!seed) return report_usage_error("run: " + seed.error().message);
    auto device = parse_device(a.device);
    if (!device) return report_usage_error(fmt::format("run: --device: {}", device.error().message));
    std::string prompt = a.prompt;
    if (!a.file.empty()) {
        auto text = read_prompt_input(a.file, a.keep_newline);
        if (!text) return report_error("run: -f: " + text.error().message);
        prompt = std::move(*text);
        if (prompt.empty()) return report_error(fmt::format("run: the prompt file {} is empty", a.file));
    }
    if (a.model.empty()) {
        auto found = find_default_model();
        if (!found) return report_error("run: " + found.error().message);
        a.model = std::move(*found);
    }

    auto engine = Engine::load(a.model, EngineOptions{.device = *device});
    if (!engine) return report_error(engine.error());
    const Engine& e = **engine;
    if (a.verbose) {
        std::fprintf(stderr, "pelican: %s; device %s\n", e.model().describe().c_str(),
                     e.device_description().c_str());
        const std::string d = e.generation_defaults().describe();
        if (!d.empty()) std::fprintf(stderr, "pelican: the model's sampling defaults: %s\n", d.c_str());
    }
    // Chat: the message is untrusted text (no special tokens parsed inside it); the template writes
    // BOS where the model wants it. Raw prompts: special-token texts are recognized, as Hugging
    // Face's tokenizer(text) does, unless --no-special.
    auto ids =
        a.chat ? e.chat_tokens(prompt, limits) : e.tokenize(prompt, /*add_special=*/true, !a.no_special);
    if (!ids) return report_error(ids.error());

    auto session = e.create_session(SessionOptions{.n_ctx = a.n_ctx, .n_threads = a.n_threads});
    if (!session) return report_error("run: " + session.error().message);
    const int64_t n_ctx = (*session)->n_ctx(), n_train = e.n_ctx_train();
    if (n_train > 0 && n_ctx > n_train)
        std::fprintf(
            stderr,
            "pelican: warning: a context of %lld tokens is beyond the %lld the model was trained for; "
            "expect the text to degrade past %lld\n",
            static_cast<long long>(n_ctx), static_cast<long long>(n_train), static_cast<long long>(n_train));
    if (static_cast<int64_t>(ids->size()) > n_ctx)
        return report_error(
            fmt::format("run: the prompt has {} tokens but the context holds {} (raise -c{})", ids->size(),
                        n_ctx, n_train > 0 ? fmt::format("; the model was trained for {}", n_train) : ""));

    GenerateParams gp;
    gp.max_tokens = a.n_predict;
    gp.stop = a.stop;
    gp.ignore_eos = a.ignore_eos;
    gp.sampling = sampling(a, e);
    gp.sampling.seed = *seed;

    InterruptGuard guard;
    auto result =
        (*session)->generate(std::span<const int32_t>(*ids), gp, [](int32_t, std::string_view piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            return !interrupt_flag().load();
        });
    if (!result) return report_error(result.error());
    const GenerateResult& r = *result;
    const bool interrupted = interrupt_flag().load() && r.stop == StopReason::kCallback;
    const std::string where =
        (*session)->device_name() == "cpu"
            ? fmt::format("{} thread{}", (*session)->n_threads(), (*session)->n_threads() == 1 ? "" : "s")
            : std::string((*session)->device_name());
    const std::string seed_text =
        gp.sampling.temperature > 0
            ? fmt::format("seed {}{}", r.seed, *seed == kRandomSeed ? " (random)" : "")
            : std::string("greedy");
    fmt::print(stderr, "\npelican: prompt {} tokens in {:.3f} s ({:.1f} tok/s), {}, {}, {}, stop: {}\n",
               r.n_prompt_evaluated, r.prompt_seconds, rate(r.n_prompt_evaluated, r.prompt_seconds),
               decode_summary(r), where, seed_text, interrupted ? "interrupted" : stop_reason_name(r.stop));
    return interrupted ? kExitInterrupted : 0;
}

void setup(CLI::App& app) {
    auto a = std::make_shared<RunArgs>();
    auto* sub = app.add_subcommand("run", "Generate text from a prompt, streaming it to stdout");
    sub->add_option("-m,--model", a->model,
                    "GGUF file or Hugging Face model folder (default: the bundled pelican-tiny.gguf)");
    auto* p_opt = sub->add_option("-p,--prompt", a->prompt, "Prompt text");
    sub->add_option(
        "-f,--file", a->file,
        "Read the prompt from a file ('-' for stdin; at most 64 MiB; one trailing newline removed)");
    sub->add_flag("--keep-newline", a->keep_newline, "Keep the trailing newline of a -f prompt");
    sub->add_flag("--chat", a->chat,
                  "Render the prompt as a user message with the model's chat template (its text is never "
                  "parsed for special tokens)");
    sub->add_option("--template-max-steps", a->template_max_steps,
                    "--chat: step budget of the chat template's render (it comes with the model: untrusted)")
        ->capture_default_str();
    sub->add_option("--template-max-bytes", a->template_max_bytes,
                    "--chat: memory the chat template's render may hold, in bytes")
        ->capture_default_str();
    sub->add_flag("--no-special", a->no_special,
                  "Raw prompts: treat special-token texts such as <|im_start|> as plain text");
    sub->add_option(
           "-n,--n-predict", a->n_predict,
           "Tokens to generate at most (-1: no limit; generation also ends when the context is full)")
        ->capture_default_str();
    sub->add_option("-c,--ctx-size", a->n_ctx, "Context size in tokens (0: min(training context, 4096))")
        ->capture_default_str();
    sub->add_option("-t,--threads", a->n_threads,
                    "CPU compute threads (0: the cores this process may use, or PELICAN_THREADS; at most 4 x "
                    "the cores)")
        ->capture_default_str();
    auto* temp =
        sub->add_option("--temp", a->temp, "Temperature (0: greedy; default: the model's, else 0.8)");
    auto* top_k = sub->add_option("--top-k", a->top_k, "Top-k (0: off; default: the model's, else 40)");
    auto* top_p = sub->add_option("--top-p", a->top_p, "Top-p (1: off; default: the model's, else 0.95)");
    auto* min_p = sub->add_option("--min-p", a->min_p, "Min-p (0: off; default: the model's, else 0.05)");
    auto* rep = sub->add_option("--repeat-penalty", a->repeat_penalty,
                                "Repetition penalty (1: off; default: the model's, else 1)");
    sub->add_option("-s,--seed", a->seed, "Random seed, 0 .. 2^64-2 (-1: random, printed at the end)")
        ->capture_default_str();
    sub->add_option("--stop", a->stop, "Stop string (repeatable); not printed");
    sub->add_flag("--ignore-eos", a->ignore_eos, "Keep generating past end-of-generation tokens");
    sub->add_flag("-v,--verbose", a->verbose,
                  "Print the model's shape, the device and its sampling defaults");
    sub->add_option(
           "--device", a->device,
           "Where to run: auto (CUDA when built with it, a GPU is visible and the model is supported; "
           "else the CPU), cpu or cuda")
        ->capture_default_str();
    sub->callback([a, p_opt, temp, top_k, top_p, min_p, rep] {
        a->prompt_given = p_opt->count() > 0;
        a->temp_given = temp->count() > 0;
        a->top_k_given = top_k->count() > 0;
        a->top_p_given = top_p->count() > 0;
        a->min_p_given = min_p->count() > 0;
        a->repeat_given = rep->count() > 0;
        set_exit_code(run(*a));
    });
}

}  // namespace
}  // namespace pelican::cli

PELICAN_COMMAND(run, pelican::cli::setup);
