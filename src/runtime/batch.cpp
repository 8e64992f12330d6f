// split_batch (runtime/batch.h): the one place a step's input is checked.
#include "runtime/batch.h"

namespace pelican {

Status split_batch(const Batch& b, const SequenceMemory& mem, int64_t n_vocab, int64_t n_embd,
                   int64_t max_tokens, const StepOutputs& out, std::vector<SeqRun>& runs, RowsFrom from) {
    runs.clear();
    const auto n = static_cast<int64_t>(b.token.size());
    if (n == 0) return make_error("step: empty batch");
    if (static_cast<int64_t>(b.pos.size()) != n || static_cast<int64_t>(b.seq.size()) != n)
        return make_error("step: {} tokens but {} positions and {} sequence ids", n, b.pos.size(),
                          b.seq.size());
    if (n > max_tokens) return make_error("step: {} rows, at most {} per step", n, max_tokens);
    for (int64_t i = 0; i < n; ++i) {
        const int32_t t = b.token[static_cast<size_t>(i)];
        if (t < 0 || t >= n_vocab)
            return make_error("token id {} (at index {}) is outside the vocabulary of {}", t, i, n_vocab);
        const SeqId s = b.seq[static_cast<size_t>(i)];
        const int64_t p = b.pos[static_cast<size_t>(i)];
        if (!mem.is_open(s)) return make_error("step: row {} names sequence {}, which is not open", i, s);
        if (i > 0 && b.seq[static_cast<size_t>(i - 1)] == s) {
            if (p != b.pos[static_cast<size_t>(i - 1)] + 1)
                return make_error("step: row {} of sequence {} is at position {}, expected {}", i, s, p,
                                  b.pos[static_cast<size_t>(i - 1)] + 1);
            ++runs.back().n;
            continue;
        }
        for (const SeqRun& r : runs)
            if (r.seq == s)
                return make_error("step: the rows of sequence {} are not consecutive (row {})", s, i);
        if (from == RowsFrom::kLength && p != mem.length(s))
            return make_error(
                "step: sequence {} holds {} positions, its first row is at {} (truncate to rewrite)", s,
                mem.length(s), p);
        if (from == RowsFrom::kMtp && (p < 0 || p > mem.mtp_length(s)))
            return make_error("mtp step: sequence {} has MTP rows at positions 0..{}, its first row is at {}",
                              s, mem.mtp_length(s) - 1, p);
        runs.push_back(SeqRun{s, i, 1, p});
    }
    if (from == RowsFrom::kMtp)
        for (const SeqRun& r : runs)
            if (r.pos0 + r.n > mem.length(r.seq))
                return make_error(
                    "mtp step: rows at positions {}..{} of sequence {}, which holds {} (the main model runs "
                    "first)",
                    r.pos0, r.pos0 + r.n - 1, r.seq, mem.length(r.seq));
    for (const SeqRun& r : runs)
        if (r.pos0 + r.n > mem.max_seq_tokens())
            return make_error("positions {}..{} do not fit the context of {} tokens", r.pos0,
                              r.pos0 + r.n - 1, mem.max_seq_tokens());
    const auto n_out = static_cast<int64_t>(b.out_rows.size());
    for (int64_t i = 0; i < n_out; ++i) {
        const int32_t r = b.out_rows[static_cast<size_t>(i)];
        if (r < 0 || r >= n || (i > 0 && r <= b.out_rows[static_cast<size_t>(i - 1)]))
            return make_error("step: out_rows must be ascending rows of the batch (entry {} is {})", i, r);
    }
    if (!out.logits.empty() && static_cast<int64_t>(out.logits.size()) != n_out * n_vocab)
        return make_error("step: logits output holds {} floats, expected {} rows x {} vocab",
                          out.logits.size(), n_out, n_vocab);
    if (static_cast<int64_t>(out.sample.size()) != (out.sample.empty() ? 0 : n_out) ||
        out.tokens.size() != out.sample.size())
        return make_error("step: {} sampling rows and {} token slots for {} out rows", out.sample.size(),
                          out.tokens.size(), n_out);
    if (!out.hidden.empty() && static_cast<int64_t>(out.hidden.size()) != n_out * n_embd)
        return make_error("step: hidden output holds {} floats, expected {} rows x {}", out.hidden.size(),
                          n_out, n_embd);
    return {};
}

}  // namespace pelican
