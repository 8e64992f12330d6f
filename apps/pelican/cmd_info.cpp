// pelican info FILE [--json]: architecture, hyper-parameters, tensor bytes per type, tokenizer.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "command.h"
#include "formats/gguf.h"
#include "formats/gguf_info.h"
#include "formats/hf_info.h"

namespace pelican::cli {
namespace {

struct InfoArgs {
    std::string path;
    bool json = false;
};

bool has_gguf_magic(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    char magic[4] = {};
    size_t n = std::fread(magic, 1, 4, f);
    std::fclose(f);
    return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

int run_info(const InfoArgs& a) {
    std::error_code ec;
    if (!std::filesystem::exists(a.path, ec)) return report_error(fmt::format("'{}': no such file", a.path));
    if (std::filesystem::is_directory(a.path, ec) || !has_gguf_magic(a.path)) {
        // A Hugging Face folder, a .safetensors file or a safetensors index.
        auto summary = hf_model_summary(a.path, a.json);
        if (!summary)
            return report_error(fmt::format("'{}' is neither a GGUF file nor a Hugging Face model: {}",
                                            a.path, summary.error().message));
        std::fwrite(summary->data(), 1, summary->size(), stdout);
        return 0;
    }
    auto f = GgufFile::open(a.path);
    if (!f) return report_error(f.error());
    std::string text = gguf_summary(*f, a.json);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
}

void setup(CLI::App& app) {
    auto args = std::make_shared<InfoArgs>();
    auto* sub = app.add_subcommand("info", "Summarize a model file: architecture, hyper-parameters, tensors");
    sub->add_option("file", args->path, "GGUF file, .safetensors file or Hugging Face model folder")
        ->required();
    sub->add_flag("--json", args->json, "Print a JSON object instead of text");
    sub->callback([args] { set_exit_code(run_info(*args)); });
}

}  // namespace
}  // namespace pelican::cli

PELICAN_COMMAND(info, pelican::cli::setup);
