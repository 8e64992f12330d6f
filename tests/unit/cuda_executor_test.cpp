// The CUDA executor over many sequences (backend/cuda/cuda_executor.h) on tiny random models: a batch
// of different prompts at different positions (prefill chunks and decode rows mixed, both the fused
// GEMV form and the cuBLAS form) gives each sequence the logits of the independent double-precision
// reference; quantized and half-precision weights give each sequence the logits it gets alone; a
// seeded random mix of open / step / truncate / fork / close matches the CPU executor doing the same
// and leaks no block. Skipped without a GPU.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include <fmt/format.h>

#include "backend/cpu/cpu_executor.h"
#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/device_buffer.h"
#include "model/model.h"
#include "model_test_util.h"
#include "runtime/scheduler.h"

namespace pelican {
namespace {

using test::TempDir;
using test::TinySpec;

std::vector<int32_t> some_tokens(size_t n, int64_t n_vocab, std::mt19937& rng) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
    return t;
}

std::unique_ptr<Model> load_rows(const std::string& path) {  // GGUF rows, as the GPU needs
    auto m = Model::load(path, ModelLoadOptions{.allow_repack = false});
    EXPECT_TRUE(m.ok()) << m.error().message;
    return m.ok() ? std::move(m).value() : nullptr;
}

std::unique_ptr<cuda::CudaExecutor> gpu_executor(const Model& m, int64_t max_tokens = 64,
                                                 bool graphs = true) {
    auto gm = cuda::GpuModel::upload(m, /*log_progress=*/false);
    EXPECT_TRUE(gm.ok()) << gm.error().message;
    if (!gm.ok()) return nullptr;
    auto e = cuda::CudaExecutor::create(
        std::shared_ptr<const cuda::GpuModel>(std::move(gm).value()),
        {.max_batch_tokens = max_tokens, .max_seqs = 16, .max_seq_tokens = 64, .use_graphs = graphs});
    EXPECT_TRUE(e.ok()) << e.error().message;
    return e.ok() ? std::move(e).value() : nullptr;
}

TinySpec variant(const std::string& name) {
    TinySpec s;
    s.model_type = name;
    if (name == "qwen2") {
        s.qkv_bias = true;
        s.tied = true;
    } else if (name == "qwen3") {
        s.qk_norm = true;
        s.head_dim = 32;
        s.n_layer = 3;
    } else if (name == "granite") {
        s.embd_mul = 12.0f;
        s.resid_mul = 0.22f;
        s.attn_mul = 0.0625f;
        s.logits_scaling = 8.0f;
    } else if (name == "mistral") {
        s.window = 5;
    }
    return s;
}

// One step's rows, built sequence by sequence.
struct Step {
    std::vector<int32_t> tok, out_rows;
    std::vector<int64_t> pos;
    std::vector<SeqId> seq;
    void add(SeqId s, int64_t p0, std::span<const int32_t> t) {
        for (size_t j = 0; j < t.size(); ++j) {
            tok.push_back(t[j]);
            pos.push_back(p0 + static_cast<int64_t>(j));
            seq.push_back(s);
        }
        out_rows.push_back(static_cast<int32_t>(tok.size() - 1));
    }
    Status run(Executor& e, SequenceMemory& m, std::vector<float>& logits, bool expect_ok = true) const {
        ThreadPool pool(2);
        logits.assign(out_rows.size() * static_cast<size_t>(e.model().hparams().n_vocab), 0.0f);
        Status st = e.step({tok, pos, seq, out_rows}, m, {.logits = logits}, pool);
        if (expect_ok && !st.ok())
            ADD_FAILURE() << "step of " << tok.size() << " rows: " << st.error().message;
        return st;
    }
};

// ---- f32, every architecture, against the f64 reference ------------------------------------------

class CudaExecutorArch : public ::testing::TestWithParam<std::string> {};

// Four sequences prefilled in one step of 37 rows (cuBLAS form), then five steps of one row each
// (fused GEMV form, 4 rows) with a 6-token chunk of sequence 2 mixed into the second (9 rows: the
// cuBLAS form with decode rows in it). Bound: the CUDA pass's f32 bound against the same reference
// (cuda_forward_test: 2e-5; fp32 summation order).
TEST_P(CudaExecutorArch, BatchMatchesTheReferenceForEverySequence) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const TinySpec s = variant(GetParam());
    const auto w = test::make_weights(s);
    TempDir dir("cuda_exec_" + GetParam());
    test::write_gguf_model(dir.str("m.gguf"), s, w);
    auto m = load_rows(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    auto exec = gpu_executor(*m);
    ASSERT_TRUE(exec);
    EXPECT_EQ(exec->kv_type(), DType::F32);
    auto mem = exec->create_memory({.max_seqs = 4, .max_seq_tokens = 64, .block_tokens = 4});
    ASSERT_TRUE(mem.ok()) << mem.error().message;
    std::mt19937 rng(7);
    const size_t lens[4] = {3, 12, 1, 21};
    std::vector<std::vector<int32_t>> toks(4);
    std::vector<SeqId> ids;
    Step pre;
    for (size_t i = 0; i < 4; ++i) {
        ids.push_back((*mem)->open().value());
        toks[i] = some_tokens(lens[i], s.n_vocab, rng);
        pre.add(ids[i], 0, toks[i]);
    }
    std::vector<float> logits;
    ASSERT_TRUE(pre.run(*exec, **mem, logits).ok());
    const auto V = static_cast<size_t>(s.n_vocab);
    double worst = 0;
    const auto check = [&](size_t row, size_t i, const char* what) {
        const auto want = test::reference_forward(s, w, toks[i]);
        const double d = test::max_rel_diff(std::span(logits).subspan(row * V, V),
                                            std::span(want).subspan(want.size() - V, V));
        worst = std::max(worst, d);
        EXPECT_LT(d, 2e-5) << what << " seq " << i;
    };
    for (size_t i = 0; i < 4; ++i) check(i, i, "prefill");
    for (int stepn = 0; stepn < 5; ++stepn) {
        Step st;
        for (size_t i = 0; i < 4; ++i) {
            const auto t = some_tokens((i == 2 && stepn == 1) ? 6 : 1, s.n_vocab, rng);
            st.add(ids[i], static_cast<int64_t>(toks[i].size()), t);
            toks[i].insert(toks[i].end(), t.begin(), t.end());
        }
        ASSERT_TRUE(st.run(*exec, **mem, logits).ok());
        for (size_t i = 0; i < 4; ++i) check(i, i, stepn == 1 ? "mixed step" : "decode step");
    }
    fmt::print("cuda executor {}: worst max relative error vs the f64 reference {:.2e}\n", GetParam(), worst);
}

INSTANTIATE_TEST_SUITE_P(Model, CudaExecutorArch,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "granite"));

// ---- every GPU weight type: batch == each alone ----------------------------------------------------

class CudaExecutorTypes : public ::testing::TestWithParam<DType> {};

// Prompts longer than the GEMV rows (both ways through the tensor-core / cuBLAS matmul), then decode
// steps of one row per sequence (the batch: one GEMV of 4 rows; alone: of 1 row). Each row's activations are
// quantized on their own and the products are exact integer dot products or fp32 sums, so the batch and the
// single sequence differ only in fp32 summation order: 1e-4 of the largest logit.
TEST_P(CudaExecutorTypes, BatchEqualsEachSequenceAlone) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    TinySpec s = variant("qwen2");
    s.n_embd = 256;
    s.n_ff = 512;
    s.n_head = 4;
    s.n_kv = 2;
    s.head_dim = 64;
    s.n_vocab = 320;
    s.tied = false;
    const auto w = test::make_weights(s);
    TempDir dir(fmt::format("cuda_exec_type_{}", dtype_name(GetParam())));
    test::write_gguf_model(dir.str("m.gguf"), s, w, GetParam());
    auto m = load_rows(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    auto exec = gpu_executor(*m, 96, /*graphs=*/false);  // eager launches here; the other tests replay graphs
    ASSERT_TRUE(exec);
    ASSERT_GE(exec->gemv_rows(), 4);
    auto mem = exec->create_memory({.max_seqs = 8, .max_seq_tokens = 64, .block_tokens = 8});
    ASSERT_TRUE(mem.ok());
    std::mt19937 rng(3);
    // Prompts of 9 .. 30 tokens, 69 rows in the batch's step: no 64-row tile of it holds 16 rows of one
    // sequence, so its attention runs the fp32 rows kernel. Alone, each prompt goes in chunks of 9 .. 15
    // rows: above every GEMV row limit (the batch's form too) and below the 16 rows from which
    // attention_paged takes the tensor-core tile kernel (q and p rounded to f16; its own accuracy is
    // cuda_paged_attention_test's).
    const size_t lens[4] = {9, 20, 10, 30};
    std::vector<SeqId> ids, solo;
    std::vector<std::vector<int32_t>> toks(4);
    std::vector<float> batch, alone;
    Step pre;
    for (size_t i = 0; i < 4; ++i) {
        ids.push_back((*mem)->open().value());
        toks[i] = some_tokens(lens[i], s.n_vocab, rng);
        pre.add(ids[i], 0, toks[i]);
    }
    ASSERT_TRUE(pre.run(*exec, **mem, batch).ok());
    const auto V = static_cast<size_t>(s.n_vocab);
    for (size_t i = 0; i < 4; ++i) {  // each prompt alone in its own sequence
        solo.push_back((*mem)->open().value());
        const size_t n_chunks = (lens[i] + 14) / 15;
        for (size_t c = 0, p0 = 0; c < n_chunks; ++c) {
            const size_t len = (lens[i] - p0) / (n_chunks - c);
            Step one;
            one.add(solo[i], static_cast<int64_t>(p0), std::span(toks[i]).subspan(p0, len));
            ASSERT_TRUE(one.run(*exec, **mem, alone).ok());
            p0 += len;
        }
        EXPECT_LT(test::max_rel_diff(std::span(batch).subspan(i * V, V), alone), 1e-4) << "prefill " << i;
    }
    for (int stepn = 0; stepn < 4; ++stepn) {
        Step st;
        std::vector<int32_t> next = some_tokens(4, s.n_vocab, rng);
        for (size_t i = 0; i < 4; ++i) st.add(ids[i], static_cast<int64_t>(toks[i].size()), {&next[i], 1});
        ASSERT_TRUE(st.run(*exec, **mem, batch).ok());
        for (size_t i = 0; i < 4; ++i) {
            Step one;
            one.add(solo[i], static_cast<int64_t>(toks[i].size()), {&next[i], 1});
            ASSERT_TRUE(one.run(*exec, **mem, alone).ok());
            EXPECT_LT(test::max_rel_diff(std::span(batch).subspan(i * V, V), alone), 1e-4)
                << "decode " << stepn << " seq " << i;
            toks[i].push_back(next[i]);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Type, CudaExecutorTypes,
                         ::testing::Values(DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- random interleaving against the CPU executor ------------------------------------------------

// Hundreds of sequences opened, stepped (prefill chunks and decode rows mixed), truncated, forked
// (copy on write of shared blocks on the GPU) and closed in a seeded random order, the same
// operations on a CPU executor's memory: every logits row within 4e-5 (two fp32 passes, each 2e-5
// of the f64 reference), and every block free again at the end.
TEST(CudaExecutor, RandomInterleavingMatchesTheCpuExecutor) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    TinySpec s = variant("qwen3");
    const auto w = test::make_weights(s);
    TempDir dir("cuda_exec_random");
    test::write_gguf_model(dir.str("m.gguf"), s, w);
    auto m = load_rows(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    auto gpu = gpu_executor(*m, 48);
    ASSERT_TRUE(gpu);
    auto cpu = cpu::CpuExecutor::create(*m, {.max_batch_tokens = 48});
    ASSERT_TRUE(cpu.ok());
    const MemoryOptions mo{.max_seqs = 8, .max_seq_tokens = 40, .kv_tokens = 160, .block_tokens = 4};
    auto gmem = gpu->create_memory(mo);
    auto cmem = (*cpu)->create_memory(mo);
    ASSERT_TRUE(gmem.ok() && cmem.ok());
    const int32_t n_blocks = (*gmem)->n_free_blocks();
    std::mt19937 rng(99);
    std::map<SeqId, int64_t> len;
    int opened = 0, checked = 0;
    double worst = 0;
    for (int it = 0; it < 600; ++it) {
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
            ASSERT_EQ((*gmem)->truncate(sid, keep), keep);
            ASSERT_EQ((*cmem)->truncate(sid, keep), keep);
            pick->second = keep;
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
                const auto add = static_cast<size_t>(1 + rng() % 8);
                if (n + static_cast<int64_t>(add) > 40 || rows + static_cast<int64_t>(add) > 48) continue;
                st.add(id, n, some_tokens(add, s.n_vocab, rng));
                rows += static_cast<int64_t>(add);
            }
            if (st.out_rows.empty()) continue;
            std::vector<float> gl, cl;
            const Status gs = st.run(*gpu, **gmem, gl, false);  // out of blocks: both refuse
            const Status cs = st.run(**cpu, **cmem, cl, false);
            ASSERT_EQ(gs.ok(), cs.ok()) << (gs.ok() ? cs.error().message : gs.error().message);
            if (!gs.ok()) continue;  // out of blocks: both refused, nothing committed
            const double d = test::max_rel_diff(gl, cl);
            worst = std::max(worst, d);
            ASSERT_LT(d, 4e-5) << "iteration " << it;
            ++checked;
            for (size_t r = 0; r < st.tok.size(); ++r) len[st.seq[r]] = st.pos[r] + 1;
        }
    }
    for (auto& [id, n] : len) (*gmem)->close(id), (*cmem)->close(id);
    EXPECT_EQ((*gmem)->n_free_blocks(), n_blocks);
    EXPECT_GT(checked, 100);
    fmt::print("cuda executor random interleaving: {} sequences, {} steps, worst vs CPU {:.2e}\n", opened,
               checked, worst);
}

// The scheduler over the CUDA executor samples on the device (greedy and seeded top-k / top-p /
// penalties, the uniform draws and windows from each request's host Sampler) and generates what the
// scheduler over the CPU executor generates from host logits: the same tokens (f32 logits within
// 4e-5 of each other; a flip would need a draw within that of a boundary).
TEST(CudaExecutor, SchedulerSamplesOnTheDeviceAsTheHostDoes) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const TinySpec s = variant("llama");
    TempDir dir("cuda_exec_sched");
    test::write_gguf_model(dir.str("m.gguf"), s, test::make_weights(s));
    auto m = load_rows(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    auto gpu = gpu_executor(*m, 32);
    ASSERT_TRUE(gpu);
    auto cpu = cpu::CpuExecutor::create(*m, {.max_batch_tokens = 32});
    ASSERT_TRUE(cpu.ok());
    const MemoryOptions mo{.max_seqs = 6, .max_seq_tokens = 64, .block_tokens = 8};
    auto gmem = gpu->create_memory(mo);
    auto cmem = (*cpu)->create_memory(mo);
    ASSERT_TRUE(gmem.ok() && cmem.ok());
    Scheduler gs(*gpu, **gmem, {.token_budget = 32}), cs(**cpu, **cmem, {.token_budget = 32});
    std::mt19937 rng(5);
    for (int i = 0; i < 8; ++i) {
        RequestOptions r;
        r.prompt = some_tokens(2 + rng() % 20, s.n_vocab, rng);
        r.max_tokens = 12;
        r.sampling.seed = 40 + static_cast<uint64_t>(i);
        if (i % 4 == 0) r.sampling.temperature = 0;
        if (i % 4 == 2) r.sampling.repetition_penalty = 1.3f, r.sampling.frequency_penalty = 0.2f;
        if (i % 4 == 3) r.sampling.top_k = 1000;  // more than the vocabulary
        ASSERT_TRUE(gs.admit(r).ok());
        ASSERT_TRUE(cs.admit(r).ok());
    }
    ThreadPool pool(2);
    std::map<RequestId, std::vector<int32_t>> gt, ct;
    std::vector<TokenEvent> ev;
    for (auto [sch, out] : {std::pair{&gs, &gt}, std::pair{&cs, &ct}}) {
        while (!sch->idle()) {
            ev.clear();
            ASSERT_TRUE(sch->step(ev, pool).ok());
            for (const TokenEvent& e : ev)
                if (e.token != kNoToken) (*out)[e.id].push_back(e.token);
        }
    }
    EXPECT_EQ(gt, ct);
    EXPECT_EQ(gs.stats().device_sampled, 8 * 12);
    EXPECT_EQ(cs.stats().device_sampled, 0);
}

TEST(CudaExecutor, RefusesAnotherBackendsMemoryAndBadBatches) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const TinySpec s = variant("llama");
    TempDir dir("cuda_exec_bad");
    test::write_gguf_model(dir.str("m.gguf"), s, test::make_weights(s));
    auto m = load_rows(dir.str("m.gguf"));
    ASSERT_TRUE(m);
    auto gpu = gpu_executor(*m, 8);
    ASSERT_TRUE(gpu);
    auto cpu = cpu::CpuExecutor::create(*m, {.max_batch_tokens = 8});
    ASSERT_TRUE(cpu.ok());
    auto cmem = (*cpu)->create_memory({.max_seqs = 2, .max_seq_tokens = 16});
    ASSERT_TRUE(cmem.ok());
    const SeqId a = (*cmem)->open().value();
    Step st;
    const int32_t t = 1;
    st.add(a, 0, {&t, 1});
    std::vector<float> l;
    Status e = st.run(*gpu, **cmem, l, false);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("not made by the CUDA executor"), std::string::npos)
        << e.error().message;
    auto gmem = gpu->create_memory({.max_seqs = 2, .max_seq_tokens = 16});
    ASSERT_TRUE(gmem.ok());
    EXPECT_FALSE(gpu->create_memory({.max_seqs = 17, .max_seq_tokens = 16}).ok());
    EXPECT_FALSE(gpu->create_memory({.max_seqs = 2, .max_seq_tokens = 65}).ok());
    const SeqId g = (*gmem)->open().value();
    Step bad;
    const int32_t big = static_cast<int32_t>(s.n_vocab);
    bad.add(g, 0, {&big, 1});
    e = bad.run(*gpu, **gmem, l, false);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("outside the vocabulary"), std::string::npos) << e.error().message;
    EXPECT_EQ((*gmem)->length(g), 0);
    Step good;
    good.add(g, 0, {&t, 1});
    EXPECT_TRUE(good.run(*gpu, **gmem, l).ok());
    EXPECT_EQ((*gmem)->length(g), 1);
}

}  // namespace
}  // namespace pelican
