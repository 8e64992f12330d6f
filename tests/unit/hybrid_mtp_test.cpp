// Multi-token prediction on the CPU executor (Executor::mtp_step) of tiny random Qwen3.5 models with an
// mtp.* block, written as HF folders by the test, one sequence the way speculative decoding drives it: the
// MTP logits against the double-precision reference's mtp_step (tests/unit/hybrid_test_util.h, written from
// research §1.7) over many consecutive positions (decode a token, draft the next; the MTP K/V grows), a
// batched priming of the MTP rows from the prefill's hidden states, rewriting MTP rows, the dense variant and
// clear errors. (Batches of many sequences: cpu_executor_mtp_test.)
#include <gtest/gtest.h>

#include <random>

#include "golden_test_util.h"
#include "hybrid_test_util.h"
#include "backend/cpu/cpu_executor.h"
#include "executor_test_util.h"
#include "model/model.h"

namespace pelican {
namespace {

using test::HybridSpec;

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
}

// One sequence on a CPU executor with MTP pools: step() feeds main tokens (hidden rows kept), draft() runs
// the MTP block over rows (token x_{p+1}, hidden h_p) at positions p0.. .
struct MtpSeq {
    const Model& m;
    std::unique_ptr<cpu::CpuExecutor> exec;
    std::unique_ptr<SequenceMemory> mem;
    SeqId s = 0;
    ThreadPool pool{2};
    std::vector<float> hidden;  // [length, n_embd] every main position's hidden row

    explicit MtpSeq(const Model& model, int64_t n_ctx = 128) : m(model) {
        auto e = cpu::CpuExecutor::create(m, {.max_batch_tokens = 96});
        EXPECT_TRUE(e.ok()) << e.error().message;
        if (!e.ok()) return;
        exec = std::move(e).value();
        auto mm = exec->create_memory({.max_seqs = 1, .max_seq_tokens = n_ctx, .mtp = true});
        EXPECT_TRUE(mm.ok()) << mm.error().message;
        if (!mm.ok()) return;
        mem = std::move(mm).value();
        s = mem->open().value();
    }
    Status step(std::span<const int32_t> t) {
        const size_t E = static_cast<size_t>(m.hparams().n_embd);
        std::vector<float> h(t.size() * E);
        test::Rows r;
        r.add(s, mem->length(s), t);
        PELICAN_TRY(exec->step(r.batch(), *mem, StepOutputs{.hidden = h}, pool));
        hidden.insert(hidden.end(), h.begin(), h.end());
        return {};
    }
    // Drafts for positions p0 .. p0 + next.size() - 1 from hid (default: the kept hidden rows).
    Status draft(std::span<const int32_t> next, int64_t p0, std::vector<float>& logits,
                 std::span<const float> hid = {}) {
        const size_t E = static_cast<size_t>(m.hparams().n_embd),
                     V = static_cast<size_t>(m.hparams().n_vocab);
        if (hid.empty()) hid = std::span(hidden).subspan(static_cast<size_t>(p0) * E, next.size() * E);
        logits.resize(next.size() * V);
        test::Rows r;
        r.add(s, p0, next);
        return exec->mtp_step(r.batch(), hid, *mem, StepOutputs{.logits = logits}, pool);
    }
};

std::unique_ptr<Model> load(const test::TempDir& dir, const HybridSpec& s, const test::HfWeightsMap& w) {
    test::write_hybrid_folder(dir.str(), s, w);
    auto m = Model::load(dir.str());
    EXPECT_TRUE(m.ok()) << m.error().message;
    return m.ok() ? std::move(m).value() : nullptr;
}

// Reference MTP logits for main positions p = 0 .. n-2 (h_p, x_{p+1}), and the main hidden states.
struct RefMtp {
    std::vector<float> logits, hidden;
};
RefMtp reference_mtp(const HybridSpec& s, const test::HfWeightsMap& w, const std::vector<int32_t>& toks) {
    test::HybridReference r(s, w);
    RefMtp out;
    for (size_t p = 0; p + 1 < toks.size(); ++p) {
        r.step(toks[p]);
        for (double x : r.hidden()) out.hidden.push_back(static_cast<float>(x));
        for (double x : r.mtp_step(toks[p + 1], r.hidden())) out.logits.push_back(static_cast<float>(x));
    }
    return out;
}

void check_step_by_step(const HybridSpec& s, const std::string& tag) {
    const auto w = test::hybrid_weights(s);
    test::TempDir dir(tag);
    auto model = load(dir, s, w);
    ASSERT_TRUE(model);
    const auto toks = random_tokens(40, s.n_vocab, 11);
    const RefMtp want = reference_mtp(s, w, toks);
    MtpSeq q(*model);
    ASSERT_TRUE(q.mem);
    std::vector<float> got, one;
    for (size_t p = 0; p + 1 < toks.size(); ++p) {
        ASSERT_TRUE(q.step(std::span(&toks[p], 1)).ok());
        auto st = q.draft(std::span(&toks[p + 1], 1), static_cast<int64_t>(p), one);
        ASSERT_TRUE(st.ok()) << st.error().message;
        EXPECT_EQ(q.mem->mtp_length(q.s), static_cast<int64_t>(p) + 1);
        got.insert(got.end(), one.begin(), one.end());
    }
    const auto V = static_cast<size_t>(s.n_vocab);
    const std::vector<float> hidden(q.hidden.begin(),
                                    q.hidden.begin() + static_cast<long>(want.hidden.size()));
    const double dh = golden::row_rel_diff(hidden, want.hidden, static_cast<size_t>(s.n_embd));
    const double d = golden::row_rel_diff(got, want.logits, V);
    fmt::print(
        "{}: 39 consecutive MTP steps vs double reference: max relative logit error {:.2e} (h_t {:.2e})\n",
        tag, d, dh);
    EXPECT_LT(dh, 1e-4);
    EXPECT_LT(d, 1e-4);
}

TEST(HybridMtp, MoeStepsMatchDoubleReference) {
    HybridSpec s;
    s.mtp = true;
    check_step_by_step(s, "mtp_moe");
}

TEST(HybridMtp, DenseStepsMatchDoubleReference) {
    HybridSpec s;
    s.moe = false;
    s.prefix = "model.";
    s.mtp = true;
    s.seed = 13;
    check_step_by_step(s, "mtp_dense");
}

// The prompt in one step keeps every hidden row; one MTP step primes the MTP rows for the prompt, then
// decode + draft continue; rewriting MTP rows 50..59 recomputes the same logits.
TEST(HybridMtp, BatchedPrimingThenDraftsEqualsReference) {
    HybridSpec s;
    s.mtp = true;
    s.seed = 21;
    const auto w = test::hybrid_weights(s);
    test::TempDir dir("mtp_batch");
    auto model = load(dir, s, w);
    ASSERT_TRUE(model);
    const auto toks = random_tokens(90, s.n_vocab, 12);
    const RefMtp want = reference_mtp(s, w, toks);
    const auto V = static_cast<size_t>(s.n_vocab), E = static_cast<size_t>(s.n_embd);
    MtpSeq q(*model);
    ASSERT_TRUE(q.mem);
    const size_t P = 70;  // prompt x_0..x_69
    ASSERT_TRUE(q.step(std::span(toks).first(P)).ok());
    ASSERT_EQ(q.hidden.size(), P * E);
    std::vector<float> got, one;
    // Rows 0..69: x_1..x_70 (x_70 the "sampled" token after the prompt).
    auto st = q.draft(std::span(toks).subspan(1, P), 0, got);
    ASSERT_TRUE(st.ok()) << st.error().message;
    for (size_t p = P; p + 1 < toks.size(); ++p) {
        ASSERT_TRUE(q.step(std::span(&toks[p], 1)).ok());
        ASSERT_TRUE(q.draft(std::span(&toks[p + 1], 1), static_cast<int64_t>(p), one).ok());
        got.insert(got.end(), one.begin(), one.end());
    }
    const double d = golden::row_rel_diff(got, want.logits, V);
    fmt::print("batched MTP priming (70 rows) + 19 drafts vs double reference: {:.2e}\n", d);
    EXPECT_LT(d, 1e-4);
    EXPECT_EQ(q.mem->mtp_length(q.s), static_cast<int64_t>(toks.size()) - 1);

    // Rewrite MTP rows 50..59 from the reference's hidden states.
    std::vector<float> again;
    ASSERT_TRUE(
        q.draft(std::span(toks).subspan(51, 10), 50, again, std::span(want.hidden).subspan(50 * E, 10 * E))
            .ok());
    const std::vector<float> ref10(want.logits.begin() + static_cast<long>(50 * V),
                                   want.logits.begin() + static_cast<long>(60 * V));
    EXPECT_LT(golden::row_rel_diff(again, ref10, V), 1e-4);
    EXPECT_EQ(q.mem->mtp_length(q.s), static_cast<int64_t>(toks.size()) - 1);  // never shrinks by a rewrite

    // Errors: past the main positions, wrong hidden size.
    EXPECT_FALSE(q.draft(std::span(toks).first(1), 89, one, std::span(q.hidden).first(E)).ok());
    EXPECT_FALSE(q.draft(std::span(toks).first(2), 0, one, std::span(q.hidden).first(E)).ok());
}

TEST(HybridMtp, ModelWithoutMtpIsRefused) {
    HybridSpec s;
    const auto w = test::hybrid_weights(s);
    test::TempDir dir("mtp_none");
    auto model = load(dir, s, w);
    ASSERT_TRUE(model);
    EXPECT_FALSE(model->weights().mtp.present);
    auto e = cpu::CpuExecutor::create(*model, {.max_batch_tokens = 8});
    ASSERT_TRUE(e.ok());
    auto mem = (*e)->create_memory({.max_seqs = 1, .max_seq_tokens = 16});
    ASSERT_TRUE(mem.ok());
    const SeqId a = (*mem)->open().value();
    const int32_t t = 1;
    const int64_t p = 0;
    const int32_t row = 0;
    ThreadPool pool(2);
    ASSERT_TRUE((*e)->step(Batch{std::span(&t, 1), std::span(&p, 1), std::span(&a, 1), std::span(&row, 1)},
                           **mem, {}, pool)
                    .ok());
    std::vector<float> h(static_cast<size_t>(s.n_embd));
    auto st = (*e)->mtp_step(Batch{std::span(&t, 1), std::span(&p, 1), std::span(&a, 1), std::span(&row, 1)},
                             h, **mem, {}, pool);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("no MTP block"), std::string::npos) << st.error().message;
    EXPECT_FALSE((*e)->create_memory({.max_seqs = 1, .max_seq_tokens = 16, .mtp = true}).ok());
}

}  // namespace
}  // namespace pelican
