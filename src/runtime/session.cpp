// pelican::Session: KV-cache reuse, prompt evaluation and the generation loop
// (include/pelican/engine.h).
#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/thread_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "pelican/engine.h"
#include "runtime/forward_factory.h"
#include "runtime/sampler.h"
#include "runtime/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace pelican {

struct Session::Impl {
    const Engine* engine = nullptr;
    std::unique_ptr<ForwardPass> forward;
    std::unique_ptr<ThreadPool> pool;
    std::vector<float> logits;  // [n_vocab] the sampler's working copy
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

int64_t Session::n_ctx() const { return impl_->forward->n_ctx(); }
int Session::n_threads() const { return impl_->pool->size(); }
std::string_view Session::device_name() const { return impl_->forward->device_name(); }
void Session::reset() { history_.clear(); }

Expected<std::unique_ptr<Session>> Engine::create_session(const SessionOptions& opt) const {
    if (opt.n_ctx < 0) return make_error("context size must be positive, got {}", opt.n_ctx);
    if (opt.n_threads < 0 || opt.n_threads > ThreadPool::max_thread_count())
        return make_error(
            "{} compute threads requested; this machine has {} cores, so use 1 to {} (0 picks the "
            "default, {})",
            opt.n_threads, ThreadPool::available_cores(), ThreadPool::max_thread_count(),
            ThreadPool::default_thread_count());
    if (opt.n_batch <= 0) return make_error("batch size must be positive, got {}", opt.n_batch);
    int64_t n_ctx = opt.n_ctx;
    if (n_ctx == 0) n_ctx = n_ctx_train() > 0 ? std::min<int64_t>(n_ctx_train(), 4096) : 4096;
    auto impl = std::make_unique<Session::Impl>();
    impl->engine = this;
    PELICAN_ASSIGN(
        impl->forward,
        create_forward_pass(*this, ForwardOptions{.n_ctx = n_ctx, .n_batch = opt.n_batch}, opt.device));
    // A GPU pass computes on the device: no CPU compute threads.
    PELICAN_ASSIGN(impl->pool, ThreadPool::create(impl->forward->device_name() == "cpu" ? opt.n_threads : 1));
    impl->logits.resize(static_cast<size_t>(model_->hparams().n_vocab));
    return std::unique_ptr<Session>(new Session(std::move(impl)));
}

Expected<std::span<const float>> Session::eval(std::span<const int32_t> tokens, std::span<float> all_logits) {
    const auto pos0 = static_cast<int64_t>(history_.size());
    PELICAN_TRY(impl_->forward->eval(tokens, pos0, *impl_->pool, all_logits));
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    return impl_->forward->last_logits();
}

Expected<GenerateResult> Session::generate(std::string_view prompt, const GenerateParams& params,
                                           const TokenCallback& on_token) {
    PELICAN_ASSIGN(std::vector<int32_t> ids,
                   impl_->engine->tokenize(prompt, params.add_special, params.parse_special));
    return generate(std::span<const int32_t>(ids), params, on_token);
}

Expected<GenerateResult> Session::generate(std::span<const int32_t> prompt, const GenerateParams& params,
                                           const TokenCallback& on_token) {
    using clock = std::chrono::steady_clock;
    const auto n_prompt = static_cast<int64_t>(prompt.size());
    const int64_t ctx = n_ctx();
    const int64_t n_vocab = impl_->engine->n_vocab();
    if (prompt.empty()) return make_error("generate: the prompt has no tokens");
    if (params.max_tokens < -1 || params.max_tokens == 0)
        return make_error("generate: max_tokens must be positive or -1 (until the context is full), got {}",
                          params.max_tokens);
    if (n_prompt > ctx)
        return make_error(
            "generate: the prompt has {} tokens but the context holds {} (use a larger context)", n_prompt,
            ctx);
    for (size_t i = 0; i < prompt.size(); ++i)
        if (prompt[i] < 0 || prompt[i] >= n_vocab)
            return make_error("generate: prompt token {} (index {}) is outside the vocabulary of {}",
                              prompt[i], i, n_vocab);
    PELICAN_ASSIGN(Sampler sampler, Sampler::create(params.sampling));

    // Reuse the longest common prefix of the cache; always evaluate at least one token.
    size_t keep = 0;
    while (keep < history_.size() && keep < prompt.size() && history_[keep] == prompt[keep]) ++keep;
    keep = std::min(keep, prompt.size() - 1);
    history_.resize(keep);

    GenerateResult r;
    r.seed = sampler.seed();
    r.n_prompt = n_prompt;
    r.n_prompt_evaluated = n_prompt - static_cast<int64_t>(keep);
    const auto t0 = clock::now();
    PELICAN_ASSIGN(std::span<const float> logits, eval(prompt.subspan(keep)));
    const auto t1 = clock::now();
    r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    for (int32_t t : prompt) sampler.accept(t);

    // Next token: sampled next to the logits when the pass can do so exactly (a GPU pass: the
    // logits never leave the device; the uniform and the penalty window come from the host
    // sampler, so a seed gives the CPU's tokens); else on the host from copied logits.
    // `pending` is the last sampled token, not yet run through the model.
    int32_t pending = kNoToken;
    ForwardPass& fwd = *impl_->forward;
    const StepSampling ssp = step_sampling(params.sampling);
    const bool on_device = fwd.samples_on_device(ssp);
    const bool penalties =
        ssp.repetition_penalty != 1.0f || ssp.presence_penalty != 0.0f || ssp.frequency_penalty != 0.0f;
    const auto next_token = [&]() -> Expected<int32_t> {
        if (on_device) {
            float u = 0.0f;
            if (ssp.temperature > 0.0f) u = sampler.draw_uniform();  // < 1, exact in fp32
            const std::span<const int32_t> window =
                penalties ? sampler.penalty_window() : std::span<const int32_t>();
            if (pending == kNoToken) return fwd.sample_last(ssp, window, u);
            PELICAN_ASSIGN(const int32_t t, fwd.decode_sample(pending, n_past(), ssp, window, u));
            history_.push_back(pending);
            ++r.n_decode_steps;
            return t;
        }
        if (pending != kNoToken) {
            const int32_t one[1] = {pending};
            PELICAN_ASSIGN(logits, eval(std::span<const int32_t>(one, 1)));
            ++r.n_decode_steps;
        }
        std::copy(logits.begin(), logits.end(), impl_->logits.begin());
        return sampler.sample(impl_->logits);
    };

    const std::vector<int32_t>& eog = impl_->engine->end_of_generation_ids();
    TokenTextStream stream(impl_->engine->tokenizer(), params.stop);
    // max_tokens, else one more than the context leaves room for (the last token is not run).
    const int64_t limit = params.max_tokens > 0 ? params.max_tokens : ctx - n_prompt + 1;
    for (int64_t i = 0;; ++i) {
        if (i == limit) {
            r.stop = params.max_tokens > 0 ? StopReason::kMaxTokens : StopReason::kContextFull;
            break;
        }
        auto next = next_token();
        if (!next) return make_error("generate: {} (step {})", next.error().message, i);
        const int32_t tok = *next;
        pending = kNoToken;
        if (tok == kNoToken) return make_error("generate: every logit is NaN or -inf at step {}", i);
        if (!params.ignore_eos && std::binary_search(eog.begin(), eog.end(), tok)) {
            r.stop = StopReason::kEndOfGeneration;
            break;
        }
        sampler.accept(tok);
        r.tokens.push_back(tok);
        const std::string piece = stream.push(tok);
        if (on_token && !on_token(tok, piece)) {
            r.stop = StopReason::kCallback;
            break;
        }
        if (stream.stopped()) {
            r.stop = StopReason::kStopString;
            break;
        }
        if (i + 1 == limit) continue;  // the loop ends next iteration: no need to run this token
        if (n_past() >= ctx) {
            r.stop = StopReason::kContextFull;
            break;
        }
        pending = tok;
    }
    const std::string rest = stream.finish();
    if (!rest.empty() && on_token) on_token(-1, rest);
    r.text = stream.text();
    r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return r;
}

}  // namespace pelican
