// SequencePass (runtime/sequence_pass.h).
#include "runtime/sequence_pass.h"

#include <algorithm>
#include <numeric>

#include "model/model.h"

namespace pelican {

Expected<std::unique_ptr<SequencePass>> SequencePass::create(std::unique_ptr<Executor> exec,
                                                             const ForwardOptions& opt) {
    if (!exec) return make_error("sequence pass: no executor");
    if (opt.n_ctx <= 0) return make_error("context size must be positive, got {}", opt.n_ctx);
    if (opt.n_batch <= 0) return make_error("batch size must be positive, got {}", opt.n_batch);
    std::unique_ptr<SequencePass> p(new SequencePass());
    p->n_batch_ = std::min({opt.n_batch, opt.n_ctx, exec->max_batch_tokens()});
    p->n_vocab_ = exec->model().hparams().n_vocab;
    PELICAN_ASSIGN(p->mem_, exec->create_memory(MemoryOptions{.max_seqs = 1, .max_seq_tokens = opt.n_ctx}));
    PELICAN_ASSIGN(p->seq_, p->mem_->open());
    // The whole context up front: nothing is taken from the pool while generating.
    PELICAN_TRY(p->mem_->reserve(p->seq_, opt.n_ctx));
    p->exec_ = std::move(exec);
    const auto B = static_cast<size_t>(p->n_batch_);
    p->pos_.resize(B);
    p->seq_ids_.assign(B, p->seq_);
    p->rows_.resize(B);
    std::iota(p->rows_.begin(), p->rows_.end(), 0);
    p->last_logits_.assign(static_cast<size_t>(p->n_vocab_), 0.0f);
    p->history_.reserve(static_cast<size_t>(opt.n_ctx));
    p->replay_.reserve(static_cast<size_t>(opt.n_ctx));
    return p;
}

Status SequencePass::eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                          std::span<float> all_logits) {
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) return make_error("eval: no tokens");
    const int64_t have = mem_->length(seq_);
    if (pos0 < 0 || pos0 + n > n_ctx())
        return make_error("eval: positions {}..{} do not fit the context of {} tokens", pos0, pos0 + n - 1,
                          n_ctx());
    if (pos0 > have)
        return make_error("eval: position {} is past the {} positions evaluated so far", pos0, have);
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[static_cast<size_t>(i)] < 0 || tokens[static_cast<size_t>(i)] >= n_vocab_)
            return make_error("eval: token id {} (at index {}) is outside the vocabulary of {}",
                              tokens[static_cast<size_t>(i)], i, n_vocab_);
    }
    if (!all_logits.empty() && static_cast<int64_t>(all_logits.size()) != n * n_vocab_)
        return make_error("eval: all_logits holds {} floats, expected {} tokens x {} vocab",
                          all_logits.size(), n, n_vocab_);
    const int64_t kept = mem_->truncate(seq_, pos0);  // < pos0 only for a recurrent model
    if (kept < pos0) {  // re-feed what the memory could not restore (no logits needed)
        replay_.assign(history_.begin() + kept, history_.begin() + pos0);
        history_.resize(static_cast<size_t>(kept));
        PELICAN_TRY(run(replay_, kept, pool, {}, false));
    }
    history_.resize(static_cast<size_t>(pos0));
    return run(tokens, pos0, pool, all_logits, true);
}

Status SequencePass::run(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                         std::span<float> all_logits, bool want_last) {
    const auto n = static_cast<int64_t>(tokens.size());
    for (int64_t done = 0; done < n; done += n_batch_) {
        const int64_t m = std::min(n_batch_, n - done);
        for (int64_t i = 0; i < m; ++i) pos_[static_cast<size_t>(i)] = pos0 + done + i;
        Batch b;
        b.token = tokens.subspan(static_cast<size_t>(done), static_cast<size_t>(m));
        b.pos = std::span<const int64_t>(pos_.data(), static_cast<size_t>(m));
        b.seq = std::span<const SeqId>(seq_ids_.data(), static_cast<size_t>(m));
        StepOutputs out;
        if (!all_logits.empty()) {
            b.out_rows = std::span<const int32_t>(rows_.data(), static_cast<size_t>(m));
            out.logits =
                all_logits.subspan(static_cast<size_t>(done * n_vocab_), static_cast<size_t>(m * n_vocab_));
        } else if (want_last && done + m == n) {
            b.out_rows = std::span<const int32_t>(rows_.data() + m - 1, 1);
            out.logits = last_logits_;
        }
        PELICAN_TRY(exec_->step(b, *mem_, out, pool));
        history_.insert(history_.end(), b.token.begin(), b.token.end());
    }
    if (!all_logits.empty() && want_last)
        std::copy(all_logits.end() - n_vocab_, all_logits.end(), last_logits_.begin());
    return {};
}

}  // namespace pelican
