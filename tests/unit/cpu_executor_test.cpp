// The CPU executor over many sequences (backend/cpu/cpu_executor.h): a batch of different
// prompts at different positions gives each prompt's logits as if it ran alone; a seeded random
// mix of open / step / truncate / fork / close over hundreds of sequences matches the one-sequence
// reference and leaks no block; bad batches are refused without committing anything.
#include "backend/cpu/cpu_executor.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/thread_pool.h"
#include "model/model.h"
#include "model_test_util.h"
#include "runtime/forward_factory.h"

namespace pelican {
namespace {

using test::TempDir;
using test::TinySpec;

std::unique_ptr<Model> tiny_model(TempDir& dir, const std::string& type) {
    TinySpec s;
    s.model_type = type;
    if (type == "qwen3") s.qk_norm = true;
    if (type == "mistral") s.window = 6;
    test::write_hf_folder(dir.str("hf"), s, test::make_weights(s));
    auto m = Model::load(dir.str("hf"));
    EXPECT_TRUE(m.ok()) << m.error().message;
    return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<int32_t> some_tokens(size_t n, int64_t n_vocab, std::mt19937& rng) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
    return t;
}

// Last-token logits of `toks` run alone, in one step.
std::vector<float> alone(const Model& m, const std::vector<int32_t>& toks, ThreadPool& pool) {
    auto f = create_cpu_pass(m, ForwardOptions{.n_ctx = 64});
    EXPECT_TRUE(f.ok()) << f.error().message;
    EXPECT_TRUE((*f)->eval(toks, 0, pool).ok());
    auto l = (*f)->last_logits();
    return {l.begin(), l.end()};
}

// The matmul reduces each row on its own, so a row's logits do not depend on its batch mates:
// the bound is the fp32 rounding of different summation blocking between row counts.
constexpr double kBatchBound = 2e-5;

class CpuExecutorArch : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuExecutorArch, BatchOfSequencesEqualsEachAlone) {
    TempDir dir("exec_batch_" + GetParam());
    auto m = tiny_model(dir, GetParam());
    ASSERT_TRUE(m);
    // Every layer of a Llama-family model is attention + SwiGLU with plain norms.
    ASSERT_EQ(m->hparams().layer.size(), static_cast<size_t>(m->hparams().n_layer));
    EXPECT_TRUE(m->hparams().uniform_attention());
    for (const LayerWeights& l : m->weights().layers) EXPECT_EQ(l.kind, LayerKind{});
    const int64_t V = m->hparams().n_vocab;
    ThreadPool pool(2);
    auto exec = cpu::CpuExecutor::create(*m, {.max_batch_tokens = 64});
    ASSERT_TRUE(exec.ok()) << exec.error().message;
    auto mem = (*exec)->create_memory({.max_seqs = 4, .max_seq_tokens = 64, .block_tokens = 4});
    ASSERT_TRUE(mem.ok()) << mem.error().message;
    std::mt19937 rng(7);
    // Four sequences with prompts of 3, 9, 1 and 14 tokens, prefilled in one step.
    const size_t lens[4] = {3, 9, 1, 14};
    std::vector<std::vector<int32_t>> toks;
    std::vector<SeqId> ids;
    std::vector<int32_t> tok;
    std::vector<int64_t> pos;
    std::vector<SeqId> seq;
    std::vector<int32_t> out_rows;
    for (size_t i = 0; i < 4; ++i) {
        toks.push_back(some_tokens(lens[i], V, rng));
        ids.push_back((*mem)->open().value());
        for (size_t j = 0; j < lens[i]; ++j) {
            tok.push_back(toks[i][j]);
            pos.push_back(static_cast<int64_t>(j));
            seq.push_back(ids[i]);
        }
        out_rows.push_back(static_cast<int32_t>(tok.size() - 1));
    }
    std::vector<float> logits(4 * static_cast<size_t>(V));
    ASSERT_TRUE((*exec)->step({tok, pos, seq, out_rows}, **mem, {.logits = logits}, pool).ok());
    for (size_t i = 0; i < 4; ++i) {
        const auto want = alone(*m, toks[i], pool);
        EXPECT_LT(test::max_rel_diff(std::span(logits).subspan(i * V, V), want), kBatchBound)
            << "prefill seq " << i;
        EXPECT_EQ((*mem)->length(ids[i]), static_cast<int64_t>(lens[i]));
    }
    // Then decode steps: every sequence one token per step, each at its own position, and a
    // second chunk of prompt for sequence 2 mixed in (chunked prefill next to decode rows).
    for (int stepn = 0; stepn < 5; ++stepn) {
        tok.clear(), pos.clear(), seq.clear(), out_rows.clear();
        for (size_t i = 0; i < 4; ++i) {
            const size_t add = (i == 2 && stepn == 1) ? 6 : 1;
            for (size_t j = 0; j < add; ++j) {
                const int32_t t = some_tokens(1, V, rng)[0];
                tok.push_back(t);
                pos.push_back(static_cast<int64_t>(toks[i].size()));
                seq.push_back(ids[i]);
                toks[i].push_back(t);
            }
            out_rows.push_back(static_cast<int32_t>(tok.size() - 1));
        }
        ASSERT_TRUE((*exec)->step({tok, pos, seq, out_rows}, **mem, {.logits = logits}, pool).ok());
        for (size_t i = 0; i < 4; ++i) {
            const auto want = alone(*m, toks[i], pool);
            EXPECT_LT(test::max_rel_diff(std::span(logits).subspan(i * V, V), want), kBatchBound)
                << "step " << stepn << " seq " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Model, CpuExecutorArch, ::testing::Values("llama", "qwen3", "mistral"),
                         [](const auto& info) { return info.param; });

TEST(CpuExecutor, BadBatchesAreRefusedAndNothingIsCommitted) {
    TempDir dir("exec_bad");
    auto m = tiny_model(dir, "llama");
    ASSERT_TRUE(m);
    const int64_t V = m->hparams().n_vocab;
    ThreadPool pool(1);
    auto exec = cpu::CpuExecutor::create(*m, {.max_batch_tokens = 8});
    ASSERT_TRUE(exec.ok());
    auto mem = (*exec)->create_memory({.max_seqs = 2, .max_seq_tokens = 16, .block_tokens = 4});
    ASSERT_TRUE(mem.ok());
    const SeqId a = (*mem)->open().value(), b = (*mem)->open().value();
    std::vector<float> logits(static_cast<size_t>(V));
    auto refused = [&](std::vector<int32_t> tok, std::vector<int64_t> pos, std::vector<SeqId> seq,
                       std::vector<int32_t> out, const char* what) {
        Status st = (*exec)->step({tok, pos, seq, out}, **mem, {.logits = logits}, pool);
        ASSERT_FALSE(st.ok()) << what;
        EXPECT_NE(st.error().message.find(what), std::string::npos) << st.error().message;
        EXPECT_EQ((*mem)->length(a), 0);
        EXPECT_EQ((*mem)->length(b), 0);
    };
    refused({1, static_cast<int32_t>(V)}, {0, 1}, {a, a}, {1}, "outside the vocabulary");
    refused({1, 2}, {0, 2}, {a, a}, {1}, "expected 1");
    refused({1, 2}, {1, 2}, {a, a}, {1}, "holds 0 positions");
    refused({1, 2, 3}, {0, 0, 1}, {a, b, a}, {2}, "not consecutive");
    refused({1}, {0}, {5}, {0}, "not open");
    refused({1, 2}, {0, 0}, {a, b}, {1, 0}, "ascending");
    refused(std::vector<int32_t>(9, 1), {0, 1, 2, 3, 4, 5, 6, 7, 8}, std::vector<SeqId>(9, a), {8},
            "at most 8");
    refused({1, 2}, {0, 0}, {a, b}, {0, 1}, "expected 2 rows");  // logits sized for one row
    Status wrong = (*exec)->step(
        {std::vector<int32_t>{1}, std::vector<int64_t>{0}, std::vector<SeqId>{a}, std::vector<int32_t>{0}},
        **mem, {.logits = logits}, pool);
    EXPECT_TRUE(wrong.ok()) << wrong.error().message;
    EXPECT_EQ((*mem)->length(a), 1);
}

// Hundreds of sequences opened, stepped (prefill chunks and decode rows mixed in one batch),
// truncated, forked and closed in a seeded random order: every logits row equals the sequence
// run alone on its tokens so far, and when all are closed every block is free again.
TEST(CpuExecutor, RandomInterleavingMatchesTheSequentialReference) {
    TempDir dir("exec_random");
    auto m = tiny_model(dir, "qwen3");
    ASSERT_TRUE(m);
    const int64_t V = m->hparams().n_vocab;
    ThreadPool pool(2);
    auto exec = cpu::CpuExecutor::create(*m, {.max_batch_tokens = 48});
    ASSERT_TRUE(exec.ok());
    auto mem =
        (*exec)->create_memory({.max_seqs = 8, .max_seq_tokens = 40, .kv_tokens = 160, .block_tokens = 4});
    ASSERT_TRUE(mem.ok());
    const int32_t n_blocks = (*mem)->n_free_blocks();
    std::mt19937 rng(99);
    std::map<SeqId, std::vector<int32_t>> ref;
    int opened = 0, checked = 0;
    for (int it = 0; it < 1500; ++it) {
        const int op = static_cast<int>(rng() % 8);
        if (op == 0 || ref.size() < 2) {
            auto s = (*mem)->open();
            if (s.ok()) ref[*s] = {}, ++opened;
            continue;
        }
        auto pick = ref.begin();
        std::advance(pick, static_cast<long>(rng() % ref.size()));
        const SeqId s = pick->first;
        if (op == 1) {
            (*mem)->close(s);
            ref.erase(s);
        } else if (op == 2) {
            const auto keep = static_cast<int64_t>(rng() % (pick->second.size() + 1));
            ASSERT_EQ((*mem)->truncate(s, keep), keep);
            pick->second.resize(static_cast<size_t>(keep));
        } else if (op == 3) {
            auto t = (*mem)->open();
            if (!t.ok()) continue;
            ++opened;
            ASSERT_TRUE((*mem)->fork(s, *t).ok());
            ref[*t] = pick->second;
        } else {  // one step over up to 4 sequences, 1..8 new tokens each
            std::vector<int32_t> tok, out_rows;
            std::vector<int64_t> pos;
            std::vector<SeqId> seq, stepped;
            for (auto& [id, toks] : ref) {
                if (stepped.size() == 4 || rng() % 2) continue;
                const size_t add = 1 + rng() % 8;
                if (toks.size() + add > 40) continue;
                for (size_t j = 0; j < add; ++j) {
                    tok.push_back(some_tokens(1, V, rng)[0]);
                    pos.push_back(static_cast<int64_t>(toks.size() + j));
                    seq.push_back(id);
                }
                out_rows.push_back(static_cast<int32_t>(tok.size() - 1));
                stepped.push_back(id);
            }
            if (tok.empty()) continue;
            std::vector<float> logits(out_rows.size() * static_cast<size_t>(V));
            Status st = (*exec)->step({tok, pos, seq, out_rows}, **mem, {.logits = logits}, pool);
            if (!st.ok()) {  // the pool ran out: a clear error, nothing committed
                EXPECT_NE(st.error().message.find("KV pool is full"), std::string::npos)
                    << st.error().message;
                for (SeqId id : stepped) EXPECT_EQ((*mem)->length(id), static_cast<int64_t>(ref[id].size()));
                continue;
            }
            size_t row = 0;
            for (size_t k = 0; k < stepped.size(); ++k) {
                auto& toks = ref[stepped[k]];
                for (; row <= static_cast<size_t>(out_rows[k]); ++row) toks.push_back(tok[row]);
                const auto want = alone(*m, toks, pool);
                EXPECT_LT(test::max_rel_diff(std::span(logits).subspan(k * V, V), want), kBatchBound)
                    << "op " << it << " seq " << stepped[k];
                ++checked;
            }
        }
    }
    EXPECT_GT(opened, 150);
    EXPECT_GT(checked, 500);
    for (auto& [id, toks] : ref) (*mem)->close(id);
    EXPECT_EQ((*mem)->n_free_blocks(), n_blocks);
}

}  // namespace
}  // namespace pelican
