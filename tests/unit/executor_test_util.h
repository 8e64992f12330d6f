// One sequence through a CPU executor (backend/cpu/cpu_executor.h) for tests that want every position's
// logits, the final-normed hidden rows and the MTP block's drafts in one place.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "backend/cpu/cpu_executor.h"
#include "model/model.h"

namespace pelican::test {

// The rows of one step or MTP step, every row among the out rows.
struct Rows {
    std::vector<int32_t> token, out;
    std::vector<int64_t> pos;
    std::vector<SeqId> seq;
    // Tokens t of sequence s at positions pos0, pos0 + 1, ...
    void add(SeqId s, int64_t pos0, std::span<const int32_t> t) {
        for (size_t i = 0; i < t.size(); ++i) {
            out.push_back(static_cast<int32_t>(token.size()));
            token.push_back(t[i]);
            pos.push_back(pos0 + static_cast<int64_t>(i));
            seq.push_back(s);
        }
    }
    Batch batch() const { return Batch{token, pos, seq, out}; }
};

struct ExecutorLogits {
    std::vector<float> main;    // [n, n_vocab] every position of toks
    std::vector<float> hidden;  // [n, n_embd] the final-normed hidden rows (the MTP input)
    std::vector<float> mtp;     // [next.size(), n_vocab]: row p drafts from (next[p], hidden[p])
};

// toks in one step; then, when next is given (next.size() <= toks.size()), one MTP step over rows p = 0 ..
// next.size()-1 with tokens next[p] (normally toks[p + 1]) and hidden rows h_p.
inline ExecutorLogits run_executor(const Model& m, std::span<const int32_t> toks,
                                   std::span<const int32_t> next = {}) {
    ExecutorLogits r;
    auto exec = cpu::CpuExecutor::create(m, {.max_batch_tokens = static_cast<int64_t>(toks.size())});
    EXPECT_TRUE(exec.ok()) << exec.error().message;
    if (!exec.ok()) return r;
    const auto n = static_cast<int64_t>(toks.size());
    auto mem = (*exec)->create_memory({.max_seqs = 1, .max_seq_tokens = n, .mtp = !next.empty()});
    EXPECT_TRUE(mem.ok()) << mem.error().message;
    if (!mem.ok()) return r;
    const SeqId s = (*mem)->open().value();
    Rows main, draft;
    main.add(s, 0, toks);
    draft.add(s, 0, next);
    const int64_t V = m.hparams().n_vocab, E = m.hparams().n_embd;
    r.main.resize(static_cast<size_t>(n * V));
    r.hidden.resize(static_cast<size_t>(n * E));
    ThreadPool pool(2);
    auto st = (*exec)->step(main.batch(), **mem, StepOutputs{.logits = r.main, .hidden = r.hidden}, pool);
    EXPECT_TRUE(st.ok()) << st.error().message;
    if (!st.ok() || next.empty()) return r;
    const size_t k = next.size();
    r.mtp.resize(k * static_cast<size_t>(V));
    st = (*exec)->mtp_step(draft.batch(), std::span(r.hidden).first(k * static_cast<size_t>(E)), **mem,
                           StepOutputs{.logits = r.mtp}, pool);
    EXPECT_TRUE(st.ok()) << st.error().message;
    return r;
}

}  // namespace pelican::test
