// Batched GPU sampling (backend/cuda/sampling_batch.h) against the real pelican::Sampler: rows with
// different parameters, penalty windows and streams in one call must each give their Sampler's
// token (the row's seed = Sampler::seed(), counter = Sampler::counter() before the sample), leave
// the logits as Sampler::sample does (bit for bit, and the row-stride gap untouched), and report
// the chosen token's log-softmax. Over many steps each row's Sampler accepts its token, so the
// windows grow, rings wrap and the counters advance as a caller advances them.
//
// A GPU token that differs from the CPU's is accepted only as a rare near-boundary case
// (sampling_reference.h says why they exist); greedy rows and the exact-draw tests allow none.
// The logprob bound: the device sums exp(l - m) in fp32 (expf within 2 ulp, a tree of a few
// hundred partial sums, relative error < 2e-6 of the sum) and subtracts in fp32, so |gpu - ref|
// <= 1e-5 + 1e-6 |ref| against the double reference holds with margin.
//
// Small-problem mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h): the same rows and kernels
// (including the overflowing candidate list, which needs more than 16384 equal logits) with a
// 20000-token vocabulary instead of 151936 and 6 steps instead of 40.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/sampling_batch.h"
#include "core/philox.h"
#include "cuda_test_util.h"
#include "runtime/sampler.h"
#include "sampling_reference.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using cuda::SampleRow;
using test::SamplingConfig;

uint32_t fresh_seed() {
    if (const char* env = std::getenv("PELICAN_TEST_SEED"))
        return static_cast<uint32_t>(std::strtoul(env, nullptr, 10));
    return std::random_device{}();
}

int steps(int full) { return test::cuda_test_small() ? std::min(full, 6) : full; }

// Rows, their parameters and their windows on the device; one call samples them all.
class GpuBatch {
public:
    GpuBatch(int max_rows, int64_t n_vocab, int64_t stride, int64_t max_ids)
        : lim_{max_rows, n_vocab, max_ids},
          stride_(stride),
          logits_(static_cast<size_t>(max_rows * stride) * sizeof(float)),
          rows_(static_cast<size_t>(max_rows) * sizeof(SampleRow)),
          offsets_(static_cast<size_t>(max_rows + 1) * sizeof(int32_t)),
          ids_(static_cast<size_t>(std::max<int64_t>(max_ids, 1)) * sizeof(int32_t)),
          out_(static_cast<size_t>(max_rows) * sizeof(int32_t)),
          lp_(static_cast<size_t>(max_rows) * sizeof(float)),
          ws_(cuda::sample_batch_workspace_bytes(lim_)) {
        EXPECT_TRUE(logits_.ok() && rows_.ok() && offsets_.ok() && ids_.ok() && out_.ok() && lp_.ok() &&
                    ws_.ok());
        // Garbage workspace: the kernels must not rely on zeroed scratch.
        EXPECT_EQ(cudaMemset(ws_.get(), 0x5a, ws_.size()), cudaSuccess);
    }

    // logits: [rows.size() * stride]; windows: one per row (may be empty).
    void upload(const std::vector<float>& logits, const std::vector<SampleRow>& rows,
                const std::vector<std::vector<int32_t>>& windows) {
        n_rows_ = static_cast<int>(rows.size());
        ASSERT_LE(n_rows_, lim_.max_rows);
        ASSERT_EQ(logits.size(), rows.size() * static_cast<size_t>(stride_));
        ASSERT_EQ(windows.size(), rows.size());
        std::vector<int32_t> offsets{0}, ids;
        for (const auto& w : windows) {
            ids.insert(ids.end(), w.begin(), w.end());
            offsets.push_back(static_cast<int32_t>(ids.size()));
        }
        ASSERT_LE(static_cast<int64_t>(ids.size()), lim_.max_penalty_ids);
        ASSERT_EQ(cudaMemcpy(logits_.get(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice),
                  cudaSuccess);
        ASSERT_EQ(
            cudaMemcpy(rows_.get(), rows.data(), rows.size() * sizeof(SampleRow), cudaMemcpyHostToDevice),
            cudaSuccess);
        ASSERT_EQ(cudaMemcpy(offsets_.get(), offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice),
                  cudaSuccess);
        if (!ids.empty()) {
            ASSERT_EQ(cudaMemcpy(ids_.get(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice),
                      cudaSuccess);
        }
        // Poison the outputs so that a row the kernels skip shows.
        ASSERT_EQ(cudaMemset(out_.get(), 0x7f, out_.size()), cudaSuccess);
        ASSERT_EQ(cudaMemset(lp_.get(), 0x7f, lp_.size()), cudaSuccess);
        // The copies and memsets above may still be in flight for a launch on a non-blocking stream.
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }

    void launch(bool logprobs, cudaStream_t stream = nullptr) {
        cuda::SampleBatchArgs a;
        a.logits = logits_.as<float>();
        a.row_stride = stride_;
        a.n_rows = n_rows_;
        a.rows = rows_.as<SampleRow>();
        a.penalty_offsets = offsets_.as<int32_t>();
        a.penalty_ids = ids_.as<int32_t>();
        a.out_tokens = out_.as<int32_t>();
        a.out_logprobs = logprobs ? lp_.as<float>() : nullptr;
        a.workspace = ws_.get();
        cuda::sample_batch_on_gpu(lim_, a, stream);
    }

    struct Result {
        std::vector<int32_t> tokens;
        std::vector<float> logprobs, logits;
    };
    Result read(bool logits) {
        Result r;
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        r.tokens.resize(static_cast<size_t>(n_rows_));
        r.logprobs.resize(static_cast<size_t>(n_rows_));
        EXPECT_EQ(cudaMemcpy(r.tokens.data(), out_.get(), r.tokens.size() * 4, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        EXPECT_EQ(cudaMemcpy(r.logprobs.data(), lp_.get(), r.logprobs.size() * 4, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        if (logits) {
            r.logits.resize(static_cast<size_t>(n_rows_ * stride_));
            EXPECT_EQ(cudaMemcpy(r.logits.data(), logits_.get(), r.logits.size() * 4, cudaMemcpyDeviceToHost),
                      cudaSuccess);
        }
        return r;
    }

    Result run(const std::vector<float>& logits, const std::vector<SampleRow>& rows,
               const std::vector<std::vector<int32_t>>& windows, bool logprobs, bool read_logits) {
        upload(logits, rows, windows);
        launch(logprobs);
        return read(read_logits);
    }

private:
    cuda::SampleBatchLimits lim_;
    int64_t stride_;
    int n_rows_ = 0;
    DeviceBuffer logits_, rows_, offsets_, ids_, out_, lp_, ws_;
};

enum class Kind { kNormal, kCoarse, kPeaked, kFlat, kNoFinite, kZeroTie };

struct RowSpec {
    SamplingConfig c;
    int32_t last_n;  // penalty_last_n
    int prompt;      // tokens accepted before the first step
    Kind kind;
};

std::vector<float> make_logits(std::mt19937& rng, int64_t n, Kind kind) {
    std::vector<float> l;
    switch (kind) {
        case Kind::kNormal:
            return test::normal_logits(rng, n, 3.0f, true);
        case Kind::kCoarse:  // many ties, also across the k-th boundary
            l = test::normal_logits(rng, n, 3.0f, true);
            for (auto& x : l) x = std::isfinite(x) ? std::round(x * 2.0f) / 2.0f : x;
            return l;
        case Kind::kPeaked:
            l = test::normal_logits(rng, n, 3.0f, true);
            for (int i = 0; i < 5; ++i) l[static_cast<size_t>(rng() % n)] = 12.0f + static_cast<float>(i);
            return l;
        case Kind::kFlat:  // every logit in one histogram bin: the candidate list overflows
            return std::vector<float>(static_cast<size_t>(n), 1.5f);
        case Kind::kNoFinite:
            l.assign(static_cast<size_t>(n), -INFINITY);
            l[5] = NAN;
            l[6] = INFINITY;
            return l;
        case Kind::kZeroTie:  // -0 and +0 tie: the lowest id
            l.assign(static_cast<size_t>(n), -INFINITY);
            l[900] = 0.0f;
            l[800] = -0.0f;
            l[10] = NAN;
            return l;
    }
    return l;
}

SamplerParams sampler_params(const RowSpec& s, uint64_t seed) {
    SamplerParams p;
    p.temperature = s.c.temperature;
    p.top_k = s.c.top_k;
    p.top_p = s.c.top_p;
    p.min_p = s.c.min_p;
    p.repetition_penalty = s.c.rep;
    p.frequency_penalty = s.c.freq;
    p.presence_penalty = s.c.pres;
    p.penalty_last_n = s.last_n;
    p.seed = seed;
    return p;
}

SampleRow row_of(const Sampler& s) {
    const SamplerParams& p = s.params();
    cuda::GpuSampleParams g;
    g.temperature = p.temperature;
    g.top_k = p.top_k;
    g.top_p = p.top_p;
    g.min_p = p.min_p;
    g.repetition_penalty = p.repetition_penalty;
    g.presence_penalty = p.presence_penalty;
    g.frequency_penalty = p.frequency_penalty;
    return cuda::sample_row(g, s.seed(), s.counter());
}

// Runs `specs` as one batch for n_steps steps against one Sampler per row.
void run_batch(const std::vector<RowSpec>& specs, int64_t n_vocab, int n_steps, uint32_t seed0) {
    std::mt19937 rng(seed0);
    const int n_rows = static_cast<int>(specs.size());
    const int64_t stride = n_vocab + 3;  // rows not 16-byte aligned; the gap must stay untouched
    std::vector<Sampler> samplers;
    std::vector<float> pristine(static_cast<size_t>(n_rows * stride), 7.25f);
    int64_t max_ids = 0;
    for (int r = 0; r < n_rows; ++r) {
        const RowSpec& s = specs[static_cast<size_t>(r)];
        auto sm = Sampler::create(sampler_params(s, (uint64_t{rng()} << 32) | rng()));
        ASSERT_TRUE(sm.ok()) << sm.error().message;
        for (int32_t t : test::random_history(rng, s.prompt > 1000 ? 300 : n_vocab, s.prompt)) sm->accept(t);
        samplers.push_back(std::move(sm).value());
        const std::vector<float> l = make_logits(rng, n_vocab, s.kind);
        std::copy(l.begin(), l.end(), pristine.begin() + r * stride);
        max_ids += s.prompt + 2 + n_steps;
    }
    GpuBatch g(n_rows, n_vocab, stride, max_ids);
    std::vector<int> near(static_cast<size_t>(n_rows), 0), hard(static_cast<size_t>(n_rows), 0);
    for (int step = 0; step < n_steps; ++step) {
        std::vector<SampleRow> rows;
        std::vector<std::vector<int32_t>> windows;
        for (int r = 0; r < n_rows; ++r) {
            const Sampler& s = samplers[static_cast<size_t>(r)];
            rows.push_back(row_of(s));
            const auto w = s.penalty_window();
            windows.emplace_back(w.begin(), w.end());
        }
        const bool check_logits = step < 3;
        const GpuBatch::Result got = g.run(pristine, rows, windows, true, check_logits);
        if (step == 0) {  // the logprob is optional and changes no token
            const GpuBatch::Result plain = g.run(pristine, rows, windows, false, false);
            EXPECT_EQ(plain.tokens, got.tokens);
        }
        for (int r = 0; r < n_rows; ++r) {
            const RowSpec& spec = specs[static_cast<size_t>(r)];
            Sampler& s = samplers[static_cast<size_t>(r)];
            SCOPED_TRACE("row " + std::to_string(r) + " (" + test::describe(spec.c) + ", last_n " +
                         std::to_string(spec.last_n) + ", window " + std::to_string(windows[r].size()) +
                         ") step " + std::to_string(step) + " counter " + std::to_string(rows[r].counter));
            const auto row_begin = pristine.begin() + r * stride;
            std::vector<float> cpu_l(row_begin, row_begin + n_vocab);
            const float u = sample_uniform(s.seed(), s.counter());
            const int32_t want = s.sample(cpu_l);
            const int32_t tok = got.tokens[static_cast<size_t>(r)];
            if (check_logits) {  // penalties and temperature are the same fp32 operations: bit-exact
                int bad = 0;
                for (int64_t i = 0; i < stride; ++i) {
                    const float gv = got.logits[static_cast<size_t>(r * stride + i)];
                    const float cv = i < n_vocab ? cpu_l[static_cast<size_t>(i)] : 7.25f;
                    if (!test::same_bits(gv, cv) && bad++ < 5)
                        ADD_FAILURE() << "rewritten logit " << i << ": gpu " << gv << " cpu " << cv;
                }
            }
            if (tok != want) {
                std::string why;
                if (spec.c.temperature == 0.0f || want < 0 || tok < 0) {
                    ADD_FAILURE() << "gpu token " << tok << " cpu token " << want;
                    ++hard[r];
                } else if (test::near_boundary(cpu_l, spec.c, u, tok, want, &why)) {
                    ++near[r];
                } else if (++hard[r] <= 3) {
                    ADD_FAILURE() << why;
                }
            }
            const float lp = got.logprobs[static_cast<size_t>(r)];
            if (tok < 0) {
                EXPECT_TRUE(std::isnan(lp)) << "logprob of kNoToken: " << lp;
            } else if (tok < n_vocab) {
                const double ref = test::reference_logprob(cpu_l, tok);
                EXPECT_NEAR(lp, ref, 1e-5 + 1e-6 * std::fabs(ref)) << "token " << tok;
                EXPECT_LE(lp, 1e-6f);
            } else {
                ADD_FAILURE() << "token " << tok << " outside the vocabulary";
            }
            if (want >= 0) s.accept(want);
        }
    }
    for (int r = 0; r < n_rows; ++r) {
        EXPECT_EQ(hard[r], 0) << "row " << r;
        EXPECT_LE(near[r], std::max(2, n_steps / 20))
            << "row " << r << ": too many near-boundary disagreements";
    }
}

TEST(CudaSamplingBatch, ExactRows) {
    SampleRow r;
    EXPECT_TRUE(cuda::gpu_sampling_exact(r));  // greedy
    r.temperature = 0.8f;
    r.top_k = 40;
    EXPECT_TRUE(cuda::gpu_sampling_exact(r));
    r.top_k = cuda::kMaxGpuTopK;
    EXPECT_TRUE(cuda::gpu_sampling_exact(r));
    r.top_k = 0;
    EXPECT_FALSE(cuda::gpu_sampling_exact(r));
    r.top_k = cuda::kMaxGpuTopK + 1;
    EXPECT_FALSE(cuda::gpu_sampling_exact(r));
    const SampleRow s = cuda::sample_row({0.7f, 50, 0.9f, 0.05f, 1.1f, 0.2f, 0.3f}, 99, 7);
    EXPECT_EQ(s.temperature, 0.7f);
    EXPECT_EQ(s.top_k, 50);
    EXPECT_EQ(s.top_p, 0.9f);
    EXPECT_EQ(s.min_p, 0.05f);
    EXPECT_EQ(s.repetition_penalty, 1.1f);
    EXPECT_EQ(s.presence_penalty, 0.2f);
    EXPECT_EQ(s.frequency_penalty, 0.3f);
    EXPECT_EQ(s.seed, 99u);
    EXPECT_EQ(s.counter, 7u);
}

// Every kind of row in one batch, on a real vocabulary size.
TEST(CudaSamplingBatch, MixedRowsMatchTheCpuSampler) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const uint32_t seed0 = fresh_seed();
    SCOPED_TRACE("PELICAN_TEST_SEED=" + std::to_string(seed0));
    const std::vector<RowSpec> specs = {
        {{0.0f, 1.0f, 0.0f, 0}, 64, 0, Kind::kNormal},                            // greedy
        {{0.0f, 1.0f, 0.0f, 0, 1.3f, 0.4f, 0.3f}, -1, 300, Kind::kNormal},        // greedy, whole history
        {{0.8f, 1.0f, 0.0f, 1}, 64, 0, Kind::kNormal},                            // top_k 1
        {{0.8f, 0.95f, 0.05f, 40}, 64, 0, Kind::kNormal},                         // CLI defaults
        {{1.3f, 0.9f, 0.0f, 1024}, 64, 0, Kind::kNormal},                         // top_k 1024 + top_p
        {{1.0f, 1.0f, 0.1f, 1024}, 64, 0, Kind::kPeaked},                         // top_k 1024 + min_p
        {{0.5f, 0.5f, 0.0f, 100, 1.3f, 0.5f, 0.2f}, 64, 64, Kind::kNormal},       // penalties, ring of 64
        {{1.0f, 0.8f, 0.02f, 7, 0.8f, 0.0f, 0.0f}, 16, 40, Kind::kNormal},        // ring of 16 wraps
        {{1.0f, 1.0f, 0.0f, 50}, 64, 0, Kind::kCoarse},                           // ties
        {{0.7f, 0.6f, 0.0f, 1024, 1.0f, 0.1f, 0.0f}, 4000, 2000, Kind::kCoarse},  // ties, 2000 repeats
        {{1.0f, 1.0f, 0.0f, 40}, 64, 0, Kind::kNoFinite},                         // kNoToken
        {{0.0f, 1.0f, 0.0f, 0}, 64, 0, Kind::kZeroTie},                           // greedy -0 / +0
        {{1e-37f, 0.5f, 0.1f, 1024}, 64, 0, Kind::kNormal},                       // tiny temperature
        {{1.0f, 0.3f, 0.0f, 1024}, 64, 0, Kind::kFlat},                           // list overflow + top_p
        {{1.0f, 1.0f, 0.0f, 50, 1.2f, 0.0f, 0.5f}, 64, 30, Kind::kFlat},          // list overflow + penalties
        {{1.0f, 0.99f, 0.0f, 1000, 1.1f, 0.0f, 0.0f}, -1, 2000, Kind::kPeaked},   // long window
        {{2.0f, 1.0f, 0.0f, 512}, 64, 0, Kind::kNormal},
        {{0.0f, 1.0f, 0.0f, 0, 1.5f, 0.0f, 0.0f}, 8, 20, Kind::kCoarse},  // greedy ties + penalties
    };
    run_batch(specs, test::cuda_test_size<int64_t>(151936, 20000), steps(40), seed0);
}

// A small vocabulary: top_k >= n_vocab keeps every finite logit exactly (the id-order walk without
// top_p), one row alone, and a batch of many rows of one kind.
TEST(CudaSamplingBatch, SmallVocabularyAndManyRows) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const uint32_t seed0 = fresh_seed();
    SCOPED_TRACE("PELICAN_TEST_SEED=" + std::to_string(seed0));
    const std::vector<RowSpec> small = {
        {{1.0f, 1.0f, 0.05f, 1000}, 64, 0, Kind::kNormal},
        {{1.0f, 1.0f, 0.0f, 700}, 64, 0, Kind::kNormal},
        {{0.9f, 0.9f, 0.0f, 1000}, 64, 0, Kind::kNormal},
        {{1.0f, 1.0f, 0.0f, 699, 1.2f, 0.1f, 0.1f}, -1, 2000, Kind::kNormal},
        {{0.0f, 1.0f, 0.0f, 0, 1.2f, 0.1f, 0.1f}, -1, 2000, Kind::kCoarse},
    };
    run_batch(small, 700, steps(100), seed0);
    run_batch({small[2]}, 700, steps(50), seed0 + 1);
    std::vector<RowSpec> many;
    for (int i = 0; i < 200; ++i)
        many.push_back({{0.8f + 0.001f * static_cast<float>(i), 0.95f, 0.05f, 40 + i, i % 3 ? 1.0f : 1.1f},
                        32,
                        i % 7,
                        i % 5 ? Kind::kNormal : Kind::kCoarse});
    run_batch(many, test::cuda_test_size<int64_t>(32000, 3000), steps(4), seed0 + 2);
}

// The device's uniform is the host's sample_uniform(seed, counter), for any 64-bit seed and
// counter: on 1024 equal logits with top_k = 1024 (every logit, the id-order walk) the token is
// floor(u * 1024) exactly and its logprob is -log(1024).
TEST(CudaSamplingBatch, DeviceStreamIsTheHostStream) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const uint32_t seed0 = fresh_seed();
    SCOPED_TRACE("PELICAN_TEST_SEED=" + std::to_string(seed0));
    std::mt19937_64 rng(seed0);
    constexpr int kRows = 256;
    constexpr int64_t kVocab = 1024;
    GpuBatch g(kRows, kVocab, kVocab, 0);
    const std::vector<float> logits(static_cast<size_t>(kRows * kVocab), -2.0f);
    const std::vector<std::vector<int32_t>> windows(kRows);
    for (int rep = 0; rep < test::cuda_test_size(8, 2); ++rep) {
        std::vector<SampleRow> rows(kRows);
        for (int r = 0; r < kRows; ++r) {
            rows[r] = cuda::sample_row({1.0f, 1024, 1.0f, 0.0f}, rng(), 0);
            // Counters of every size: small, across 2^32, and random 64-bit.
            const uint64_t i = static_cast<uint64_t>(r);
            rows[r].counter = r < 64 ? i : r < 128 ? (uint64_t{1} << 32) - 96 + i : rng();
        }
        const GpuBatch::Result got = g.run(logits, rows, windows, true, false);
        for (int r = 0; r < kRows; ++r) {
            const float u = sample_uniform(rows[r].seed, rows[r].counter);
            ASSERT_EQ(got.tokens[r], static_cast<int32_t>(u * 1024.0f))
                << "seed " << rows[r].seed << " counter " << rows[r].counter << " u " << u;
            EXPECT_NEAR(got.logprobs[r], -std::log(1024.0), 1e-5);
        }
    }
}

// Captured once in a CUDA graph, the call replays with whatever the device arrays hold: new
// logits, counters and windows each step give the tokens and logprobs of a direct call.
TEST(CudaSamplingBatch, GraphReplayEqualsDirectCalls) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const uint32_t seed0 = fresh_seed();
    SCOPED_TRACE("PELICAN_TEST_SEED=" + std::to_string(seed0));
    std::mt19937 rng(seed0);
    const int64_t n = test::cuda_test_size<int64_t>(151936, 20000);
    const std::vector<RowSpec> specs = {
        {{0.0f, 1.0f, 0.0f, 0, 1.3f, 0.0f, 0.0f}, 64, 0, Kind::kNormal},
        {{0.8f, 0.95f, 0.05f, 40, 1.1f, 0.2f, 0.1f}, 64, 0, Kind::kNormal},
        {{1.0f, 1.0f, 0.0f, 1024}, 64, 0, Kind::kCoarse},
        {{1.0f, 0.5f, 0.0f, 1024}, 64, 0, Kind::kFlat},
    };
    const int n_rows = static_cast<int>(specs.size());
    GpuBatch g(n_rows, n, n, 64 * n_rows);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    const auto inputs = [&](int step, std::vector<float>* logits, std::vector<SampleRow>* rows,
                            std::vector<std::vector<int32_t>>* windows) {
        logits->clear();
        rows->clear();
        windows->clear();
        for (int r = 0; r < n_rows; ++r) {
            const RowSpec& s = specs[static_cast<size_t>(r)];
            const std::vector<float> l = make_logits(rng, n, s.kind);
            logits->insert(logits->end(), l.begin(), l.end());
            cuda::GpuSampleParams p{s.c.temperature, s.c.top_k, s.c.top_p, s.c.min_p,
                                    s.c.rep,         s.c.pres,  s.c.freq};
            rows->push_back(
                cuda::sample_row(p, 1000 + static_cast<uint64_t>(r), static_cast<uint64_t>(step)));
            std::vector<int32_t> w = test::random_history(rng, n, 10 + step * 7 % 50);
            windows->push_back(w);
        }
    };
    std::vector<float> logits;
    std::vector<SampleRow> rows;
    std::vector<std::vector<int32_t>> windows;
    inputs(0, &logits, &rows, &windows);
    g.upload(logits, rows, windows);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    g.launch(true, stream);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int step = 0; step < steps(10); ++step) {
        inputs(step, &logits, &rows, &windows);
        g.upload(logits, rows, windows);
        ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        const GpuBatch::Result replayed = g.read(false);
        const GpuBatch::Result direct = g.run(logits, rows, windows, true, false);
        EXPECT_EQ(replayed.tokens, direct.tokens) << "step " << step;
        for (int r = 0; r < n_rows; ++r)
            EXPECT_TRUE(test::same_bits(replayed.logprobs[r], direct.logprobs[r]))
                << "step " << step << " row " << r << ": " << replayed.logprobs[r] << " vs "
                << direct.logprobs[r];
    }
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace pelican
