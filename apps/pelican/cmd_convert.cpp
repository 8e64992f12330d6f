// pelican convert IN -o OUT.gguf [--type T] [--name NAME]
// pelican convert --synthetic ARCH --config JSON --vocab VOCAB -o OUT.gguf [--type T] [--seed S]
//
// IN is a Hugging Face folder (config.json + f32/f16/bf16 safetensors + tokenizer.json) or a GGUF
// file. The synthetic form writes random weights of any supported architecture and shape
// (config.json-style keys in JSON, a file or inline text) with the vocabulary of VOCAB (GGUF,
// tokenizer.json or HF folder). Types: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k (see
// src/convert/tensor_plan.h for which tensors get which type). Ctrl-C leaves no partial file.
//
// OUT must be a new file, or with --force an existing regular file the user may write (its mode is
// kept); never a folder, link, device, FIFO, socket, '-' or one of the inputs (core/output_file.h).
// These checks run before anything is read or planned.
#include <filesystem>
#include <memory>
#include <string>

#include "command.h"
#include "interrupt.h"
#include "convert/convert.h"
#include "convert/progress.h"
#include "convert/synthetic.h"
#include "core/mmap_file.h"

namespace pelican::cli {
namespace {

struct ConvertArgs {
    std::string input;
    std::string output;
    std::string type = "f16";
    std::string name;
    std::string synthetic;
    std::string config;
    std::string vocab;
    uint64_t seed = 0;
    int threads = 0;
    bool no_progress = false;
    bool force = false;
};

Expected<ConvertJob> plan(const ConvertArgs& a, const ConvertOptions& opt) {
    if (!a.synthetic.empty()) {
        if (!a.input.empty()) return make_error("convert: give either IN or --synthetic ARCH, not both");
        if (a.config.empty()) return make_error("convert --synthetic: --config JSON is required");
        if (a.vocab.empty())
            return make_error("convert --synthetic: --vocab (GGUF, tokenizer.json or HF folder) is required");
        SyntheticOptions s;
        s.arch = a.synthetic;
        s.vocab = a.vocab;
        s.seed = a.seed;
        if (a.config.find('{') != std::string::npos) {
            s.config_json = a.config;  // inline JSON
            s.config_name = "--config";
        } else {
            PELICAN_ASSIGN(s.config_json, read_text_file(a.config));
            s.config_name = a.config;
        }
        return plan_synthetic(s, opt);
    }
    if (a.input.empty())
        return make_error("convert: give an input (HF folder or GGUF file) or --synthetic ARCH");
    return plan_convert(a.input, opt);
}

int run_convert(const ConvertArgs& a) {
    auto type = parse_convert_type(a.type);
    if (!type) return report_error("convert: " + type.error().message);
    ConvertOptions opt;
    opt.type = *type;
    opt.name = a.name;
    opt.emit.threads = a.threads;
    opt.emit.progress = !a.no_progress;
    opt.emit.force = a.force;
    // Before any planning: a refused output must not cost a 20 GB read.
    const std::string config_file = a.config.find('{') == std::string::npos ? a.config : "";
    const Status out_ok = check_convert_output(a.output, {a.input, a.vocab, config_file}, opt.emit);
    if (!out_ok.ok()) return report_error("convert: " + out_ok.error().message);

    InterruptGuard guard;
    opt.emit.cancel = &interrupt_flag();
    auto job = plan(a, opt);
    if (!job) return report_error(job.error());
    auto stats = write_job(*job, a.output, opt.emit);
    if (!stats) return report_error(stats.error());
    fmt::print(stderr, "wrote {} ({}, {} tensors, --type {}) in {:.1f} s\n", a.output,
               format_bytes(stats->file_bytes), job->tensors.size(), a.type, stats->seconds);
    return 0;
}

void setup(CLI::App& app) {
    auto args = std::make_shared<ConvertArgs>();
    auto* sub =
        app.add_subcommand("convert", "Convert an HF folder or GGUF to GGUF, or write a synthetic model");
    sub->footer(
        "OUT must be a regular file or not exist. Refused before anything is read: '-' (convert cannot "
        "write to stdout), a folder, device, FIFO, socket or symbolic link (never followed or replaced), "
        "a parent folder that is missing or not writable, the input, and an existing file unless --force "
        "(a read-only one even with it). The model is written to .OUT.tmp.PID.N next to OUT and renamed "
        "onto OUT at the end; an error or Ctrl-C removes it.");
    sub->add_option("input", args->input, "Hugging Face folder or GGUF file");
    sub->add_option("-o,--output", args->output,
                    "Output GGUF file: a new file, or an existing one with --force (never a folder, link, "
                    "device, FIFO, '-' or the input)")
        ->required();
    sub->add_flag(
        "-f,--force", args->force,
        "Replace an existing output file (it must be a regular file you may write; its mode is kept)");
    sub->add_option("-t,--type", args->type,
                    "Output type: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k (default f16)");
    sub->add_option("--name", args->name, "general.name (default: the input's name)");
    sub->add_option("--synthetic", args->synthetic,
                    "Write random weights of this architecture (llama, mistral, qwen2, qwen3, granite, "
                    "qwen3_5_moe, qwen3_5)");
    sub->add_option("--config", args->config, "Synthetic: config.json-style JSON file, or inline JSON");
    sub->add_option("--vocab", args->vocab, "Synthetic: vocabulary from a GGUF, tokenizer.json or HF folder");
    sub->add_option("--seed", args->seed, "Synthetic: random seed (default 0)");
    sub->add_option("--threads", args->threads, "Threads for quantizing (default: all cores)");
    sub->add_flag("--no-progress", args->no_progress, "No progress output");
    sub->callback([args] { set_exit_code(run_convert(*args)); });
}

}  // namespace
}  // namespace pelican::cli

PELICAN_COMMAND(convert, pelican::cli::setup);
