// GPU sampling (backend/cuda/sampling.h) against the real pelican::Sampler: the same logits,
// penalty window and uniform draw must give the same token, and the same rewritten logits.
//
// The uniform: a fresh Sampler's first non-greedy sample() draws u = sample_uniform(seed, 0)
// (core/philox.h, exact in fp32), recomputed here and passed to the GPU. expf on the device vs the
// host's exp and the order of the weight sums can still move the draw across a boundary between
// two neighbouring candidates when u lies within ~1e-6 of it; sampling_reference.h's
// near_boundary accepts such a mismatch only when its reference walk shows that boundary next to
// u, and such cases must stay rare.
//
// Small-problem mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h; for compute-sanitizer): every
// kernel and branch still runs (penalties, greedy scan + argmax, sampling scan / filter / select
// with top-k, top-p, min-p, id-order draws, ties, non-finite logits, tiny temperature, top_k >=
// n_vocab, a 20000-id penalty window), with at most 6 draws per configuration instead of 20..200
// (the first 3 still compare the rewritten logits bit for bit), 2 greedy repetitions instead of 5,
// and a 20000-token vocabulary (10 scan CTAs) where the full test uses 151936 / 248320; the
// greedy-ties case keeps 151936 (its tied ids go up to 120000) and the top_k >= n_vocab case 700.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/sampling.h"
#include "core/philox.h"
#include "cuda_test_util.h"
#include "runtime/sampler.h"
#include "sampling_reference.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;

uint32_t fresh_seed() {
    if (const char* env = std::getenv("PELICAN_TEST_SEED"))
        return static_cast<uint32_t>(std::strtoul(env, nullptr, 10));
    return std::random_device{}();
}

// Draws per configuration: at most 6 in the small-problem mode.
int draws(int full) { return test::cuda_test_small() ? std::min(full, 6) : full; }

// A vocabulary size: 20000 in the small-problem mode.
int64_t vocab(int64_t full) { return test::cuda_test_size<int64_t>(full, 20000); }

using test::normal_logits;
using test::random_history;
using test::same_bits;
using Config = test::SamplingConfig;

// The u of a fresh Sampler's first non-greedy sample().
float sampler_uniform(uint64_t seed) { return sample_uniform(seed, 0); }

// Runs the GPU and the CPU sampler on the same inputs for many seeds.
class GpuSampler {
public:
    explicit GpuSampler(int64_t n_vocab)
        : n_(n_vocab),
          pristine_(n_vocab * sizeof(float)),
          work_(n_vocab * sizeof(float)),
          ids_(size_t{1} << 20),
          u_(sizeof(float)),
          out_(sizeof(int32_t)),
          ws_(cuda::sampling_workspace_bytes(n_vocab)) {
        EXPECT_TRUE(pristine_.ok() && work_.ok() && ids_.ok() && u_.ok() && out_.ok() && ws_.ok());
        // Garbage workspace: the kernels must not rely on zeroed scratch.
        EXPECT_EQ(cudaMemset(ws_.get(), 0x5a, ws_.size()), cudaSuccess);
    }
    void set_logits(const std::vector<float>& l) {
        ASSERT_EQ(static_cast<int64_t>(l.size()), n_);
        ASSERT_EQ(cudaMemcpy(pristine_.get(), l.data(), l.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    }
    void set_history(const std::vector<int32_t>& h) {
        ASSERT_LE(h.size() * 4, ids_.size());
        n_hist_ = static_cast<int>(h.size());
        if (!h.empty()) {
            ASSERT_EQ(cudaMemcpy(ids_.get(), h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
        }
    }
    // Samples from a fresh copy of the logits; *logits_out (optional) gets the rewritten logits.
    int32_t sample(const Config& c, float u, std::vector<float>* logits_out = nullptr) {
        EXPECT_EQ(cudaMemcpy(work_.get(), pristine_.get(), n_ * 4, cudaMemcpyDeviceToDevice), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(u_.get(), &u, 4, cudaMemcpyHostToDevice), cudaSuccess);
        cuda::GpuSampleParams p;
        p.temperature = c.temperature;
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.repetition_penalty = c.rep;
        p.frequency_penalty = c.freq;
        p.presence_penalty = c.pres;
        cuda::sample_on_gpu(work_.as<float>(), n_, p, n_hist_ ? ids_.as<int32_t>() : nullptr, n_hist_,
                            u_.as<float>(), out_.as<int32_t>(), ws_.get(), nullptr);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        int32_t tok = -2;
        EXPECT_EQ(cudaMemcpy(&tok, out_.get(), 4, cudaMemcpyDeviceToHost), cudaSuccess);
        if (logits_out) {
            logits_out->resize(static_cast<size_t>(n_));
            EXPECT_EQ(cudaMemcpy(logits_out->data(), work_.get(), n_ * 4, cudaMemcpyDeviceToHost),
                      cudaSuccess);
        }
        return tok;
    }

private:
    int64_t n_;
    DeviceBuffer pristine_, work_, ids_, u_, out_, ws_;
    int n_hist_ = 0;
};

int32_t cpu_sample(const std::vector<float>& logits, const Config& c, const std::vector<int32_t>& history,
                   uint64_t seed, std::vector<float>* rewritten) {
    SamplerParams sp;
    sp.temperature = c.temperature;
    sp.top_k = c.top_k;
    sp.top_p = c.top_p;
    sp.min_p = c.min_p;
    sp.repetition_penalty = c.rep;
    sp.frequency_penalty = c.freq;
    sp.presence_penalty = c.pres;
    sp.penalty_last_n = -1;
    sp.seed = seed;
    auto s = Sampler::create(sp);
    EXPECT_TRUE(s.ok());
    for (int32_t t : history) s->accept(t);
    *rewritten = logits;
    return s->sample(*rewritten);
}

// Compares GPU and CPU over n_draws seeds; returns the number of accepted near-boundary mismatches.
void compare(GpuSampler& g, const std::vector<float>& logits, const Config& c,
             const std::vector<int32_t>& history, int n_draws, uint32_t seed0) {
    SCOPED_TRACE(test::describe(c) + " n_vocab " + std::to_string(logits.size()) + " history " +
                 std::to_string(history.size()));
    g.set_logits(logits);
    g.set_history(history);
    int near = 0, hard = 0;
    for (int d = 0; d < n_draws; ++d) {
        const uint64_t seed = uint64_t{seed0} * 1000003u + static_cast<uint64_t>(d);
        std::vector<float> cpu_l, gpu_l;
        const int32_t want = cpu_sample(logits, c, history, seed, &cpu_l);
        const float u = sampler_uniform(seed);
        const int32_t got = g.sample(c, u, d < 3 ? &gpu_l : nullptr);
        if (d < 3) {  // penalties and temperature are the same fp32 operations: bit-exact
            int bad = 0;
            for (size_t i = 0; i < cpu_l.size(); ++i)
                if (!same_bits(cpu_l[i], gpu_l[i]) && bad++ < 5)
                    ADD_FAILURE() << "rewritten logit " << i << ": gpu " << gpu_l[i] << " cpu " << cpu_l[i]
                                  << " (input " << logits[i] << ")";
        }
        if (got == want) continue;
        if (c.temperature == 0.0f) {
            ADD_FAILURE() << "greedy: gpu " << got << " cpu " << want;
            ++hard;
            continue;
        }
        std::string why;
        if (test::near_boundary(cpu_l, c, u, got, want, &why)) {
            ++near;
        } else if (++hard <= 5) {
            ADD_FAILURE() << "seed " << seed << " " << why;
        }
    }
    EXPECT_EQ(hard, 0);
    EXPECT_LE(near, std::max(2, n_draws / 50)) << "too many near-boundary disagreements";
}

TEST(CudaSampling, ExactParams) {
    EXPECT_TRUE(cuda::gpu_sampling_exact({0.0f, 0}));
    EXPECT_TRUE(cuda::gpu_sampling_exact({0.8f, 40}));
    EXPECT_TRUE(cuda::gpu_sampling_exact({0.8f, cuda::kMaxGpuTopK}));
    EXPECT_FALSE(cuda::gpu_sampling_exact({0.8f, 0}));
    EXPECT_FALSE(cuda::gpu_sampling_exact({0.8f, cuda::kMaxGpuTopK + 1}));
}

TEST(CudaSampling, GreedyTiesAndNonFinite) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const uint32_t seed0 = fresh_seed();
    SCOPED_TRACE("PELICAN_TEST_SEED=" + std::to_string(seed0));
    std::mt19937 rng(seed0);
    const int64_t n = 151936;
    GpuSampler g(n);
    const Config greedy{0.0f, 1.0f, 0.0f, 0};
    // Ties at the maximum: the lowest id wins.
    std::vector<float> l = normal_logits(rng, n, 3.0f, true);
    for (int64_t id : {int64_t{120000}, int64_t{77}, int64_t{5000}}) l[id] = 40.0f;
    l[3] = NAN;
    l[4] = INFINITY;
    g.set_logits(l);
    g.set_history({});
    EXPECT_EQ(g.sample(greedy, 0.5f), 77);
    // -0 and +0 tie (lowest id), everything else masked.
    std::vector<float> z(n, -INFINITY);
    z[900] = 0.0f;
    z[800] = -0.0f;
    z[10] = NAN;
    g.set_logits(z);
    EXPECT_EQ(g.sample(greedy, 0.5f), 800);
    // Nothing finite: kNoToken, greedy and sampling.
    std::vector<float> none(n, -INFINITY);
    none[5] = NAN;
    none[6] = INFINITY;
    g.set_logits(none);
    EXPECT_EQ(g.sample(greedy, 0.5f), kNoToken);
    EXPECT_EQ(g.sample({1.0f, 1.0f, 0.0f, 40}, 0.5f), kNoToken);
    // Random logits with and without penalties, against the CPU sampler.
    for (int rep = 0; rep < test::cuda_test_size(5, 2); ++rep) {
        const std::vector<float> r = normal_logits(rng, n, 3.0f, rep % 2 == 0);
        compare(g, r, greedy, {}, 1, rng());
        compare(g, r, {0.0f, 1.0f, 0.0f, 0, 1.3f, 0.4f, 0.3f}, random_history(rng, n, 300), 1, rng());
    }
}

TEST(CudaSampling, MatchesCpuSamplerTopKTopPMinP) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const uint32_t seed0 = fresh_seed();
    SCOPED_TRACE("PELICAN_TEST_SEED=" + std::to_string(seed0));
    std::mt19937 rng(seed0);
    const Config configs[] = {
        {1.0f, 1.0f, 0.0f, 40},
        {0.7f, 0.95f, 0.05f, 40},
        {1.3f, 0.9f, 0.0f, 1024},
        {0.8f, 1.0f, 0.0f, 1},
        {1.0f, 1.0f, 0.1f, 1024},
        {0.5f, 0.5f, 0.0f, 100, 1.3f, 0.5f, 0.2f},
        {1.0f, 0.8f, 0.02f, 7, 0.8f, 0.0f, 0.0f},
        {2.0f, 1.0f, 0.0f, 512},
        {1.0f, 0.99f, 0.0f, 1000, 1.1f, 0.0f, 0.0f},
    };
    std::vector<int64_t> vocabs = {151936, 248320};
    if (test::cuda_test_small()) vocabs = {vocab(151936)};
    for (const int64_t n : vocabs) {
        GpuSampler g(n);
        for (int kind = 0; kind < 3; ++kind) {
            std::vector<float> l = normal_logits(rng, n, 3.0f, true);
            if (kind == 1)  // coarse values: many ties, also across the k-th boundary
                for (auto& x : l) x = std::isfinite(x) ? std::round(x * 2.0f) / 2.0f : x;
            if (kind == 2)  // a peaked distribution
                for (int i = 0; i < 5; ++i) l[static_cast<size_t>(rng() % n)] = 12.0f + static_cast<float>(i);
            const std::vector<int32_t> hist = random_history(rng, n, 64);
            for (const Config& c : configs) {
                const bool pen = c.rep != 1.0f || c.freq != 0.0f || c.pres != 0.0f;
                compare(g, l, c, pen ? hist : std::vector<int32_t>{}, draws(60), rng());
            }
        }
    }
}

TEST(CudaSampling, DegenerateAndEdgeCases) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const uint32_t seed0 = fresh_seed();
    SCOPED_TRACE("PELICAN_TEST_SEED=" + std::to_string(seed0));
    std::mt19937 rng(seed0);
    {  // all logits equal: the whole vocabulary lands in one histogram bin
        const int64_t n = vocab(151936);
        GpuSampler g(n);
        const std::vector<float> l(n, 1.5f);
        compare(g, l, {1.0f, 1.0f, 0.0f, 50}, {}, draws(40), rng());
        compare(g, l, {1.0f, 0.3f, 0.0f, 1024}, {}, draws(40), rng());
    }
    {  // tiny temperature: overflowed logits tie at FLT_MAX, underflowed ones become -inf
        const int64_t n = vocab(151936);
        GpuSampler g(n);
        const std::vector<float> l = normal_logits(rng, n, 3.0f, true);
        compare(g, l, {1e-37f, 1.0f, 0.0f, 40}, {}, draws(30), rng());
        compare(g, l, {1e-37f, 0.5f, 0.1f, 1024}, {}, draws(30), rng());
    }
    {  // top_k >= n_vocab: every finite logit; without top_p the draw walks ids in order
        const int64_t n = 700;
        GpuSampler g(n);
        const std::vector<float> l = normal_logits(rng, n, 2.0f, true);
        compare(g, l, {1.0f, 1.0f, 0.05f, 1000}, {}, draws(200), rng());
        compare(g, l, {1.0f, 1.0f, 0.0f, 700}, {}, draws(200), rng());
        compare(g, l, {0.9f, 0.9f, 0.0f, 1000}, {}, draws(200), rng());
        compare(g, l, {1.0f, 1.0f, 0.0f, 699}, random_history(rng, n, 2000), draws(200), rng());
    }
    {  // long penalty window with heavy repeats (counts matter for frequency)
        const int64_t n = vocab(248320);
        GpuSampler g(n);
        const std::vector<float> l = normal_logits(rng, n, 3.0f, false);
        std::vector<int32_t> h = random_history(rng, 300, 20000);  // ids < 300: many repeats
        compare(g, l, {0.9f, 0.95f, 0.0f, 64, 1.2f, 0.3f, 0.5f}, h, draws(20), rng());
        compare(g, l, {0.0f, 1.0f, 0.0f, 0, 1.2f, 0.3f, 0.5f}, h, 1, rng());
    }
}

}  // namespace
}  // namespace pelican
