// pelican's public C++ API: load a model, open a session, generate with a streaming callback.
//
//   PELICAN_ASSIGN(auto engine, pelican::Engine::load("model.gguf"));      // or an HF folder
//   PELICAN_ASSIGN(auto session, engine->create_session({.n_ctx = 4096}));
//   pelican::GenerateParams gp;
//   gp.max_tokens = 128;
//   gp.sampling.temperature = 0;                                           // greedy
//   auto result = session->generate("Once upon a time", gp,
//       [](int32_t id, std::string_view piece) { fputs(std::string(piece).c_str(), stdout); return true; });
//
// Errors come back as pelican::Expected / Status (core/status.h) with a message a user can act on;
// bad input (paths, parameters, token ids, context overflow) never crashes the process.
// Threading: an Engine is immutable and may be shared by several Sessions; one Session is used by
// one thread at a time.
//
// Devices: EngineOptions.device picks where the forward pass runs. auto (the default) uses CUDA
// when pelican was built with it, a GPU is visible and the model is supported on it (its weights
// are then uploaded once, at load, and shared by the sessions), else the CPU; cpu and cuda force
// one (cuda fails with a message saying why it cannot be used).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runtime/generation_defaults.h"
#include "runtime/sampler.h"

namespace pelican {

class Model;
class Tokenizer;
class Session;
class DeviceModel;

enum class Device { kAuto, kCpu, kCuda };
std::string_view device_name(Device d);  // "auto", "cpu", "cuda"
// "auto" | "cpu" | "cuda"; the error lists the choices.
Expected<Device> parse_device(std::string_view s);

struct EngineOptions {
    bool load_tokenizer = true;     // false: token-id API only (text calls then return errors)
    bool allow_repack = true;       // let the CPU backend repack Q4_0/Q8_0 weights (never on CUDA)
    Device device = Device::kAuto;  // see "Devices" above
};

struct SessionOptions {
    int64_t n_ctx = 0;      // context size in tokens; 0 = min(the model's training context, 4096)
    int n_threads = 0;      // compute threads; 0 = ThreadPool::default_thread_count()
    int64_t n_batch = 512;  // most prompt tokens evaluated per forward step
    // auto: the engine's device; cpu: the CPU pass (also on an engine loaded for CUDA); cuda: an
    // error unless the engine was loaded for CUDA.
    Device device = Device::kAuto;
};

// Limits for rendering the model's chat template, which comes with the model and is untrusted
// (jinja/jinja.h): a step budget and the memory the render may hold at once.
struct TemplateLimits {
    uint64_t max_steps = 100000000;       // 10^8 (jinja::kDefaultMaxSteps)
    size_t max_bytes = size_t{64} << 20;  // 64 MiB (jinja::kDefaultMaxBytes)
};

struct GenerateParams {
    // Tokens to generate at most; -1 = no limit. Generation always ends when the context is full
    // (StopReason::kContextFull), whatever max_tokens says.
    int32_t max_tokens = 256;
    SamplerParams sampling;  // runtime/sampler.h (temperature 0 = greedy)
    std::vector<std::string>
        stop;                   // stop strings: generation ends when the text contains one; it is not output
    bool ignore_eos = false;    // keep going past end-of-generation tokens
    bool add_special = true;    // text prompts: add BOS/EOS as the tokenizer says
    bool parse_special = true;  // text prompts: "<|im_start|>" etc. become their special tokens
};

enum class StopReason { kEndOfGeneration, kMaxTokens, kStopString, kCallback, kContextFull };
std::string_view stop_reason_name(StopReason r);

struct GenerateResult {
    std::vector<int32_t> tokens;  // generated tokens (the end-of-generation token excluded)
    std::string text;             // their text, cut before a stop string
    StopReason stop = StopReason::kMaxTokens;
    int64_t n_prompt = 0;            // prompt tokens
    int64_t n_prompt_evaluated = 0;  // prompt tokens actually run (the rest reused from the KV cache)
    double prompt_seconds = 0;       // prompt evaluation wall time
    // Forward passes of the generation loop: one per generated token after the first (which is
    // sampled from the prompt's logits), so tokens.size() - 1 or fewer; decode speed is
    // n_decode_steps / decode_seconds.
    int64_t n_decode_steps = 0;
    double decode_seconds = 0;  // wall time of the generation loop after the prompt
    uint64_t seed = 0;          // the sampler's seed (the one drawn when the seed was random)
};

// Called once per generated token with the text it completes. `piece` may be empty (a partial
// UTF-8 character, or text held back because it may begin a stop string) and may later carry the
// text of several tokens. A final call with id -1 delivers text still held back at the end.
// Return false to stop generating.
using TokenCallback = std::function<bool(int32_t id, std::string_view piece)>;

class Engine {
public:
    // `path`: a GGUF file or a Hugging Face model folder. Errors name the file, tensor or key.
    static Expected<std::unique_ptr<Engine>> load(const std::string& path, const EngineOptions& opt = {});
    ~Engine();

    const Model& model() const { return *model_; }
    const Tokenizer* tokenizer() const { return tokenizer_.get(); }  // nullptr if not loaded
    int32_t n_vocab() const;
    int64_t n_ctx_train() const;  // 0 when the file does not say
    // The model's own sampling defaults (generation_config.json or GGUF general.sampling.*);
    // default_sampling() is SamplerParams{} with them applied.
    const GenerationDefaults& generation_defaults() const { return gen_defaults_; }
    SamplerParams default_sampling() const {
        return apply_generation_defaults(gen_defaults_, SamplerParams{});
    }
    // Tokens that end generation (EOS, end-of-turn...).
    const std::vector<int32_t>& end_of_generation_ids() const { return eog_ids_; }

    Expected<std::vector<int32_t>> tokenize(std::string_view text, bool add_special = true,
                                            bool parse_special = true) const;
    // Renders one user message with the model's chat template (add_generation_prompt on).
    Expected<std::string> chat_prompt(std::string_view user_message, const TemplateLimits& limits = {}) const;
    // The same prompt as token ids, with the message's text kept as plain text: special-token
    // texts typed inside it ("<|im_start|>") never become special tokens; the template's own
    // markers do (runtime/chat_prompt.h). No BOS is added: the template writes it.
    Expected<std::vector<int32_t>> chat_tokens(std::string_view user_message,
                                               const TemplateLimits& limits = {}) const;

    // Errors: bad options, not enough memory for the KV cache.
    Expected<std::unique_ptr<Session>> create_session(const SessionOptions& opt = {}) const;

    // Where sessions run by default (cpu or cuda, never auto), and a line for humans:
    // "cpu" or "cuda: NVIDIA H200 (sm_90, 139.8 GiB)".
    Device device() const { return device_; }
    const std::string& device_description() const { return device_desc_; }
    // The weights on the GPU (nullptr unless device() is cuda), as the backend holds them.
    const std::shared_ptr<const DeviceModel>& gpu_model() const { return gpu_model_; }

private:
    Engine() = default;
    std::string path_;
    Device device_ = Device::kCpu;
    std::string device_desc_ = "cpu";
    std::unique_ptr<Model> model_;
    std::shared_ptr<const DeviceModel> gpu_model_;  // after model_: released before it
    std::unique_ptr<Tokenizer> tokenizer_;
    std::vector<int32_t> eog_ids_;
    GenerationDefaults gen_defaults_;
};

class Session {
public:
    ~Session();

    // Generates a continuation of `prompt`. The KV cache keeps the previous call's tokens: a prompt
    // that starts with them is not evaluated again. Errors: empty prompt, token ids outside the
    // vocabulary, a prompt longer than n_ctx, invalid sampling parameters.
    Expected<GenerateResult> generate(std::span<const int32_t> prompt, const GenerateParams& params,
                                      const TokenCallback& on_token = {});
    // Tokenizes `prompt` (params.add_special / parse_special) and generates.
    Expected<GenerateResult> generate(std::string_view prompt, const GenerateParams& params,
                                      const TokenCallback& on_token = {});

    // Low level: appends tokens to the context and returns the last token's logits [n_vocab]
    // (valid until the next call). With all_logits (n * n_vocab floats), every token's logits.
    Expected<std::span<const float>> eval(std::span<const int32_t> tokens, std::span<float> all_logits = {});
    void reset();  // forgets the context

    int64_t n_ctx() const;
    int64_t n_past() const { return static_cast<int64_t>(history_.size()); }
    const std::vector<int32_t>& history() const { return history_; }  // tokens in the KV cache
    int n_threads() const;
    std::string_view device_name() const;  // "cpu" or "cuda"

private:
    friend class Engine;
    struct Impl;
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
    std::vector<int32_t> history_;
};

}  // namespace pelican
