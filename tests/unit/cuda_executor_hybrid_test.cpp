// The CUDA executor on the hybrid Qwen3.5 stack (backend/cuda/cuda_executor.h): tiny random models
// (MoE with the shared expert on its own and stacked as one more expert, and the dense MLP) and the
// transformers fixtures (tests/golden/hybrid).
//   * A batch of sequences stepped together (prompt runs long enough for the chunked DeltaNet, 1- and
//     3-token runs, the GEMV / graph form and the matmul form) gives every sequence the logits of the
//     independent double-precision reference and of the CPU executor stepping the same batches.
//   * Truncating within the checkpoints is exact (the state entries of the ring, no replay); further
//     back the memory reports what it restored and re-feeding from there gives the reference.
//   * A fork carries the recurrent state.
//   * The fixtures: every prompt position's logits within 1e-4 of transformers' (one step holding the
//     whole prompt, and token by token), and the 32 greedy tokens identical.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include <fmt/format.h>

#include "backend/cpu/cpu_executor.h"
#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/device_buffer.h"
#include "golden_test_util.h"
#include "hybrid_test_util.h"
#include "model/model.h"

namespace pelican {
namespace {

using test::HybridSpec;

// The GPU kernels take DeltaNet heads of 16, 32, 64 or 128 and attention heads of 64, 128 or 256.
HybridSpec gpu_spec(int variant) {
    HybridSpec s;
    s.dk = s.dv = 16;
    s.head_dim = 64;
    s.nk = 2;
    s.nv = 4;
    s.n_embd = 64;
    if (variant == 1) s.ff_shared = s.ff_expert;  // the shared expert stacked as expert E
    if (variant == 2) {
        s.moe = false;
        s.prefix = "model.";
        s.seed = 9;
    }
    return s;
}
const char* variant_name(int v) { return v == 0 ? "Moe" : v == 1 ? "MoeStackedShared" : "Dense"; }

std::vector<int32_t> random_tokens(size_t n, int64_t vocab, std::mt19937& rng) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
}

std::unique_ptr<cuda::CudaExecutor> gpu_executor(const Model& m, int64_t max_tokens) {
    auto gm = cuda::GpuModel::upload(m, /*log_progress=*/false);
    EXPECT_TRUE(gm.ok()) << gm.error().message;
    if (!gm.ok()) return nullptr;
    auto e =
        cuda::CudaExecutor::create(std::shared_ptr<const cuda::GpuModel>(std::move(gm).value()),
                                   {.max_batch_tokens = max_tokens, .max_seqs = 8, .max_seq_tokens = 512});
    EXPECT_TRUE(e.ok()) << e.error().message;
    return e.ok() ? std::move(e).value() : nullptr;
}

struct Fixture {
    HybridSpec spec;
    test::HfWeightsMap w;
    test::TempDir dir;
    std::unique_ptr<Model> model;
    Fixture(const HybridSpec& s, const std::string& tag) : spec(s), w(test::hybrid_weights(s)), dir(tag) {
        test::write_hybrid_folder(dir.str(), spec, w);
        auto m = Model::load(dir.str(), ModelLoadOptions{.allow_repack = false});
        EXPECT_TRUE(m.ok()) << m.error().message;
        if (m.ok()) model = std::move(m).value();
    }
    int64_t V() const { return spec.n_vocab; }
    std::vector<float> reference(const std::vector<int32_t>& toks) const {
        test::HybridReference r(spec, w);
        test::Vec l;
        for (int32_t t : toks) l = r.step(t);
        return {l.begin(), l.end()};
    }
};

// fp32 GPU kernels against the double reference and against the CPU executor (fp32, other summation
// orders): the bound of the GPU pass's hybrid golden tests.
constexpr double kBound = 1e-4;

struct Step {
    std::vector<int32_t> tok;
    std::vector<int64_t> pos;
    std::vector<SeqId> seq;
    std::vector<int32_t> out_rows;
    void add(SeqId s, int64_t p0, std::span<const int32_t> t, bool all_rows = false) {
        for (size_t j = 0; j < t.size(); ++j) {
            tok.push_back(t[j]);
            pos.push_back(p0 + static_cast<int64_t>(j));
            seq.push_back(s);
            if (all_rows) out_rows.push_back(static_cast<int32_t>(tok.size() - 1));
        }
        if (!all_rows) out_rows.push_back(static_cast<int32_t>(tok.size() - 1));
    }
    Status run(Executor& e, SequenceMemory& m, std::vector<float>& logits) const {
        ThreadPool pool(2);
        logits.assign(out_rows.size() * static_cast<size_t>(e.model().hparams().n_vocab), 0.0f);
        return e.step({tok, pos, seq, out_rows}, m, {.logits = logits}, pool);
    }
};

class CudaExecutorHybrid : public ::testing::TestWithParam<int> {
protected:
    void SetUp() override {
        if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    }
};

TEST_P(CudaExecutorHybrid, BatchMatchesReferenceAndCpuExecutor) {
    Fixture fx(gpu_spec(GetParam()), std::string("cuexh_") + variant_name(GetParam()));
    ASSERT_TRUE(fx.model);
    auto gpu = gpu_executor(*fx.model, 128);
    ASSERT_TRUE(gpu);
    auto cpu = cpu::CpuExecutor::create(*fx.model, {.max_batch_tokens = 128});
    ASSERT_TRUE(cpu.ok()) << cpu.error().message;
    const MemoryOptions mo{.max_seqs = 5, .max_seq_tokens = 160, .block_tokens = 4, .checkpoints = 4};
    auto gmem = gpu->create_memory(mo);
    auto cmem = (*cpu)->create_memory(mo);
    ASSERT_TRUE(gmem.ok() && cmem.ok());
    std::mt19937 rng(11);
    std::vector<std::vector<int32_t>> toks(5);
    std::vector<SeqId> ids;
    for (int i = 0; i < 5; ++i) {
        ids.push_back((*gmem)->open().value());
        ASSERT_EQ((*cmem)->open().value(), ids.back());
    }
    double worst_ref = 0, worst_cpu = 0;
    std::vector<float> gl, cl;
    const auto V = static_cast<size_t>(fx.V());
    for (int stepn = 0; stepn < 10; ++stepn) {
        Step st;
        std::vector<size_t> stepped;
        for (size_t i = 0; i < 5; ++i) {
            if ((stepn + i) % 4 == 3 && stepn < 6) continue;  // not every sequence in every step
            // Step 0: prompts of 2 .. 40 tokens (the 33- and 40-token ones take the chunked form); then
            // 1 or 3 tokens, and a 12-token chunk now and then; steps 6+ are one token each (GEMV + graph).
            size_t add = stepn == 0 ? std::vector<size_t>{2, 7, 33, 5, 40}[i]
                                    : ((stepn + i) % 3 == 0 ? 3 : 1 + (i == 4) * 11);
            if (stepn >= 6) add = 1;
            const auto t = random_tokens(add, fx.V(), rng);
            st.add(ids[i], static_cast<int64_t>(toks[i].size()), t);
            toks[i].insert(toks[i].end(), t.begin(), t.end());
            stepped.push_back(i);
        }
        ASSERT_TRUE(st.run(*gpu, **gmem, gl).ok()) << "step " << stepn;
        ThreadPool pool(2);
        ASSERT_TRUE(st.run(**cpu, **cmem, cl).ok());
        for (size_t r = 0; r < stepped.size(); ++r) {
            const size_t i = stepped[r];
            const auto row = std::span(gl).subspan(r * V, V);
            EXPECT_EQ((*gmem)->length(ids[i]), static_cast<int64_t>(toks[i].size()));
            const double dr = test::max_rel_diff(row, fx.reference(toks[i]));
            const double dc = test::max_rel_diff(row, std::span(cl).subspan(r * V, V));
            EXPECT_LT(dr, kBound) << "step " << stepn << " seq " << i;
            EXPECT_LT(dc, kBound) << "step " << stepn << " seq " << i;
            worst_ref = std::max(worst_ref, dr);
            worst_cpu = std::max(worst_cpu, dc);
        }
    }
    fmt::print("cuda hybrid executor {}: worst vs double reference {:.2e}, vs the CPU executor {:.2e}\n",
               variant_name(GetParam()), worst_ref, worst_cpu);
    for (SeqId s : ids) (*gmem)->close(s);
    EXPECT_EQ((*gmem)->n_free_blocks(), (*gmem)->n_blocks());
}

TEST_P(CudaExecutorHybrid, TruncateWithinCheckpointsIsExactAndFurtherBackReportsWhatItRestored) {
    Fixture fx(gpu_spec(GetParam()), std::string("cuexh_trunc_") + variant_name(GetParam()));
    ASSERT_TRUE(fx.model);
    constexpr int32_t K = 4;
    auto exec = gpu_executor(*fx.model, 64);
    ASSERT_TRUE(exec);
    auto mem =
        exec->create_memory({.max_seqs = 2, .max_seq_tokens = 80, .block_tokens = 4, .checkpoints = K});
    ASSERT_TRUE(mem.ok());
    std::mt19937 rng(5);
    const SeqId s = (*mem)->open().value();
    std::vector<int32_t> toks = random_tokens(36, fx.V(), rng);  // the chunked form
    std::vector<float> logits;
    Step pre;
    pre.add(s, 0, toks);
    ASSERT_TRUE(pre.run(*exec, **mem, logits).ok());
    EXPECT_LT(test::max_rel_diff(logits, fx.reference(toks)), kBound) << "prefill";
    for (int back = 1; back <= K; ++back) {
        for (int j = 0; j < back; ++j) {
            Step d;
            d.add(s, static_cast<int64_t>(toks.size()) + j, random_tokens(1, fx.V(), rng));
            ASSERT_TRUE(d.run(*exec, **mem, logits).ok());
        }
        const auto n = static_cast<int64_t>(toks.size());
        ASSERT_EQ((*mem)->truncate(s, n), n) << "back " << back;
        const auto t = random_tokens(1, fx.V(), rng);
        Step d;
        d.add(s, n, t);
        ASSERT_TRUE(d.run(*exec, **mem, logits).ok());
        toks.push_back(t[0]);
        EXPECT_LT(test::max_rel_diff(logits, fx.reference(toks)), kBound) << "back " << back;
    }
    {  // a 3-token step keeps a state per token: truncating into it is exact
        Step d;
        const auto t = random_tokens(3, fx.V(), rng);
        d.add(s, static_cast<int64_t>(toks.size()), t);
        ASSERT_TRUE(d.run(*exec, **mem, logits).ok());
        const auto keep = static_cast<int64_t>(toks.size()) + 1;
        ASSERT_EQ((*mem)->truncate(s, keep), keep);
        toks.push_back(t[0]);
        const auto u = random_tokens(1, fx.V(), rng);
        Step e;
        e.add(s, keep, u);
        ASSERT_TRUE(e.run(*exec, **mem, logits).ok());
        toks.push_back(u[0]);
        EXPECT_LT(test::max_rel_diff(logits, fx.reference(toks)), kBound) << "into a 3-token step";
    }
    const auto n = static_cast<int64_t>(toks.size());
    const int64_t got = (*mem)->truncate(s, n - (K + 3));
    EXPECT_LT(got, n - (K + 3));
    EXPECT_EQ((*mem)->length(s), got);
    toks.resize(static_cast<size_t>(n - (K + 3)));
    Step r;
    r.add(s, got, std::span(toks).subspan(static_cast<size_t>(got)));
    ASSERT_TRUE(r.run(*exec, **mem, logits).ok());
    EXPECT_LT(test::max_rel_diff(logits, fx.reference(toks)), kBound) << "re-fed after a far truncate";
}

TEST_P(CudaExecutorHybrid, ForkCarriesTheRecurrentState) {
    Fixture fx(gpu_spec(GetParam()), std::string("cuexh_fork_") + variant_name(GetParam()));
    ASSERT_TRUE(fx.model);
    auto exec = gpu_executor(*fx.model, 64);
    ASSERT_TRUE(exec);
    auto mem = exec->create_memory({.max_seqs = 2, .max_seq_tokens = 64, .block_tokens = 4});
    ASSERT_TRUE(mem.ok());
    std::mt19937 rng(17);
    const SeqId a = (*mem)->open().value();
    std::vector<int32_t> ta = random_tokens(13, fx.V(), rng);
    std::vector<float> logits;
    Step pre;
    pre.add(a, 0, ta);
    ASSERT_TRUE(pre.run(*exec, **mem, logits).ok());
    const SeqId b = (*mem)->open().value();
    ASSERT_TRUE((*mem)->fork(a, b).ok());
    std::vector<int32_t> tb = ta;
    const auto V = static_cast<size_t>(fx.V());
    for (int j = 0; j < 4; ++j) {
        Step st;
        const auto x = random_tokens(2, fx.V(), rng);
        st.add(a, static_cast<int64_t>(ta.size()), std::span(x).first(1));
        st.add(b, static_cast<int64_t>(tb.size()), std::span(x).last(1));
        ASSERT_TRUE(st.run(*exec, **mem, logits).ok());
        ta.push_back(x[0]);
        tb.push_back(x[1]);
        EXPECT_LT(test::max_rel_diff(std::span(logits).first(V), fx.reference(ta)), kBound) << j;
        EXPECT_LT(test::max_rel_diff(std::span(logits).last(V), fx.reference(tb)), kBound) << j;
    }
}

// A second memory of another shape on the same executor (same KV pool size, so the device may hand out
// the same KV address: graphs are keyed on the memory itself), with 40 checkpoints: a 36-row prompt keeps a
// state per token (as on the CPU), so truncating into it is exact; decode steps (graphs) follow.
TEST_P(CudaExecutorHybrid, ASecondMemoryWithManyCheckpoints) {
    Fixture fx(gpu_spec(GetParam()), std::string("cuexh_mem2_") + variant_name(GetParam()));
    ASSERT_TRUE(fx.model);
    auto exec = gpu_executor(*fx.model, 64);
    ASSERT_TRUE(exec);
    std::mt19937 rng(29);
    std::vector<float> logits;
    for (int32_t K : {4, 40}) {
        SCOPED_TRACE("checkpoints " + std::to_string(K));
        auto mem = exec->create_memory({.max_seqs = K == 4 ? 2 : 3,
                                        .max_seq_tokens = 80,
                                        .kv_tokens = 160,
                                        .block_tokens = 4,
                                        .checkpoints = K});
        ASSERT_TRUE(mem.ok()) << mem.error().message;
        const SeqId s = (*mem)->open().value();
        std::vector<int32_t> toks = random_tokens(36, fx.V(), rng);
        Step pre;
        pre.add(s, 0, toks);
        ASSERT_TRUE(pre.run(*exec, **mem, logits).ok());
        for (int j = 0; j < 3; ++j) {  // one-row steps: graphs
            const auto t = random_tokens(1, fx.V(), rng);
            Step d;
            d.add(s, static_cast<int64_t>(toks.size()), t);
            ASSERT_TRUE(d.run(*exec, **mem, logits).ok());
            toks.push_back(t[0]);
            EXPECT_LT(test::max_rel_diff(logits, fx.reference(toks)), kBound) << "decode " << j;
        }
        const int64_t keep = 30;  // inside the prompt run
        const int64_t got = (*mem)->truncate(s, keep);
        if (K == 40) {
            EXPECT_EQ(got, keep) << "a run within the checkpoints keeps every token's state";
        } else {
            EXPECT_LT(got, keep);
        }
        toks.resize(static_cast<size_t>(keep));
        if (got < keep) {  // re-feed what the memory could not restore
            Step r;
            r.add(s, got, std::span(toks).subspan(static_cast<size_t>(got)));
            ASSERT_TRUE(r.run(*exec, **mem, logits).ok());
        }
        const auto t = random_tokens(1, fx.V(), rng);
        Step d;
        d.add(s, keep, t);
        ASSERT_TRUE(d.run(*exec, **mem, logits).ok());
        toks.push_back(t[0]);
        EXPECT_LT(test::max_rel_diff(logits, fx.reference(toks)), kBound) << "after the truncate";
    }
}

// A seeded random interleaving of open / step / truncate / fork / close over many sequences, the same
// operations on the CUDA and the CPU executor: every step's logits agree, both memories report the same
// restored lengths after each truncate (within the checkpoints exact, further back shorter), and no
// KV block is leaked.
TEST_P(CudaExecutorHybrid, RandomInterleavingMatchesTheCpuExecutor) {
    Fixture fx(gpu_spec(GetParam()), std::string("cuexh_rand_") + variant_name(GetParam()));
    ASSERT_TRUE(fx.model);
    auto gpu = gpu_executor(*fx.model, 48);
    ASSERT_TRUE(gpu);
    auto cpu = cpu::CpuExecutor::create(*fx.model, {.max_batch_tokens = 48});
    ASSERT_TRUE(cpu.ok());
    const MemoryOptions mo{
        .max_seqs = 8, .max_seq_tokens = 40, .kv_tokens = 160, .block_tokens = 4, .checkpoints = 4};
    auto gmem = gpu->create_memory(mo);
    auto cmem = (*cpu)->create_memory(mo);
    ASSERT_TRUE(gmem.ok() && cmem.ok());
    const int32_t n_blocks = (*gmem)->n_free_blocks();
    std::mt19937 rng(99);
    std::map<SeqId, int64_t> len;
    int opened = 0, checked = 0, far_truncates = 0;
    double worst = 0;
    for (int it = 0; it < 400; ++it) {
        const int op = static_cast<int>(rng() % 8);
        if (op == 0 || len.size() < 2) {
            auto a = (*gmem)->open();
            auto b = (*cmem)->open();
            ASSERT_EQ(a.ok(), b.ok());
            if (a.ok()) {
                ASSERT_EQ(*a, *b);
                len[*a] = 0, ++opened;
            }
            continue;
        }
        auto pick = len.begin();
        std::advance(pick, static_cast<long>(rng() % len.size()));
        const SeqId sid = pick->first;
        if (op == 1) {
            (*gmem)->close(sid);
            (*cmem)->close(sid);
            len.erase(sid);
        } else if (op == 2) {
            const auto keep = static_cast<int64_t>(rng() % (pick->second + 1));
            const int64_t g = (*gmem)->truncate(sid, keep);
            ASSERT_EQ((*cmem)->truncate(sid, keep), g);
            far_truncates += g < keep;
            pick->second = g;
        } else if (op == 3) {
            auto a = (*gmem)->open();
            auto b = (*cmem)->open();
            if (!a.ok()) continue;
            ++opened;
            ASSERT_TRUE((*gmem)->fork(sid, *a).ok());
            ASSERT_TRUE((*cmem)->fork(sid, *b).ok());
            len[*a] = pick->second;
        } else {
            Step st;
            int64_t rows = 0;
            for (auto& [id, n] : len) {
                if (rng() % 2 || st.out_rows.size() >= 4) continue;
                const auto add = static_cast<size_t>(rng() % 4 == 0 ? 5 + rng() % 8 : 1 + rng() % 3);
                if (n + static_cast<int64_t>(add) > 40 || rows + static_cast<int64_t>(add) > 48) continue;
                st.add(id, n, random_tokens(add, fx.V(), rng));
                rows += static_cast<int64_t>(add);
            }
            if (st.out_rows.empty()) continue;
            std::vector<float> gl, cl;
            const Status gs = st.run(*gpu, **gmem, gl);  // out of blocks: both refuse
            const Status cs = st.run(**cpu, **cmem, cl);
            ASSERT_EQ(gs.ok(), cs.ok()) << (gs.ok() ? cs.error().message : gs.error().message);
            if (!gs.ok()) continue;
            const double d = test::max_rel_diff(gl, cl);
            worst = std::max(worst, d);
            ASSERT_LT(d, kBound) << "iteration " << it;
            ++checked;
            for (size_t r = 0; r < st.tok.size(); ++r) len[st.seq[r]] = st.pos[r] + 1;
        }
    }
    for (auto& [id, n] : len) (*gmem)->close(id), (*cmem)->close(id);
    EXPECT_EQ((*gmem)->n_free_blocks(), n_blocks);
    EXPECT_GT(checked, 80);
    EXPECT_GT(far_truncates, 0);  // the far case was exercised
    fmt::print(
        "cuda hybrid executor random interleaving: {} sequences, {} steps, {} far truncates, worst vs CPU "
        "{:.2e}\n",
        opened, checked, far_truncates, worst);
}

// A memory made for a model of other shapes (fewer DeltaNet value heads) is refused, not read out of bounds.
TEST_P(CudaExecutorHybrid, RefusesAnotherModelsMemory) {
    Fixture fx(gpu_spec(GetParam()), std::string("cuexh_other_a_") + variant_name(GetParam()));
    HybridSpec other = gpu_spec(GetParam());
    other.nv = 2;
    Fixture fy(other, std::string("cuexh_other_b_") + variant_name(GetParam()));
    ASSERT_TRUE(fx.model && fy.model);
    auto ex = gpu_executor(*fx.model, 16), ey = gpu_executor(*fy.model, 16);
    ASSERT_TRUE(ex && ey);
    auto mem = ey->create_memory({.max_seqs = 1, .max_seq_tokens = 32});
    ASSERT_TRUE(mem.ok());
    const SeqId s = (*mem)->open().value();
    std::mt19937 rng(3);
    Step st;
    st.add(s, 0, random_tokens(3, fx.V(), rng));
    std::vector<float> logits;
    const Status r = st.run(*ex, **mem, logits);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("other shapes"), std::string::npos) << r.error().message;
    EXPECT_TRUE(st.run(*ey, **mem, logits).ok());  // its own executor still steps it
}

// Steps beyond the DeltaNet kernels' grid limit are refused at creation, with a message.
TEST_P(CudaExecutorHybrid, RefusesMoreRowsThanTheKernelsTake) {
    Fixture fx(gpu_spec(GetParam()), std::string("cuexh_big_") + variant_name(GetParam()));
    ASSERT_TRUE(fx.model);
    auto gm = cuda::GpuModel::upload(*fx.model, /*log_progress=*/false);
    ASSERT_TRUE(gm.ok()) << gm.error().message;
    auto e = cuda::CudaExecutor::create(std::shared_ptr<const cuda::GpuModel>(std::move(gm).value()),
                                        {.max_batch_tokens = 70000, .max_seqs = 8, .max_seq_tokens = 64});
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("65535"), std::string::npos) << e.error().message;
}

INSTANTIATE_TEST_SUITE_P(Hybrid, CudaExecutorHybrid, ::testing::Values(0, 1, 2),
                         [](const auto& info) { return variant_name(info.param); });

// ---- the transformers fixtures ---------------------------------------------------------------------

class CudaExecutorHybridGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaExecutorHybridGolden, LogitsAndGreedyMatchTransformers) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const auto dir = golden::kHybridDir / GetParam();
    auto ref = SafetensorsFile::open((dir / "reference.safetensors").string());
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    auto m = Model::load(dir.string(), ModelLoadOptions{.allow_repack = false});
    ASSERT_TRUE(m.ok()) << m.error().message;
    auto exec = gpu_executor(**m, 512);
    ASSERT_TRUE(exec);
    const auto V = static_cast<size_t>((*m)->hparams().n_vocab);
    const auto close = [&](const std::vector<float>& got, const std::vector<float>& want,
                           const std::string& what) {
        ASSERT_EQ(got.size(), want.size()) << what;
        const double d = golden::row_rel_diff(got, want, V);
        fmt::print("cuda executor hybrid golden {} {}: max relative logit error {:.2e}\n", GetParam(), what,
                   d);
        EXPECT_LT(d, 1e-4) << what;
    };
    for (const char* name : {"a", "b"}) {
        const auto toks = golden::tensor_values<int32_t>(*ref, std::string("tokens_") + name);
        const auto want = golden::tensor_values<float>(*ref, std::string("logits_") + name);
        ASSERT_FALSE(toks.empty());
        auto mem = exec->create_memory({.max_seqs = 1, .max_seq_tokens = 256});
        ASSERT_TRUE(mem.ok());
        const SeqId s = (*mem)->open().value();
        std::vector<float> all;
        Step whole;
        whole.add(s, 0, toks, /*all_rows=*/true);
        ASSERT_TRUE(whole.run(*exec, **mem, all).ok());
        close(all, want, std::string("tokens_") + name + " in one step");
        // Token by token on a second sequence (GEMV steps, captured graphs).
        auto mem2 = exec->create_memory({.max_seqs = 1, .max_seq_tokens = 256});
        ASSERT_TRUE(mem2.ok());
        const SeqId s2 = (*mem2)->open().value();
        std::vector<float> steps, l;
        for (size_t t = 0; t < toks.size(); ++t) {
            Step one;
            one.add(s2, static_cast<int64_t>(t), std::span(&toks[t], 1));
            ASSERT_TRUE(one.run(*exec, **mem2, l).ok());
            steps.insert(steps.end(), l.begin(), l.end());
        }
        close(steps, want, std::string("tokens_") + name + " token by token");
    }
    const auto prompt = golden::tensor_values<int32_t>(*ref, "greedy_prompt");
    const auto want = golden::tensor_values<int32_t>(*ref, "greedy_tokens");
    auto mem = exec->create_memory({.max_seqs = 1, .max_seq_tokens = 512});
    ASSERT_TRUE(mem.ok());
    const SeqId s = (*mem)->open().value();
    std::vector<float> l;
    Step pre;
    pre.add(s, 0, prompt);
    ASSERT_TRUE(pre.run(*exec, **mem, l).ok());
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
        const auto tok = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
        got.push_back(tok);
        if (i + 1 == want.size()) break;
        Step d;
        d.add(s, static_cast<int64_t>(prompt.size() + i), std::span(&tok, 1));
        ASSERT_TRUE(d.run(*exec, **mem, l).ok());
    }
    EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaExecutorHybridGolden, ::testing::ValuesIn(golden::hybrid_fixtures()));

}  // namespace
}  // namespace pelican
