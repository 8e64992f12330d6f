// Multi-token prediction of the hybrid Qwen3.5 CPU pass (HybridForward::mtp_eval / mtp_draft) on tiny
// random models with an mtp.* block, written as HF folders by the test: the MTP logits against the
// double-precision reference's mtp_step (tests/unit/hybrid_test_util.h, written from research §1.7)
// over many consecutive positions (the MTP KV cache grows), a batched priming of the MTP cache from
// the prefill's hidden states, rewinding, the dense variant and clear errors.
#include <gtest/gtest.h>

#include <random>

#include "golden_test_util.h"
#include "hybrid_test_util.h"
#include "backend/cpu/hybrid_forward.h"
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
    auto f = HybridForward::create(*model, ForwardOptions{.n_ctx = 64});
    ASSERT_TRUE(f.ok()) << f.error().message;
    ASSERT_TRUE((*f)->has_mtp());
    ThreadPool pool(2);
    std::vector<float> got, hidden;
    for (size_t p = 0; p + 1 < toks.size(); ++p) {
        ASSERT_TRUE((*f)->eval(std::span(&toks[p], 1), static_cast<int64_t>(p), pool).ok());
        hidden.insert(hidden.end(), (*f)->last_hidden().begin(), (*f)->last_hidden().end());
        auto st = (*f)->mtp_draft(toks[p + 1], pool);
        ASSERT_TRUE(st.ok()) << st.error().message;
        EXPECT_EQ((*f)->mtp_n_past(), static_cast<int64_t>(p) + 1);
        got.insert(got.end(), (*f)->mtp_logits().begin(), (*f)->mtp_logits().end());
    }
    const auto V = static_cast<size_t>(s.n_vocab);
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

// Prefill keeps every hidden state; one batched mtp_eval primes the MTP cache for the prompt, then
// decode + draft continue; a rewound mtp_eval recomputes the same logits.
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
    ThreadPool pool(2);
    auto f = HybridForward::create(*model, ForwardOptions{.n_ctx = 128, .n_batch = 48});
    ASSERT_TRUE(f.ok()) << f.error().message;
    (*f)->set_keep_hidden(true);
    const size_t P = 70;  // prompt x_0..x_69 (two chunks of the main pass and of the MTP pass)
    ASSERT_TRUE((*f)->eval(std::span(toks).first(P), 0, pool).ok());
    ASSERT_EQ((*f)->hidden_rows().size(), P * E);
    const std::vector<float> rows((*f)->hidden_rows().begin(), (*f)->hidden_rows().end());
    std::vector<float> got((P - 1) * V);
    auto st =
        (*f)->mtp_eval(std::span(toks).subspan(1, P - 1), std::span(rows).first((P - 1) * E), 0, pool, got);
    ASSERT_TRUE(st.ok()) << st.error().message;
    // The last prompt row drafts from the "sampled" x_70.
    ASSERT_TRUE((*f)->mtp_draft(toks[P], pool).ok());
    got.insert(got.end(), (*f)->mtp_logits().begin(), (*f)->mtp_logits().end());
    for (size_t p = P; p + 1 < toks.size(); ++p) {
        ASSERT_TRUE((*f)->eval(std::span(&toks[p], 1), static_cast<int64_t>(p), pool).ok());
        ASSERT_TRUE((*f)->mtp_draft(toks[p + 1], pool).ok());
        got.insert(got.end(), (*f)->mtp_logits().begin(), (*f)->mtp_logits().end());
    }
    const double d = golden::row_rel_diff(got, want.logits, V);
    fmt::print("batched MTP priming (69 rows) + 20 drafts vs double reference: {:.2e}\n", d);
    EXPECT_LT(d, 1e-4);
    EXPECT_EQ((*f)->mtp_n_past(), static_cast<int64_t>(toks.size()) - 1);

    // Rewind the MTP cache to slot 50 and redo 50..59 from the reference's hidden states.
    std::vector<float> again(10 * V);
    ASSERT_TRUE((*f)->mtp_eval(std::span(toks).subspan(51, 10),
                               std::span(want.hidden).subspan(50 * E, 10 * E), 50, pool, again)
                    .ok());
    const std::vector<float> ref10(want.logits.begin() + static_cast<long>(50 * V),
                                   want.logits.begin() + static_cast<long>(60 * V));
    EXPECT_LT(golden::row_rel_diff(again, ref10, V), 1e-4);
    EXPECT_EQ((*f)->mtp_n_past(), 60);

    // Errors: skipping past the cache, wrong hidden size, no model MTP block.
    EXPECT_FALSE((*f)->mtp_eval(std::span(toks).first(1), std::span(rows).first(E), 70, pool).ok());
    EXPECT_FALSE((*f)->mtp_eval(std::span(toks).first(2), std::span(rows).first(E), 0, pool).ok());
}

TEST(HybridMtp, ModelWithoutMtpIsRefused) {
    HybridSpec s;
    const auto w = test::hybrid_weights(s);
    test::TempDir dir("mtp_none");
    auto model = load(dir, s, w);
    ASSERT_TRUE(model);
    auto f = HybridForward::create(*model, ForwardOptions{.n_ctx = 16});
    ASSERT_TRUE(f.ok());
    EXPECT_FALSE((*f)->has_mtp());
    ThreadPool pool(2);
    const int32_t t = 1;
    ASSERT_TRUE((*f)->eval(std::span(&t, 1), 0, pool).ok());
    auto st = (*f)->mtp_draft(2, pool);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find("no MTP block"), std::string::npos) << st.error().message;
}

}  // namespace
}  // namespace pelican
