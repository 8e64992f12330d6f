// pelican tokenize -m MODEL (-p TEXT | -f FILE)... [--special] [--bos] [--json]
// MODEL is a GGUF file, a tokenizer.json or a Hugging Face folder. Every input (all -p texts in
// order, then all -f files in order; "-f -" reads stdin) prints one line: its token ids separated
// by spaces, or with --json one JSON array per line ("[15496, 995]").
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "core/mmap_file.h"
#include "tokenizer/tokenizer.h"

namespace pelican::cli {
namespace {

struct TokenizeArgs {
    std::string model;
    std::vector<std::string> prompts;
    std::vector<std::string> files;
    bool special = false;
    bool bos = false;
    bool json = false;
};

std::string format_ids(const std::vector<int32_t>& ids, bool json) {
    std::string s = json ? "[" : "";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += json ? ", " : " ";
        s += std::to_string(ids[i]);
    }
    if (json) s += "]";
    s += '\n';
    return s;
}

int run_tokenize(const TokenizeArgs& a) {
    if (a.prompts.empty() && a.files.empty())
        return report_error("tokenize: give at least one -p TEXT or -f FILE");
    // Read every input first so a missing file fails before any output.
    std::vector<std::string> inputs = a.prompts;
    for (const auto& path : a.files) {
        if (path == "-") {
            inputs.emplace_back(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
            continue;
        }
        auto text = read_text_file(path);
        if (!text) return report_error(text.error());
        inputs.push_back(std::move(*text));
    }
    auto tok = Tokenizer::load(a.model);
    if (!tok) return report_error(tok.error());
    const EncodeOptions opt{.add_special = a.bos, .parse_special = a.special};
    for (const auto& text : inputs) {
        const std::string line = format_ids(tok->encode(text, opt), a.json);
        std::fwrite(line.data(), 1, line.size(), stdout);
    }
    return 0;
}

void setup(CLI::App& app) {
    auto args = std::make_shared<TokenizeArgs>();
    auto* sub = app.add_subcommand("tokenize", "Print the token ids of texts (one line per input)");
    sub->add_option("-m,--model", args->model, "GGUF file, tokenizer.json or Hugging Face folder")
        ->required();
    sub->add_option("-p,--prompt", args->prompts, "Text to tokenize (repeatable)");
    sub->add_option("-f,--file", args->files, "File to tokenize, '-' for stdin (repeatable)");
    sub->add_flag("--special", args->special, "Parse special/control token texts as single tokens");
    sub->add_flag("--bos", args->bos, "Add BOS/EOS as the tokenizer's add_bos/add_eos say");
    sub->add_flag("--json", args->json, "Print one JSON array per input");
    sub->callback([args] { set_exit_code(run_tokenize(*args)); });
}

}  // namespace
}  // namespace pelican::cli

PELICAN_COMMAND(tokenize, pelican::cli::setup);
