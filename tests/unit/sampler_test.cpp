// Sampler: greedy/argmax, reproducibility, the draw stream (core/philox.h), empirical distribution
// (chi-square), exact kept sets of top-k / top-p / min-p on hand-built logits, penalties, parameter
// validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/philox.h"
#include "runtime/sampler.h"

namespace pelican {
namespace {

Sampler make(SamplerParams p) {
    auto s = Sampler::create(p);
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    return std::move(s).value();
}

SamplerParams plain(float temperature, uint64_t seed = 1) {
    SamplerParams p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.seed = seed;
    return p;
}

std::vector<float> random_logits(std::mt19937& rng, int n, float scale = 3) {
    std::normal_distribution<float> d(0, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// Draws `n` tokens from fresh copies of `logits`; returns counts per id.
std::vector<int64_t> draw_counts(Sampler& s, const std::vector<float>& logits, int n) {
    std::vector<int64_t> counts(logits.size(), 0);
    std::vector<float> work;
    for (int i = 0; i < n; ++i) {
        work = logits;
        const int32_t t = s.sample(work);
        EXPECT_GE(t, 0);
        if (t >= 0) ++counts[t];
    }
    return counts;
}

std::set<int32_t> seen(const std::vector<int64_t>& counts) {
    std::set<int32_t> s;
    for (size_t i = 0; i < counts.size(); ++i)
        if (counts[i] > 0) s.insert(static_cast<int32_t>(i));
    return s;
}

// Upper critical value of chi-square with df degrees of freedom at z standard deviations
// (Wilson-Hilferty); z = 4.75 is a one-sided tail of about 1e-6.
double chi2_critical(int df, double z = 4.75) {
    const double a = 2.0 / (9.0 * df);
    return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Checks observed counts against expected probabilities: chi-square over all bins, plus a
// per-bin 5-sigma binomial bound, plus zero counts wherever the probability is zero.
void expect_distribution(const std::vector<int64_t>& counts, const std::vector<double>& probs, int n) {
    double chi2 = 0;
    int df = -1;
    for (size_t i = 0; i < probs.size(); ++i) {
        if (probs[i] == 0) {
            EXPECT_EQ(counts[i], 0) << "token " << i << " is outside the kept set";
            continue;
        }
        const double e = probs[i] * n;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
        ++df;
        const double sigma = std::sqrt(n * probs[i] * (1 - probs[i]));
        EXPECT_LE(std::fabs(counts[i] - e), 5 * sigma + 1) << "token " << i << " p=" << probs[i];
    }
    if (df > 0) {
        EXPECT_LT(chi2, chi2_critical(df)) << "df=" << df;
    }
}

// Softmax of logits/temperature restricted to `keep`, zero elsewhere.
std::vector<double> softmax_over(const std::vector<float>& logits, const std::set<int32_t>& keep,
                                 double temp) {
    std::vector<double> p(logits.size(), 0);
    double m = -INFINITY;
    for (int32_t i : keep) m = std::max(m, logits[i] / temp);
    double z = 0;
    for (int32_t i : keep) z += p[i] = std::exp(logits[i] / temp - m);
    for (auto& x : p) x /= z;
    return p;
}

// Ids ordered by logit descending, then id ascending.
std::vector<int32_t> order_desc(const std::vector<float>& logits) {
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    return ids;
}

TEST(Sampler, GreedyIsArgmax) {
    std::mt19937 rng(7);
    Sampler s = make(plain(0));
    for (int trial = 0; trial < 200; ++trial) {
        auto l = random_logits(rng, 1000);
        const auto expect = std::max_element(l.begin(), l.end()) - l.begin();
        EXPECT_EQ(s.sample(l), expect);
    }
    std::vector<float> ties{1, 5, 2, 5, -INFINITY};
    EXPECT_EQ(s.sample(ties), 1);  // first of equal maxima
    std::vector<float> with_nan{NAN, 0.5f, 3, NAN};
    EXPECT_EQ(s.sample(with_nan), 2);
}

TEST(Sampler, TopK1IsArgmax) {
    std::mt19937 rng(8);
    SamplerParams p = plain(1.5f, 3);
    p.top_k = 1;
    Sampler s = make(p);
    for (int trial = 0; trial < 200; ++trial) {
        auto l = random_logits(rng, 500);
        const auto expect = std::max_element(l.begin(), l.end()) - l.begin();
        EXPECT_EQ(s.sample(l), expect);
    }
}

TEST(Sampler, NoFiniteLogit) {
    Sampler s = make(plain(1));
    std::vector<float> l{-INFINITY, NAN, -INFINITY};
    EXPECT_EQ(s.sample(l), kNoToken);
    std::vector<float> empty;
    EXPECT_EQ(s.sample(empty), kNoToken);
    Sampler g = make(plain(0));
    l = {-INFINITY, NAN};
    EXPECT_EQ(g.sample(l), kNoToken);
}

TEST(Sampler, MaskedLogitsNeverSampled) {
    std::vector<float> l{-INFINITY, 0.1f, -INFINITY, 0.2f, NAN};
    Sampler s = make(plain(1, 5));
    auto counts = draw_counts(s, l, 2000);
    EXPECT_EQ(seen(counts), (std::set<int32_t>{1, 3}));
}

TEST(Sampler, SeedReproducible) {
    SamplerParams p;  // defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05
    p.seed = 1234;
    p.repetition_penalty = 1.1f;
    auto run = [&](Sampler& s) {
        std::mt19937 rng(99);
        std::vector<int32_t> out;
        for (int i = 0; i < 500; ++i) {
            auto l = random_logits(rng, 300, 2);
            out.push_back(s.sample(l));
            s.accept(out.back());
        }
        return out;
    };
    Sampler a = make(p), b = make(p);
    const auto ra = run(a);
    EXPECT_EQ(ra, run(b));
    a.reset();
    EXPECT_EQ(ra, run(a));
    p.seed = 1235;
    Sampler c = make(p);
    EXPECT_NE(ra, run(c));

    p.seed = kRandomSeed;
    Sampler r = make(p);
    EXPECT_NE(r.seed(), kRandomSeed);
    p.seed = r.seed();
    Sampler r2 = make(p);
    EXPECT_EQ(run(r), run(r2));
}

// The draws are sample_uniform(seed, counter) with counter = sample() calls with temperature > 0
// (the contract the GPU batch sampler relies on): on equal logits over 2^k ids without top_k/top_p
// (the id-order walk), the token is floor(u * 2^k) exactly.
TEST(Sampler, DrawsThePhiloxStream) {
    SamplerParams p = plain(1.0f, 0xfeedface12345678ull);
    Sampler s = make(p);
    const std::vector<float> flat(1024, 0.25f);
    for (uint64_t c = 0; c < 300; ++c) {
        ASSERT_EQ(s.counter(), c);
        std::vector<float> l = flat;
        const int32_t want = static_cast<int32_t>(sample_uniform(p.seed, c) * 1024.0f);
        ASSERT_EQ(s.sample(l), want) << "counter " << c;
    }
    std::vector<float> none{-INFINITY, NAN};
    EXPECT_EQ(s.sample(none), kNoToken);
    EXPECT_EQ(s.counter(), 301u) << "a sample() that finds no token still uses its draw";
    EXPECT_EQ(s.draw_uniform(), sample_uniform(p.seed, 301));
    EXPECT_EQ(s.counter(), 302u);
    s.reset();
    EXPECT_EQ(s.counter(), 0u);
    EXPECT_EQ(s.draw_uniform(), sample_uniform(p.seed, 0));

    Sampler g = make(plain(0.0f, 9));  // greedy draws nothing
    std::vector<float> l{1, 2, 3};
    g.sample(l);
    EXPECT_EQ(g.counter(), 0u);
}

TEST(Sampler, FrequenciesMatchSoftmax) {
    const std::vector<float> l{1.0f, 2.5f, -0.5f, 2.0f, 0.3f, -3.0f, 1.7f, 0.0f};
    const int n = 200000;
    {  // full softmax at temperature 0.7
        Sampler s = make(plain(0.7f, 11));
        std::set<int32_t> all{0, 1, 2, 3, 4, 5, 6, 7};
        expect_distribution(draw_counts(s, l, n), softmax_over(l, all, 0.7), n);
    }
    {  // top_k = 4 at temperature 1.3: ids 1, 3, 6, 0
        SamplerParams p = plain(1.3f, 12);
        p.top_k = 4;
        Sampler s = make(p);
        expect_distribution(draw_counts(s, l, n), softmax_over(l, {1, 3, 6, 0}, 1.3), n);
    }
    {  // min_p = 0.2 at temperature 1: exp(l - 2.5) >= 0.2  <=>  l >= 0.8906
        SamplerParams p = plain(1.0f, 13);
        p.min_p = 0.2f;
        Sampler s = make(p);
        expect_distribution(draw_counts(s, l, n), softmax_over(l, {1, 3, 6, 0}, 1.0), n);
    }
}

// probs (as logits = log p) in shuffled id order: id -> p
const std::vector<double> kProbs{0.06, 0.25, 0.04, 0.4, 0.1, 0.15};
// sorted: id3 0.40, id1 0.25, id5 0.15, id4 0.10, id0 0.06, id2 0.04

std::vector<float> log_probs() {
    std::vector<float> l;
    for (double p : kProbs) l.push_back(static_cast<float>(std::log(p)));
    return l;
}

std::set<int32_t> kept_set(SamplerParams p, int draws = 20000) {
    Sampler s = make(p);
    return seen(draw_counts(s, log_probs(), draws));
}

TEST(Sampler, TopPKeepsExpectedSet) {
    SamplerParams p = plain(1, 21);
    p.top_p = 0.6f;  // 0.40 < 0.6 <= 0.65
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3, 1}));
    p.top_p = 0.66f;  // 0.65 < 0.66 <= 0.80
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3, 1, 5}));
    p.top_p = 0.3f;  // the top token alone already covers it
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3}));
    p.top_p = 0.95f;  // 0.90 < 0.95 <= 0.96
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3, 1, 5, 4, 0}));
    // After top_k = 4 the set renormalises over 0.9: cumulative 0.444, 0.722, 0.889, 1.
    p.top_k = 4;
    p.top_p = 0.85f;
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3, 1, 5}));
    p.top_k = 0;  // without top_k 0.85 needs 0.90, i.e. four tokens
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3, 1, 5, 4}));
}

TEST(Sampler, MinPKeepsExpectedSet) {
    SamplerParams p = plain(1, 22);
    p.min_p = 0.2f;  // p >= 0.08
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3, 1, 5, 4}));
    p.min_p = 0.5f;  // p >= 0.2
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3, 1}));
    p.min_p = 1.0f;  // only the maximum
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3}));
    // min_p with top_p: the smaller of the two prefixes.
    p.min_p = 0.2f;
    p.top_p = 0.6f;
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3, 1}));
    p.top_p = 0.99f;
    EXPECT_EQ(kept_set(p), (std::set<int32_t>{3, 1, 5, 4}));
}

TEST(Sampler, TopPOnLargeVocabulary) {
    // 3000 distinct logits; the cut lands past several growth steps of the partial sort.
    std::mt19937 rng(31);
    auto l = random_logits(rng, 3000, 0.3f);
    const auto ids = order_desc(l);
    std::vector<double> cum(ids.size());
    double m = l[ids[0]], z = 0, c = 0;
    for (float x : l) z += std::exp(x - m);
    for (size_t j = 0; j < ids.size(); ++j) cum[j] = c += std::exp(l[ids[j]] - m) / z;
    const size_t cut = 400;  // keep exactly the top 400
    SamplerParams p = plain(1, 32);
    p.top_p = static_cast<float>((cum[cut - 2] + cum[cut - 1]) / 2);
    Sampler s = make(p);
    const int n = 40000;
    const auto counts = draw_counts(s, l, n);
    const std::set<int32_t> expect(ids.begin(), ids.begin() + cut);
    EXPECT_EQ(seen(counts), expect);
    expect_distribution(counts, softmax_over(l, expect, 1), n);
}

TEST(Sampler, RepetitionPenalty) {
    SamplerParams p = plain(0);
    p.repetition_penalty = 1.5f;
    Sampler s = make(p);
    for (int32_t t : {1, 2, 2, 5, 999, -4}) s.accept(t);  // 999 / -4 are outside the vocabulary
    std::vector<float> l{3, 3, -3, 0.5f, 4, 0, 2};
    const auto before = l;
    s.sample(l);
    for (size_t i = 0; i < l.size(); ++i) {
        const bool hit = i == 1 || i == 2 || i == 5;
        const float want = !hit ? before[i] : before[i] > 0 ? before[i] / 1.5f : before[i] * 1.5f;
        EXPECT_EQ(l[i], want) << i;
    }
}

TEST(Sampler, FrequencyAndPresencePenalty) {
    SamplerParams p = plain(0);
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    Sampler s = make(p);
    for (int32_t t : {0, 3, 3, 3, 1, 3}) s.accept(t);
    std::vector<float> l{1, 2, 3, 4, 5};
    s.sample(l);
    EXPECT_EQ(l, (std::vector<float>{1 - 0.5f - 0.25f, 2 - 0.5f - 0.25f, 3, 4 - 2.0f - 0.25f, 5}));
    // The greedy choice follows the penalised logits.
    std::vector<float> l2{0, 0, 0, 10, 9};
    p.frequency_penalty = 1;
    p.presence_penalty = 0;
    Sampler s2 = make(p);
    for (int32_t t : {3, 3}) s2.accept(t);
    EXPECT_EQ(s2.sample(l2), 4);
}

TEST(Sampler, PenaltyWindow) {
    SamplerParams p = plain(0);
    p.frequency_penalty = 1;
    p.penalty_last_n = 3;
    Sampler s = make(p);
    for (int32_t t : {0, 0, 1, 2, 2}) s.accept(t);  // the ring keeps {1, 2, 2}
    std::vector<float> l{5, 5, 5, 5};
    s.sample(l);
    EXPECT_EQ(l, (std::vector<float>{5, 4, 3, 5}));

    p.penalty_last_n = 0;  // penalties off
    Sampler off = make(p);
    off.accept(0);
    l = {5, 5};
    off.sample(l);
    EXPECT_EQ(l, (std::vector<float>{5, 5}));

    p.penalty_last_n = -1;  // whole history
    Sampler all = make(p);
    for (int i = 0; i < 100; ++i) all.accept(1);
    l = {0, 0};
    all.sample(l);
    EXPECT_EQ(l, (std::vector<float>{0, -100}));
    all.reset();  // forgets the history
    l = {0, 0};
    all.sample(l);
    EXPECT_EQ(l, (std::vector<float>{0, 0}));
}

TEST(Sampler, ValidatesParams) {
    auto bad = [](auto mutate, const char* needle) {
        SamplerParams p;
        mutate(p);
        auto s = Sampler::create(p);
        ASSERT_FALSE(s.ok()) << needle;
        EXPECT_NE(s.error().message.find(needle), std::string::npos) << s.error().message;
    };
    bad([](SamplerParams& p) { p.temperature = -0.1f; }, "temperature");
    bad([](SamplerParams& p) { p.temperature = NAN; }, "temperature");
    bad([](SamplerParams& p) { p.top_k = -1; }, "top_k");
    bad([](SamplerParams& p) { p.top_p = 0; }, "top_p");
    bad([](SamplerParams& p) { p.top_p = 1.5f; }, "top_p");
    bad([](SamplerParams& p) { p.top_p = NAN; }, "top_p");
    bad([](SamplerParams& p) { p.min_p = -0.01f; }, "min_p");
    bad([](SamplerParams& p) { p.min_p = 2; }, "min_p");
    bad([](SamplerParams& p) { p.repetition_penalty = 0; }, "repetition_penalty");
    bad([](SamplerParams& p) { p.repetition_penalty = INFINITY; }, "repetition_penalty");
    bad([](SamplerParams& p) { p.presence_penalty = NAN; }, "presence_penalty");
    bad([](SamplerParams& p) { p.frequency_penalty = INFINITY; }, "frequency_penalty");
    bad([](SamplerParams& p) { p.penalty_last_n = -2; }, "penalty_last_n");
    EXPECT_TRUE(validate_sampler_params(SamplerParams{}).ok());
}

}  // namespace
}  // namespace pelican
