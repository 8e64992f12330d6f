// pelican::Engine: model + tokenizer loading, tokenization, chat prompts, session creation
// (include/pelican/engine.h).
#include <malloc.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "jinja/chat_template.h"
#include "model/model.h"
#include "pelican/engine.h"
#include "runtime/chat_prompt.h"
#include "runtime/eog.h"
#include "runtime/forward_factory.h"
#include "tokenizer/tokenizer.h"

namespace pelican {

std::string_view stop_reason_name(StopReason r) {
    switch (r) {
        case StopReason::kEndOfGeneration:
            return "end of generation";
        case StopReason::kMaxTokens:
            return "max tokens";
        case StopReason::kStopString:
            return "stop string";
        case StopReason::kCallback:
            return "stopped by callback";
        case StopReason::kContextFull:
            return "context full";
    }
    return "?";
}

std::string_view device_name(Device d) {
    switch (d) {
        case Device::kAuto:
            return "auto";
        case Device::kCpu:
            return "cpu";
        case Device::kCuda:
            return "cuda";
    }
    return "?";
}

Expected<Device> parse_device(std::string_view s) {
    if (s == "auto") return Device::kAuto;
    if (s == "cpu") return Device::kCpu;
    if (s == "cuda") return Device::kCuda;
    return make_error("unknown device \"{}\" (choose auto, cpu or cuda)", s);
}

Engine::~Engine() = default;

Expected<std::unique_ptr<Engine>> Engine::load(const std::string& path_in, const EngineOptions& opt) {
    PELICAN_ASSIGN(const std::string path, resolve_model_path(path_in));
    std::unique_ptr<Engine> e(new Engine());
    e->path_ = path;
    // Device: cuda must work or fail with the reason; auto tries CUDA and falls back to the CPU.
    // The GPU reads GGUF rows, so a model headed for it is loaded without the CPU repacking.
    bool gpu = false;
    if (opt.device == Device::kCuda) {
        Status s = cuda_usable();
        if (!s.ok()) return make_error("device cuda: {}; use --device cpu (or auto)", s.error().message);
        gpu = true;
    } else if (opt.device == Device::kAuto) {
        gpu = cuda_usable().ok();
    }
    PELICAN_ASSIGN(e->model_, Model::load(path, ModelLoadOptions{.allow_repack = !gpu && opt.allow_repack}));
    if (gpu) {
        Status s = gpu_supports(*e->model_);
        // The hybrid Qwen3.5 GPU pass is new: only an explicit --device cuda selects it for now.
        if (s.ok() && !e->model_->hparams().uniform_attention() && opt.device != Device::kCuda)
            s = make_error("the {} GPU pass is experimental; pass --device cuda to use it",
                           e->model_->arch().name);
        if (s.ok()) {
            auto gm = upload_gpu_model(*e->model_);
            if (gm.ok())
                e->gpu_model_ = std::move(gm).value();
            else
                s = gm.take_error();
        }
        if (!s.ok()) {
            if (opt.device == Device::kCuda) return make_error("device cuda: {}", s.error().message);
            log_info("device auto: running on the CPU ({})", s.error().message);
            if (opt.allow_repack) {  // reload with the CPU's weight layout
                PELICAN_ASSIGN(e->model_, Model::load(path, ModelLoadOptions{.allow_repack = true}));
            }
            gpu = false;
        }
    }
    e->device_ = gpu ? Device::kCuda : Device::kCpu;
    e->device_desc_ = gpu ? "cuda: " + gpu_description() : "cpu";
    const int64_t n_vocab = e->model_->hparams().n_vocab;
    if (opt.load_tokenizer) {
        // A GGUF's vocabulary from the file the model already parsed (a second parse costs ~50 MB
        // at a 128K vocabulary); HF folders read tokenizer.json.
        auto tok = e->model_->gguf() ? Tokenizer::from_gguf(*e->model_->gguf()) : Tokenizer::load(path);
        if (!tok) return make_error("{} (loading the tokenizer)", tok.error().message);
        // Tokenizers may list fewer tokens than the embedding has rows (padded vocabularies), never more.
        if (tok->n_vocab() > n_vocab)
            return make_error("{}: the tokenizer has {} tokens but the model's embedding has only {} rows",
                              path, tok->n_vocab(), n_vocab);
        e->tokenizer_ = std::make_unique<Tokenizer>(std::move(tok).value());
    }
    e->eog_ids_ = find_end_of_generation_ids(*e->model_, e->tokenizer_.get(), n_vocab);
    e->gen_defaults_ = load_generation_defaults(*e->model_);
    // Loading freed large temporaries (copies of repacked tensors, parse buffers): hand that heap
    // back to the system so RSS after load is the model, not the loader's high-water mark.
    malloc_trim(0);
    for (const std::string& w : e->gen_defaults_.warnings) log_warn("{}", w);
    return e;
}

int32_t Engine::n_vocab() const { return static_cast<int32_t>(model_->hparams().n_vocab); }
int64_t Engine::n_ctx_train() const { return model_->hparams().n_ctx_train; }

Expected<std::vector<int32_t>> Engine::tokenize(std::string_view text, bool add_special,
                                                bool parse_special) const {
    if (!tokenizer_) return make_error("{}: no tokenizer loaded (give token ids instead of text)", path_);
    return tokenizer_->encode(text,
                              EncodeOptions{.add_special = add_special, .parse_special = parse_special});
}

namespace {

Expected<ChatPrompt> render_user_message(const std::string& path, const Tokenizer* tok,
                                         std::string_view user_message, const TemplateLimits& limits) {
    if (!tok) return make_error("{}: no tokenizer loaded (a chat prompt needs one)", path);
    PELICAN_ASSIGN(jinja::ModelChatTemplate tmpl, jinja::load_model_chat_template(path));
    if (tmpl.source.empty()) return make_error("{}: the model has no chat template", path);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", std::string(user_message)}});
    jinja::ChatTemplateOptions opt;
    opt.add_generation_prompt = true;
    opt.bos_token = tmpl.bos_token;
    opt.eos_token = tmpl.eos_token;
    opt.max_steps = limits.max_steps;
    opt.max_bytes = limits.max_bytes;
    return render_chat_prompt(tmpl, messages, nlohmann::ordered_json(), opt, *tok);
}

}  // namespace

static_assert(TemplateLimits{}.max_steps == jinja::kDefaultMaxSteps);
static_assert(TemplateLimits{}.max_bytes == jinja::kDefaultMaxBytes);

Expected<std::string> Engine::chat_prompt(std::string_view user_message, const TemplateLimits& limits) const {
    PELICAN_ASSIGN(ChatPrompt p, render_user_message(path_, tokenizer_.get(), user_message, limits));
    return std::move(p.text);
}

Expected<std::vector<int32_t>> Engine::chat_tokens(std::string_view user_message,
                                                   const TemplateLimits& limits) const {
    PELICAN_ASSIGN(ChatPrompt p, render_user_message(path_, tokenizer_.get(), user_message, limits));
    return tokenize_chat_prompt(p, *tokenizer_);
}

}  // namespace pelican
