// The CPU executor's MTP step (Executor::mtp_step) on tiny random Qwen3.5 models with an mtp.* block: the
// drafted logits of several sequences in one batch against the double-precision reference's mtp_step
// (tests/unit/hybrid_test_util.h), the MTP rows fed in pieces equal to one piece, the memory's MTP books
// (truncate, fork, close) and clear errors.
#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/cpu_executor.h"
#include "executor_test_util.h"
#include "golden_test_util.h"
#include "hybrid_test_util.h"
#include "model/model.h"

namespace pelican {
namespace {

using test::HybridSpec;

std::vector<int32_t> random_tokens(size_t n, int64_t vocab, std::mt19937& rng) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
}

using test::Rows;

struct Fixture {
    HybridSpec spec;
    test::HfWeightsMap w;
    test::TempDir dir;
    std::unique_ptr<Model> model;
    std::unique_ptr<cpu::CpuExecutor> exec;
    ThreadPool pool{2};

    Fixture(const HybridSpec& s, const std::string& tag) : spec(s), w(test::hybrid_weights(s)), dir(tag) {
        test::write_hybrid_folder(dir.str(), spec, w);
        auto m = Model::load(dir.str());
        EXPECT_TRUE(m.ok()) << m.error().message;
        if (!m.ok()) return;
        model = std::move(m).value();
        auto e = cpu::CpuExecutor::create(*model, {.max_batch_tokens = 128});
        EXPECT_TRUE(e.ok()) << e.error().message;
        if (e.ok()) exec = std::move(e).value();
    }
    // The reference's MTP logits and the main hidden states for positions 0 .. n-2 of toks.
    void reference(const std::vector<int32_t>& toks, std::vector<float>& logits,
                   std::vector<float>& hidden) const {
        test::HybridReference r(spec, w);
        for (size_t p = 0; p + 1 < toks.size(); ++p) {
            r.step(toks[p]);
            for (double x : r.hidden()) hidden.push_back(static_cast<float>(x));
            for (double x : r.mtp_step(toks[p + 1], r.hidden())) logits.push_back(static_cast<float>(x));
        }
    }
};

// Three sequences prefilled in one step (hidden rows kept), then their MTP rows in one MTP step: each row's
// drafted logits against the reference (the same 1e-4 bound as the single-sequence MTP tests).
void check_batch(const HybridSpec& s, const std::string& tag) {
    Fixture fx(s, tag);
    ASSERT_TRUE(fx.exec);
    auto mem = fx.exec->create_memory({.max_seqs = 4, .max_seq_tokens = 64, .block_tokens = 8, .mtp = true});
    ASSERT_TRUE(mem.ok()) << mem.error().message;
    std::mt19937 rng(5);
    const size_t lens[3] = {23, 9, 31};
    std::vector<std::vector<int32_t>> toks;
    std::vector<SeqId> ids;
    Rows pre;
    for (size_t lenv : lens) {
        ids.push_back((*mem)->open().value());
        toks.push_back(random_tokens(lenv, s.n_vocab, rng));
        pre.add(ids.back(), 0, toks.back());
    }
    const int64_t E = s.n_embd, V = s.n_vocab;
    std::vector<float> hidden(pre.token.size() * static_cast<size_t>(E));
    ASSERT_TRUE(fx.exec->step(pre.batch(), **mem, StepOutputs{.hidden = hidden}, fx.pool).ok());

    // MTP rows p = 0 .. len-2 of every sequence: token x_{p+1}, hidden h_p; in two steps (the first 5 rows of
    // each sequence, then the rest), so the second reads the MTP K/V the first wrote.
    for (int part = 0; part < 2; ++part) {
        Rows mt;
        std::vector<float> h;
        std::vector<std::pair<size_t, size_t>> where;  // (sequence, first position) of each run
        size_t row0 = 0;
        for (size_t i = 0; i < 3; ++i) {
            const size_t n_rows = lens[i] - 1, split = 5;
            const size_t a = part == 0 ? 0 : split, b = part == 0 ? split : n_rows;
            mt.add(ids[i], static_cast<int64_t>(a), std::span(toks[i]).subspan(a + 1, b - a));
            h.insert(h.end(), hidden.begin() + static_cast<long>((row0 + a) * E),
                     hidden.begin() + static_cast<long>((row0 + b) * E));
            where.emplace_back(i, a);
            row0 += lens[i];
        }
        std::vector<float> logits(mt.token.size() * static_cast<size_t>(V));
        auto st = fx.exec->mtp_step(mt.batch(), h, **mem, StepOutputs{.logits = logits}, fx.pool);
        ASSERT_TRUE(st.ok()) << st.error().message;
        size_t r = 0;
        for (auto [i, a] : where) {
            std::vector<float> want, want_h;
            fx.reference(toks[i], want, want_h);
            const size_t n_rows = (part == 0 ? 5 : lens[i] - 1) - a;
            const std::vector<float> got(logits.begin() + static_cast<long>(r * V),
                                         logits.begin() + static_cast<long>((r + n_rows) * V));
            const std::vector<float> ref(want.begin() + static_cast<long>(a * V),
                                         want.begin() + static_cast<long>((a + n_rows) * V));
            const double d = golden::row_rel_diff(got, ref, static_cast<size_t>(V));
            fmt::print(
                "{}: sequence {} MTP rows {}..{}: max relative logit error vs the double reference {:.2e}\n",
                tag, i, a, a + n_rows - 1, d);
            EXPECT_LT(d, 1e-4) << "sequence " << i << " part " << part;
            EXPECT_EQ((*mem)->mtp_length(ids[i]), static_cast<int64_t>(a + n_rows));
            r += n_rows;
        }
    }
}

TEST(CpuExecutorMtp, MoeBatchMatchesTheReference) {
    HybridSpec s;
    s.mtp = true;
    check_batch(s, "exec_mtp_moe");
}

TEST(CpuExecutorMtp, DenseBatchMatchesTheReference) {
    HybridSpec s;
    s.moe = false;
    s.prefix = "model.";
    s.mtp = true;
    s.seed = 13;
    check_batch(s, "exec_mtp_dense");
}

TEST(CpuExecutorMtp, BooksAndErrors) {
    HybridSpec s;
    s.mtp = true;
    Fixture fx(s, "exec_mtp_err");
    ASSERT_TRUE(fx.exec);
    std::mt19937 rng(3);
    const auto toks = random_tokens(12, s.n_vocab, rng);
    const int64_t E = s.n_embd, V = s.n_vocab;
    {  // a memory made without the MTP pools
        auto plain = fx.exec->create_memory({.max_seqs = 1, .max_seq_tokens = 32});
        ASSERT_TRUE(plain.ok());
        const SeqId a = (*plain)->open().value();
        Rows pre;
        pre.add(a, 0, toks);
        ASSERT_TRUE(fx.exec->step(pre.batch(), **plain, {}, fx.pool).ok());
        Rows mt;
        mt.add(a, 0, std::span(toks).subspan(1, 1));
        std::vector<float> h(static_cast<size_t>(E));
        auto st = fx.exec->mtp_step(mt.batch(), h, **plain, {}, fx.pool);
        ASSERT_FALSE(st.ok());
        EXPECT_NE(st.error().message.find("MemoryOptions::mtp"), std::string::npos) << st.error().message;
    }
    auto mem = fx.exec->create_memory({.max_seqs = 2, .max_seq_tokens = 32, .block_tokens = 4, .mtp = true});
    ASSERT_TRUE(mem.ok());
    const SeqId a = (*mem)->open().value();
    // 4 tokens, then 8 in a step of at most `checkpoints` tokens: a recurrent state per position 4..12, so a
    // truncate into them is exact.
    std::vector<float> hidden(toks.size() * static_cast<size_t>(E));
    for (auto [p0, n] : {std::pair<size_t, size_t>{0, 4}, {4, 8}}) {
        Rows pre;
        pre.add(a, static_cast<int64_t>(p0), std::span(toks).subspan(p0, n));
        const auto h = std::span(hidden).subspan(p0 * static_cast<size_t>(E), n * static_cast<size_t>(E));
        ASSERT_TRUE(fx.exec->step(pre.batch(), **mem, StepOutputs{.hidden = h}, fx.pool).ok());
    }
    const auto mtp = [&](int64_t p0, size_t n, std::span<const float> h) {
        Rows mt;
        std::vector<int32_t> t(n, 1);
        mt.add(a, p0, t);
        std::vector<float> logits(n * static_cast<size_t>(V));
        return fx.exec->mtp_step(mt.batch(), h, **mem, StepOutputs{.logits = logits}, fx.pool);
    };
    const std::span<const float> h4 = std::span(hidden).first(4 * static_cast<size_t>(E));
    // Past the MTP rows written so far (none yet), past the length, a wrong hidden size: refused, nothing
    // committed.
    EXPECT_FALSE(mtp(1, 4, h4).ok());
    EXPECT_FALSE(mtp(10, 4, h4).ok());
    EXPECT_FALSE(mtp(0, 4, std::span(hidden).first(3 * static_cast<size_t>(E))).ok());
    EXPECT_EQ((*mem)->mtp_length(a), 0);
    ASSERT_TRUE(mtp(0, 4, h4).ok());
    EXPECT_EQ((*mem)->mtp_length(a), 4);
    ASSERT_TRUE(
        mtp(4, 4, std::span(hidden).subspan(4 * static_cast<size_t>(E), 4 * static_cast<size_t>(E))).ok());
    EXPECT_EQ((*mem)->mtp_length(a), 8);
    // A fork carries the MTP rows (they live in the shared blocks); truncate cuts them; close clears them.
    const SeqId b = (*mem)->open().value();
    ASSERT_TRUE((*mem)->fork(a, b).ok());
    EXPECT_EQ((*mem)->mtp_length(b), 8);
    EXPECT_EQ((*mem)->truncate(a, 6), 6);
    EXPECT_EQ((*mem)->mtp_length(a), 6);
    EXPECT_EQ((*mem)->mtp_length(b), 8);
    (*mem)->close(b);
    EXPECT_EQ((*mem)->mtp_length(b), 0);
    // A model without an MTP block: no MTP pools to make.
    HybridSpec plain_spec;
    Fixture no_mtp(plain_spec, "exec_mtp_none");
    ASSERT_TRUE(no_mtp.exec);
    EXPECT_FALSE(no_mtp.exec->create_memory({.max_seqs = 1, .max_seq_tokens = 16, .mtp = true}).ok());
}

}  // namespace
}  // namespace pelican
