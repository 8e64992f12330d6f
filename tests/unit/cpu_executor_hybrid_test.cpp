// The CPU executor on the hybrid Qwen3.5 stack (Gated DeltaNet + gated attention, MoE or dense MLP):
// a batch of sequences (prefills, decode rows and short multi-token steps mixed) gives each sequence
// the logits of the independent double-precision reference (tests/unit/hybrid_test_util.h) and of
// the sequence run alone; truncating within the memory's checkpoints is exact (the recurrent ring
// restores the state, no replay); truncating further back reports what it restored and the
// SequencePass re-feeds from there to the same logits; a fork carries the recurrent state.
#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/cpu_executor.h"
#include "golden_test_util.h"
#include "hybrid_test_util.h"
#include "model/model.h"
#include "runtime/forward_factory.h"

namespace pelican {
namespace {

using test::HybridSpec;

struct Fixture {
    HybridSpec spec;
    test::HfWeightsMap w;
    test::TempDir dir;
    std::unique_ptr<Model> model;

    Fixture(const HybridSpec& s, const std::string& tag) : spec(s), w(test::hybrid_weights(s)), dir(tag) {
        test::write_hybrid_folder(dir.str(), spec, w);
        auto m = Model::load(dir.str());
        EXPECT_TRUE(m.ok()) << m.error().message;
        if (m.ok()) model = std::move(m).value();
    }
    int64_t V() const { return spec.n_vocab; }
    // Last-position logits of the double reference fed `toks` from position 0.
    std::vector<float> reference(const std::vector<int32_t>& toks) const {
        test::HybridReference r(spec, w);
        test::Vec l;
        for (int32_t t : toks) l = r.step(t);
        return {l.begin(), l.end()};
    }
};

HybridSpec moe_spec() { return HybridSpec{}; }
HybridSpec dense_spec() {
    HybridSpec s;
    s.moe = false;
    s.prefix = "model.";
    s.seed = 9;
    return s;
}

std::vector<int32_t> random_tokens(size_t n, int64_t vocab, std::mt19937& rng) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
}

// fp32 kernels against the double reference (hybrid_forward_test uses the same bound over 150
// positions); and a sequence's rows against the same sequence alone: the matmuls reduce each row
// on its own and the DeltaNet runs per sequence, so only summation blocking between row counts
// and the chunked-vs-token-by-token DeltaNet forms differ.
constexpr double kRefBound = 1e-4;
constexpr double kAloneBound = 2e-5;

struct Step {
    std::vector<int32_t> tok;
    std::vector<int64_t> pos;
    std::vector<SeqId> seq;
    std::vector<int32_t> out_rows;
    void add(SeqId s, int64_t p0, std::span<const int32_t> t) {
        for (size_t j = 0; j < t.size(); ++j) {
            tok.push_back(t[j]);
            pos.push_back(p0 + static_cast<int64_t>(j));
            seq.push_back(s);
        }
        out_rows.push_back(static_cast<int32_t>(tok.size() - 1));
    }
    Status run(Executor& e, SequenceMemory& m, std::vector<float>& logits, ThreadPool& pool) const {
        logits.assign(out_rows.size() * static_cast<size_t>(e.model().hparams().n_vocab), 0.0f);
        return e.step({tok, pos, seq, out_rows}, m, {.logits = logits}, pool);
    }
};

class CpuExecutorHybrid : public ::testing::TestWithParam<bool> {
protected:
    HybridSpec spec() const { return GetParam() ? moe_spec() : dense_spec(); }
};

// Five sequences stepped together for 8 steps; each step gives every sequence 1, 3 or a
// prompt-sized chunk of tokens (longer than the checkpoints, so the chunked DeltaNet runs next to
// token-by-token rows), and each row is checked against the double reference and against the
// sequence alone in a one-sequence pass.
TEST_P(CpuExecutorHybrid, BatchOfSequencesMatchesReferenceAndEachAlone) {
    Fixture fx(spec(), GetParam() ? "exh_moe" : "exh_dense");
    ASSERT_TRUE(fx.model);
    ThreadPool pool(2);
    auto exec = cpu::CpuExecutor::create(*fx.model, {.max_batch_tokens = 128});
    ASSERT_TRUE(exec.ok()) << exec.error().message;
    auto mem =
        (*exec)->create_memory({.max_seqs = 5, .max_seq_tokens = 96, .block_tokens = 4, .checkpoints = 4});
    ASSERT_TRUE(mem.ok()) << mem.error().message;
    std::mt19937 rng(11);
    std::vector<std::vector<int32_t>> toks(5);
    std::vector<SeqId> ids;
    for (int i = 0; i < 5; ++i) ids.push_back((*mem)->open().value());
    double worst_ref = 0, worst_alone = 0;
    std::vector<float> logits;
    for (int stepn = 0; stepn < 8; ++stepn) {
        Step st;
        std::vector<size_t> stepped;
        for (size_t i = 0; i < 5; ++i) {
            if ((stepn + i) % 4 == 3) continue;  // not every sequence in every step
            const size_t add = stepn == 0 ? 2 + 5 * i : ((stepn + i) % 3 == 0 ? 3 : 1 + (i == 4) * 10);
            const auto t = random_tokens(add, fx.V(), rng);
            st.add(ids[i], static_cast<int64_t>(toks[i].size()), t);
            toks[i].insert(toks[i].end(), t.begin(), t.end());
            stepped.push_back(i);
        }
        ASSERT_TRUE(st.run(**exec, **mem, logits, pool).ok());
        for (size_t r = 0; r < stepped.size(); ++r) {
            const size_t i = stepped[r];
            const auto row =
                std::span(logits).subspan(r * static_cast<size_t>(fx.V()), static_cast<size_t>(fx.V()));
            EXPECT_EQ((*mem)->length(ids[i]), static_cast<int64_t>(toks[i].size()));
            const double dr = test::max_rel_diff(row, fx.reference(toks[i]));
            auto alone = create_cpu_pass(*fx.model, ForwardOptions{.n_ctx = 96});
            ASSERT_TRUE(alone.ok()) << alone.error().message;
            ASSERT_TRUE((*alone)->eval(toks[i], 0, pool).ok());
            const double da = test::max_rel_diff(row, (*alone)->last_logits());
            EXPECT_LT(dr, kRefBound) << "step " << stepn << " seq " << i;
            EXPECT_LT(da, kAloneBound) << "step " << stepn << " seq " << i;
            worst_ref = std::max(worst_ref, dr);
            worst_alone = std::max(worst_alone, da);
        }
    }
    fmt::print("hybrid batch: worst vs double reference {:.2e}, vs alone {:.2e}\n", worst_ref, worst_alone);
}

// Truncate back 1..checkpoints positions after decode steps: the memory restores exactly that length
// (no replay), and stepping on gives the reference logits of the shortened history. A truncate
// further back than the ring reaches returns a shorter length; the caller re-feeds from there.
TEST_P(CpuExecutorHybrid, TruncateWithinCheckpointsIsExactAndFurtherBackReportsWhatItRestored) {
    Fixture fx(spec(), GetParam() ? "exh_trunc_moe" : "exh_trunc_dense");
    ASSERT_TRUE(fx.model);
    ThreadPool pool(2);
    constexpr int32_t K = 4;
    auto exec = cpu::CpuExecutor::create(*fx.model, {.max_batch_tokens = 64});
    ASSERT_TRUE(exec.ok());
    auto mem =
        (*exec)->create_memory({.max_seqs = 2, .max_seq_tokens = 80, .block_tokens = 4, .checkpoints = K});
    ASSERT_TRUE(mem.ok());
    std::mt19937 rng(5);
    const SeqId s = (*mem)->open().value();
    std::vector<int32_t> toks = random_tokens(20, fx.V(), rng);
    std::vector<float> logits;
    Step pre;
    pre.add(s, 0, toks);
    ASSERT_TRUE(pre.run(**exec, **mem, logits, pool).ok());
    for (int back = 1; back <= K; ++back) {
        // back single-token decode steps (one state entry each), then roll them back.
        for (int j = 0; j < back; ++j) {
            Step d;
            const auto t = random_tokens(1, fx.V(), rng);
            d.add(s, static_cast<int64_t>(toks.size()) + j, t);
            ASSERT_TRUE(d.run(**exec, **mem, logits, pool).ok());
        }
        const int64_t n = static_cast<int64_t>(toks.size());
        ASSERT_EQ((*mem)->truncate(s, n), n) << "back " << back;  // exact: the ring had it
        const auto t = random_tokens(1, fx.V(), rng);
        Step d;
        d.add(s, n, t);
        ASSERT_TRUE(d.run(**exec, **mem, logits, pool).ok());
        toks.push_back(t[0]);
        EXPECT_LT(test::max_rel_diff(logits, fx.reference(toks)), kRefBound) << "back " << back;
    }
    // A 3-token step keeps a state per token: truncating into it is exact too.
    {
        Step d;
        const auto t = random_tokens(3, fx.V(), rng);
        d.add(s, static_cast<int64_t>(toks.size()), t);
        ASSERT_TRUE(d.run(**exec, **mem, logits, pool).ok());
        const int64_t keep = static_cast<int64_t>(toks.size()) + 1;
        ASSERT_EQ((*mem)->truncate(s, keep), keep);
        toks.push_back(t[0]);
        const auto u = random_tokens(1, fx.V(), rng);
        Step e;
        e.add(s, keep, u);
        ASSERT_TRUE(e.run(**exec, **mem, logits, pool).ok());
        toks.push_back(u[0]);
        EXPECT_LT(test::max_rel_diff(logits, fx.reference(toks)), kRefBound) << "into a 3-token step";
    }
    // Further back than the ring: the memory says how far it got (less than asked).
    const int64_t n = static_cast<int64_t>(toks.size());
    const int64_t got = (*mem)->truncate(s, n - (K + 3));
    EXPECT_LT(got, n - (K + 3));
    EXPECT_EQ((*mem)->length(s), got);
    // Re-feeding from `got` lands on the same logits as the history cut at n - (K + 3).
    toks.resize(static_cast<size_t>(n - (K + 3)));
    Step r;
    r.add(s, got, std::span(toks).subspan(static_cast<size_t>(got)));
    ASSERT_TRUE(r.run(**exec, **mem, logits, pool).ok());
    EXPECT_LT(test::max_rel_diff(logits, fx.reference(toks)), kRefBound) << "re-fed after a far truncate";
}

// A fork takes the parent's recurrent state and shares its KV pages; both then decode different
// tokens in one batch and each matches its own history's reference.
TEST_P(CpuExecutorHybrid, ForkCarriesTheRecurrentState) {
    Fixture fx(spec(), GetParam() ? "exh_fork_moe" : "exh_fork_dense");
    ASSERT_TRUE(fx.model);
    ThreadPool pool(2);
    auto exec = cpu::CpuExecutor::create(*fx.model, {.max_batch_tokens = 64});
    ASSERT_TRUE(exec.ok());
    auto mem = (*exec)->create_memory({.max_seqs = 2, .max_seq_tokens = 64, .block_tokens = 4});
    ASSERT_TRUE(mem.ok());
    std::mt19937 rng(17);
    const SeqId a = (*mem)->open().value();
    std::vector<int32_t> ta = random_tokens(13, fx.V(), rng);
    std::vector<float> logits;
    Step pre;
    pre.add(a, 0, ta);
    ASSERT_TRUE(pre.run(**exec, **mem, logits, pool).ok());
    const SeqId b = (*mem)->open().value();
    ASSERT_TRUE((*mem)->fork(a, b).ok());
    std::vector<int32_t> tb = ta;
    for (int j = 0; j < 4; ++j) {
        Step st;
        const auto x = random_tokens(2, fx.V(), rng);
        st.add(a, static_cast<int64_t>(ta.size()), std::span(x).first(1));
        st.add(b, static_cast<int64_t>(tb.size()), std::span(x).last(1));
        ASSERT_TRUE(st.run(**exec, **mem, logits, pool).ok());
        ta.push_back(x[0]);
        tb.push_back(x[1]);
        const auto V = static_cast<size_t>(fx.V());
        EXPECT_LT(test::max_rel_diff(std::span(logits).first(V), fx.reference(ta)), kRefBound) << j;
        EXPECT_LT(test::max_rel_diff(std::span(logits).last(V), fx.reference(tb)), kRefBound) << j;
    }
}

// The one-sequence pass over the executor: rewinds within the checkpoints and far back (replay
// from the restored length) both give the reference logits at every position re-evaluated.
TEST_P(CpuExecutorHybrid, SequencePassRewindsAnywhere) {
    Fixture fx(spec(), GetParam() ? "exh_pass_moe" : "exh_pass_dense");
    ASSERT_TRUE(fx.model);
    ThreadPool pool(2);
    auto pass = create_cpu_pass(*fx.model, ForwardOptions{.n_ctx = 128, .n_batch = 16});
    ASSERT_TRUE(pass.ok()) << pass.error().message;
    std::mt19937 rng(23);
    std::vector<int32_t> toks = random_tokens(40, fx.V(), rng);
    ASSERT_TRUE((*pass)->eval(toks, 0, pool).ok());  // 3 chunks of <= 16
    // All rows of a prompt at once, after a rewind far past the checkpoints.
    std::vector<int32_t> more = random_tokens(5, fx.V(), rng);
    std::vector<float> all(more.size() * static_cast<size_t>(fx.V()));
    ASSERT_TRUE((*pass)->eval(more, 10, pool, all).ok());
    toks.resize(10);
    for (size_t j = 0; j < more.size(); ++j) {
        toks.push_back(more[j]);
        const auto row = std::span(all).subspan(j * static_cast<size_t>(fx.V()), static_cast<size_t>(fx.V()));
        EXPECT_LT(test::max_rel_diff(row, fx.reference(toks)), kRefBound) << "row " << j;
    }
    // Rewinds within the checkpoints (14, 12), far back (5, 0) and one position after a far one.
    for (int64_t pos0 : {14, 12, 5, 0, 1}) {
        std::vector<int32_t> tail = random_tokens(2, fx.V(), rng);
        ASSERT_TRUE((*pass)->eval(tail, pos0, pool).ok()) << pos0;
        toks.resize(static_cast<size_t>(pos0));
        toks.insert(toks.end(), tail.begin(), tail.end());
        EXPECT_LT(test::max_rel_diff((*pass)->last_logits(), fx.reference(toks)), kRefBound)
            << "pos0 " << pos0;
    }
}

INSTANTIATE_TEST_SUITE_P(Hybrid, CpuExecutorHybrid, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Moe" : "Dense"; });

}  // namespace
}  // namespace pelican
