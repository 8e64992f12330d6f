// pelican run [-m MODEL] (-p PROMPT | -f FILE) [--chat] [-n N] [-c N_CTX] [-t THREADS] [--temp T]
//             [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--stop TEXT]...
//             [--device auto|cpu|cuda]
// Streams the generated text to stdout (flushed per token) and ends with one line on stderr giving
// prompt and decode speeds. --chat renders the prompt as one user message with the model's chat
// template. Without -m it runs the bundled default, models/pelican-tiny.gguf (see default_model()).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "core/mmap_file.h"
#include "model/model.h"
#include "pelican/engine.h"

namespace pelican::cli {
namespace {

struct RunArgs {
    std::string model;
    std::string prompt;
    std::string file;
    bool chat = false;
    int32_t n_predict = 256;
    int64_t n_ctx = 0;
    int n_threads = 0;
    float temp = 0.8f;
    int32_t top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    float repeat_penalty = 1.0f;
    int64_t seed = -1;
    std::vector<std::string> stop;
    bool ignore_eos = false;
    bool verbose = false;
    bool n_predict_given = false;
    std::string device = "auto";
};

double rate(int64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; }

// The bundled default model: models/pelican-tiny.gguf under the current directory, else under the
// source tree the executable was built in (../../models from build/bin). Empty if neither exists.
constexpr const char* kDefaultModel = "models/pelican-tiny.gguf";

std::string default_model() {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_regular_file(kDefaultModel, ec)) return kDefaultModel;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) return {};
    const fs::path p = (exe.parent_path() / ".." / ".." / kDefaultModel).lexically_normal();
    return fs::is_regular_file(p, ec) ? p.string() : std::string();
}

int run(RunArgs a) {
    if (a.model.empty()) {
        a.model = default_model();
        if (a.model.empty())
            return report_error(fmt::format(
                "run: no -m MODEL given and the bundled default {} was found neither under the current "
                "directory nor two levels above the pelican executable; give a model with -m MODEL (a GGUF "
                "file or a Hugging Face model folder)",
                kDefaultModel));
    }
    if (a.prompt.empty() == a.file.empty())
        return report_error("run: give exactly one of -p PROMPT or -f FILE");
    std::string prompt = a.prompt;
    if (!a.file.empty()) {
        if (a.file == "-") {
            prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
        } else {
            auto text = read_text_file(a.file);
            if (!text) return report_error(text.error());
            prompt = std::move(*text);
        }
    }
    if (a.seed < -1) return report_error("run: --seed must be >= 0 (or -1 for a random seed)");
    auto device = parse_device(a.device);
    if (!device) return report_error(fmt::format("run: --device: {}", device.error().message));

    auto engine = Engine::load(a.model, EngineOptions{.device = *device});
    if (!engine) return report_error(engine.error());
    if (a.verbose)
        std::fprintf(stderr, "pelican: %s; device %s\n", (*engine)->model().describe().c_str(),
                     (*engine)->device_description().c_str());
    if (a.chat) {
        auto rendered = (*engine)->chat_prompt(prompt);
        if (!rendered) return report_error(rendered.error());
        prompt = std::move(*rendered);
    }
    // A chat template already writes BOS where the model wants it.
    auto ids = (*engine)->tokenize(prompt, /*add_special=*/!a.chat, /*parse_special=*/true);
    if (!ids) return report_error(ids.error());

    auto session = (*engine)->create_session(SessionOptions{.n_ctx = a.n_ctx, .n_threads = a.n_threads});
    if (!session) return report_error(session.error());

    GenerateParams gp;
    gp.max_tokens = a.n_predict;
    if (!a.n_predict_given) {  // the default 256 shrinks to what the context leaves
        const int64_t room = (*session)->n_ctx() - static_cast<int64_t>(ids->size());
        if (room <= 0)
            return report_error(
                fmt::format("run: the prompt has {} tokens but the context holds {} (raise -c)", ids->size(),
                            (*session)->n_ctx()));
        gp.max_tokens = static_cast<int32_t>(std::min<int64_t>(gp.max_tokens, room));
    }
    gp.stop = a.stop;
    gp.ignore_eos = a.ignore_eos;
    gp.sampling.temperature = a.temp;
    gp.sampling.top_k = a.top_k;
    gp.sampling.top_p = a.top_p;
    gp.sampling.min_p = a.min_p;
    gp.sampling.repetition_penalty = a.repeat_penalty;
    gp.sampling.seed = a.seed < 0 ? kRandomSeed : static_cast<uint64_t>(a.seed);

    auto result =
        (*session)->generate(std::span<const int32_t>(*ids), gp, [](int32_t, std::string_view piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            return true;
        });
    if (!result) return report_error(result.error());
    const GenerateResult& r = *result;
    const auto n_gen = static_cast<int64_t>(r.tokens.size());
    const std::string where = (*session)->device_name() == "cpu"
                                  ? fmt::format("{} threads", (*session)->n_threads())
                                  : std::string((*session)->device_name());
    std::fprintf(
        stderr,
        "\npelican: prompt %lld tokens in %.3f s (%.1f tok/s), decode %lld tokens in %.3f s (%.1f tok/s), "
        "%s, stop: %.*s\n",
        static_cast<long long>(r.n_prompt_evaluated), r.prompt_seconds,
        rate(r.n_prompt_evaluated, r.prompt_seconds), static_cast<long long>(n_gen), r.decode_seconds,
        rate(n_gen, r.decode_seconds), where.c_str(), static_cast<int>(stop_reason_name(r.stop).size()),
        stop_reason_name(r.stop).data());
    return 0;
}

void setup(CLI::App& app) {
    auto a = std::make_shared<RunArgs>();
    auto* sub = app.add_subcommand("run", "Generate text from a prompt, streaming it to stdout");
    sub->add_option("-m,--model", a->model,
                    "GGUF file or Hugging Face model folder (default: the bundled models/pelican-tiny.gguf)");
    sub->add_option("-p,--prompt", a->prompt, "Prompt text");
    sub->add_option("-f,--file", a->file, "Read the prompt from a file ('-' for stdin)");
    sub->add_flag("--chat", a->chat, "Render the prompt as a user message with the model's chat template");
    auto* n_opt = sub->add_option("-n,--n-predict", a->n_predict,
                                  "Tokens to generate (-1: until end of text or full context)")
                      ->capture_default_str();
    sub->add_option("-c,--ctx-size", a->n_ctx, "Context size in tokens (0: min(training context, 4096))")
        ->capture_default_str();
    sub->add_option("-t,--threads", a->n_threads, "Compute threads (0: all cores)")->capture_default_str();
    sub->add_option("--temp", a->temp, "Temperature (0: greedy)")->capture_default_str();
    sub->add_option("--top-k", a->top_k, "Top-k (0: off)")->capture_default_str();
    sub->add_option("--top-p", a->top_p, "Top-p (1: off)")->capture_default_str();
    sub->add_option("--min-p", a->min_p, "Min-p (0: off)")->capture_default_str();
    sub->add_option("--repeat-penalty", a->repeat_penalty, "Repetition penalty (1: off)")
        ->capture_default_str();
    sub->add_option("-s,--seed", a->seed, "Random seed (-1: random)")->capture_default_str();
    sub->add_option("--stop", a->stop, "Stop string (repeatable); not printed");
    sub->add_flag("--ignore-eos", a->ignore_eos, "Keep generating past end-of-generation tokens");
    sub->add_flag("-v,--verbose", a->verbose, "Print the model's shape and the device to stderr");
    sub->add_option(
           "--device", a->device,
           "Where to run: auto (CUDA when built with it, a GPU is visible and the model is supported; "
           "else the CPU), cpu or cuda")
        ->capture_default_str();
    sub->callback([a, n_opt] {
        a->n_predict_given = n_opt->count() > 0;
        set_exit_code(run(*a));
    });
}

}  // namespace
}  // namespace pelican::cli

PELICAN_COMMAND(run, pelican::cli::setup);
