// Hybrid Qwen3.5 forward pass: creation, scratch, positions / replay, embedding and output head
// (backend/cpu/hybrid_forward.h). The per-layer blocks are in hybrid_forward_layers.cpp.
#include "backend/cpu/hybrid_forward.h"

#include <algorithm>

#include "backend/cpu/cpu_ops.h"

namespace pelican {

HybridForward::HybridForward(const Model& m, KvCache kv, int64_t n_batch)
    : model_(m), hp_(m.hparams()), w_(m.weights()), kv_(std::move(kv)), n_batch_(n_batch) {}

Expected<std::unique_ptr<HybridForward>> HybridForward::create(const Model& model,
                                                               const ForwardOptions& opt) {
    const ModelHParams& hp = model.hparams();
    if (hp.arch->layer_plan != LayerPlan::kLayerTypes)
        return make_error("{}: {} is not a Qwen3.5 model", model.path(), hp.arch->name);
    if (opt.n_ctx <= 0) return make_error("context size must be positive, got {}", opt.n_ctx);
    if (opt.n_batch <= 0) return make_error("batch size must be positive, got {}", opt.n_batch);
    const int64_t n_full = hp.n_kv_layers();
    if (n_full == 0)
        return make_error("{}: a hybrid model without full-attention layers is not supported", model.path());
    PELICAN_ASSIGN(KvCache kv, KvCache::create(n_full, opt.n_ctx, hp.kv_dim()));
    std::unique_ptr<HybridForward> f(
        new HybridForward(model, std::move(kv), std::min(opt.n_batch, opt.n_ctx)));
    int nf = 0, nl = 0;
    for (int64_t i = 0; i < hp.n_layer; ++i) {
        const bool full = hp.layer[static_cast<size_t>(i)].mixer == Mixer::kGatedAttention;
        f->kv_index_.push_back(full ? nf++ : -1);
        f->rec_index_.push_back(full ? -1 : nl++);
    }
    f->state_ = RecurrentState(std::max(nl, 1), hp.deltanet.linear, hp.deltanet.conv_kernel);
    f->history_.reserve(static_cast<size_t>(opt.n_ctx));
    if (f->w_.mtp.present) {
        PELICAN_ASSIGN(f->mtp_kv_, KvCache::create(1, opt.n_ctx, hp.kv_dim()));
    }
    try {
        f->alloc_scratch();
    } catch (const std::bad_alloc&) {
        return make_error("hybrid forward: out of memory for the scratch of {} tokens per step", f->n_batch_);
    }
    return f;
}

void HybridForward::alloc_scratch() {
    const auto B = static_cast<size_t>(n_batch_);
    const auto e = static_cast<size_t>(hp_.n_embd);
    x_.resize(B * e), xn_.resize(B * e), proj_.resize(B * e);
    cos_.resize(B * static_cast<size_t>(hp_.rope_dim / 2)), sin_.resize(cos_.size()), pos_.resize(B);
    blocks_ = std::make_unique<cpu::HybridBlocks>(hp_, n_batch_);
    last_logits_.resize(static_cast<size_t>(hp_.n_vocab)), last_hidden_.resize(e);
    if (w_.mtp.present) mtp_in_.resize(2 * B * e), mtp_logits_.resize(static_cast<size_t>(hp_.n_vocab));
}

Status HybridForward::eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                           std::span<float> all_logits) {
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) return make_error("eval: no tokens");
    if (pos0 < 0 || pos0 + n > n_ctx())
        return make_error("eval: positions {}..{} do not fit the context of {} tokens", pos0, pos0 + n - 1,
                          n_ctx());
    if (pos0 > n_past())
        return make_error(
            "eval: position {} is past the {} tokens evaluated so far (a recurrent model cannot skip)", pos0,
            n_past());
    for (int64_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab)
            return make_error("eval: token id {} (at index {}) is outside the vocabulary of {}", tokens[i], i,
                              hp_.n_vocab);
    if (!all_logits.empty() && static_cast<int64_t>(all_logits.size()) != n * hp_.n_vocab)
        return make_error("eval: all_logits holds {} floats, expected {} tokens x {} vocab",
                          all_logits.size(), n, hp_.n_vocab);
    if (pos0 < n_past()) {  // rewind: the DeltaNet state cannot step back, so rebuild it from the kept tokens
        history_.resize(static_cast<size_t>(pos0));
        state_.reset();
        for (int64_t done = 0; done < pos0; done += n_batch_)
            eval_chunk(history_.data() + done, std::min(n_batch_, pos0 - done), done, pool, nullptr);
    }
    hidden_rows_.clear();
    for (int64_t done = 0; done < n; done += n_batch_) {
        const int64_t m = std::min(n_batch_, n - done);
        eval_chunk(tokens.data() + done, m, pos0 + done, pool,
                   all_logits.empty() ? nullptr : all_logits.data() + done * hp_.n_vocab);
    }
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    return {};
}

void HybridForward::eval_chunk(const int32_t* tokens, int64_t n, int64_t pos0, ThreadPool& pool,
                               float* all_logits) {
    const ModelWeights& base = model_.weights();
    const int64_t e = hp_.n_embd;
    const ToFloatFn to_float = dtype_info(base.tok_embd.dtype).to_float;
    for (int64_t t = 0; t < n; ++t) to_float(base.tok_embd.row_ptr(tokens[t]), x_.data() + t * e, e);
    if (hp_.embd_scale != 1.0f) cpu::scale(x_.data(), hp_.embd_scale, x_.data(), n * e);  // as the GPU pass
    for (int64_t t = 0; t < n; ++t) pos_[static_cast<size_t>(t)] = pos0 + t;
    cpu::rope_table(hp_.inv_freq.data(), static_cast<int>(hp_.rope_dim), pos_.data(), n, hp_.rope_attn_factor,
                    cos_.data(), sin_.data());

    for (int il = 0; il < hp_.n_layer; ++il) {
        const LayerWeights& L = w_.layers[static_cast<size_t>(il)];
        if (L.kind.mixer == Mixer::kGatedAttention) {
            const int slot = kv_index_[static_cast<size_t>(il)];
            attention_layer(L, kv_.k(slot), kv_.v(slot), n, pos0, pool);
            continue;
        }
        cpu::rms_norm(x_.data(), L.attn_norm, xn_.data(), n, e, hp_.rms_eps, NormWeight::kOnePlus, &pool);
        deltanet(il, n, pool);
        cpu::add(x_.data(), proj_.data(), x_.data(), n * e);
        cpu::rms_norm(x_.data(), L.ffn_norm, xn_.data(), n, e, hp_.rms_eps, NormWeight::kOnePlus, &pool);
        ffn(L, n, pool);
        cpu::add(x_.data(), proj_.data(), x_.data(), n * e);
    }

    // Output head: every row when all logits (or all hidden states) are wanted, else only the last.
    const int64_t first = all_logits || keep_hidden_ ? 0 : n - 1, rows = n - first, V = hp_.n_vocab;
    cpu::rms_norm(x_.data() + first * e, base.output_norm, xn_.data(), rows, e, hp_.rms_eps,
                  NormWeight::kOnePlus, &pool);
    std::copy(xn_.data() + (rows - 1) * e, xn_.data() + rows * e, last_hidden_.begin());
    if (keep_hidden_) hidden_rows_.insert(hidden_rows_.end(), xn_.data(), xn_.data() + rows * e);
    const float ls = hp_.logit_scale;
    if (all_logits) {
        cpu::matmul(base.output, xn_.data(), rows, all_logits, pool);
        if (ls != 1.0f) cpu::scale(all_logits, ls, all_logits, rows * V);
        std::copy(all_logits + (rows - 1) * V, all_logits + rows * V, last_logits_.begin());
    } else {
        cpu::matmul(base.output, xn_.data() + (rows - 1) * e, 1, last_logits_.data(), pool);
        if (ls != 1.0f) cpu::scale(last_logits_.data(), ls, last_logits_.data(), V);
    }
}

Status HybridForward::mtp_eval(std::span<const int32_t> next_tokens, std::span<const float> hidden,
                               int64_t pos0, ThreadPool& pool, std::span<float> all_logits) {
    if (!has_mtp()) return make_error("{}: the model has no MTP block (mtp.*)", model_.path());
    const auto n = static_cast<int64_t>(next_tokens.size());
    const int64_t e = hp_.n_embd;
    if (n == 0) return make_error("mtp_eval: no tokens");
    if (static_cast<int64_t>(hidden.size()) != n * e)
        return make_error("mtp_eval: hidden holds {} floats, expected {} rows x {}", hidden.size(), n, e);
    if (pos0 < 0 || pos0 + n > n_ctx())
        return make_error("mtp_eval: positions {}..{} do not fit the context of {} tokens", pos0,
                          pos0 + n - 1, n_ctx());
    if (pos0 > mtp_n_past_)
        return make_error("mtp_eval: position {} is past the {} MTP positions evaluated so far", pos0,
                          mtp_n_past_);
    for (int64_t i = 0; i < n; ++i)
        if (next_tokens[i] < 0 || next_tokens[i] >= hp_.n_vocab)
            return make_error("mtp_eval: token id {} (at index {}) is outside the vocabulary of {}",
                              next_tokens[i], i, hp_.n_vocab);
    if (!all_logits.empty() && static_cast<int64_t>(all_logits.size()) != n * hp_.n_vocab)
        return make_error("mtp_eval: all_logits holds {} floats, expected {} tokens x {} vocab",
                          all_logits.size(), n, hp_.n_vocab);
    for (int64_t done = 0; done < n; done += n_batch_)
        mtp_chunk(next_tokens.data() + done, hidden.data() + done * e, std::min(n_batch_, n - done),
                  pos0 + done, pool, all_logits.empty() ? nullptr : all_logits.data() + done * hp_.n_vocab);
    mtp_n_past_ = pos0 + n;
    return {};
}

Status HybridForward::mtp_draft(int32_t next_token, ThreadPool& pool) {
    if (n_past() == 0) return make_error("mtp_draft: nothing evaluated yet");
    return mtp_eval(std::span(&next_token, 1), last_hidden_, n_past() - 1, pool);
}

void HybridForward::mtp_chunk(const int32_t* tokens, const float* hidden, int64_t n, int64_t pos0,
                              ThreadPool& pool, float* all_logits) {
    const ModelWeights& base = model_.weights();
    const MtpWeights& M = w_.mtp;
    const int64_t e = hp_.n_embd;
    // fc input: [norm_embd(embd[x_{p+1}]) | norm_hidden(h_p)] per row, the embedding first.
    const ToFloatFn to_float = dtype_info(base.tok_embd.dtype).to_float;
    for (int64_t t = 0; t < n; ++t) to_float(base.tok_embd.row_ptr(tokens[t]), x_.data() + t * e, e);
    if (hp_.embd_scale != 1.0f) cpu::scale(x_.data(), hp_.embd_scale, x_.data(), n * e);
    cpu::rms_norm(x_.data(), M.norm_embd, xn_.data(), n, e, hp_.rms_eps, NormWeight::kOnePlus, &pool);
    cpu::rms_norm(hidden, M.norm_hidden, proj_.data(), n, e, hp_.rms_eps, NormWeight::kOnePlus, &pool);
    for (int64_t t = 0; t < n; ++t) {
        std::copy(xn_.data() + t * e, xn_.data() + (t + 1) * e, mtp_in_.data() + 2 * t * e);
        std::copy(proj_.data() + t * e, proj_.data() + (t + 1) * e, mtp_in_.data() + (2 * t + 1) * e);
    }
    cpu::matmul(M.fc, mtp_in_.data(), n, x_.data(), pool);

    for (int64_t t = 0; t < n; ++t) pos_[static_cast<size_t>(t)] = pos0 + t + 1;  // x_{p+1} sits at p + 1
    cpu::rope_table(hp_.inv_freq.data(), static_cast<int>(hp_.rope_dim), pos_.data(), n, hp_.rope_attn_factor,
                    cos_.data(), sin_.data());
    attention_layer(M.layers[0], mtp_kv_.k(0), mtp_kv_.v(0), n, pos0, pool);

    const int64_t first = all_logits ? 0 : n - 1, rows = n - first, V = hp_.n_vocab;
    cpu::rms_norm(x_.data() + first * e, M.norm, xn_.data(), rows, e, hp_.rms_eps, NormWeight::kOnePlus,
                  &pool);
    const float ls = hp_.logit_scale;
    if (all_logits) {
        cpu::matmul(base.output, xn_.data(), rows, all_logits, pool);
        if (ls != 1.0f) cpu::scale(all_logits, ls, all_logits, rows * V);
        std::copy(all_logits + (rows - 1) * V, all_logits + rows * V, mtp_logits_.begin());
    } else {
        cpu::matmul(base.output, xn_.data(), 1, mtp_logits_.data(), pool);
        if (ls != 1.0f) cpu::scale(mtp_logits_.data(), ls, mtp_logits_.data(), V);
    }
}

}  // namespace pelican
