// pelican bench --batch (runtime/batch_bench.h) on the CPU: one row per batch size with the tokens
// it says it generated, the KV pool's capacity, preemptions when --kv-memory is too small for the
// batch, the JSON lines, and argument errors.
#include "runtime/batch_bench.h"

#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "pelican/engine.h"

namespace pelican {
namespace {

const Engine& engine() {
    static std::unique_ptr<Engine> e = [] {
        auto r = Engine::load(std::string(PELICAN_SOURCE_DIR) + "/tests/golden/llama");
        EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
        return r.ok() ? std::move(r).value() : nullptr;
    }();
    return *e;
}

TEST(BatchBench, ParsesBatchLists) {
    EXPECT_EQ(parse_batches("1,8,32,128").value(), (std::vector<int32_t>{1, 8, 32, 128}));
    EXPECT_EQ(parse_batches("4").value(), (std::vector<int32_t>{4}));
    for (const char* bad : {"", "0", "1,,2", "-3", "8x", "1,65537", "1,"}) {
        auto r = parse_batches(bad);
        ASSERT_FALSE(r.ok()) << bad;
        EXPECT_NE(r.error().message.find("--batch"), std::string::npos) << r.error().message;
    }
}

TEST(BatchBench, OneRowPerBatchSizeWithItsTokensAndPool) {
    BatchBenchParams p;
    p.batches = {1, 3, 5};
    p.n_prompt = 12;
    p.n_gen = 6;
    p.n_batch = 32;
    p.block_tokens = 4;
    p.n_threads = 2;
    auto r = run_batch_bench(engine(), p);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->rows.size(), 3u);
    for (const BatchBenchRow& x : r->rows) {
        EXPECT_GT(x.pp_tps, 0);
        EXPECT_GT(x.tg_tps, 0);
        EXPECT_EQ(x.preemptions, 0);
        // Room for every sequence's 12 + 6 + 1 positions, in blocks of 4.
        EXPECT_EQ(x.kv_capacity_tokens, x.batch * 20);
        // tg counts the N tokens after the first: B * N of them over t_tg.
        EXPECT_NEAR(x.tg_tps * x.tg_s, x.batch * p.n_gen, 1e-6 * x.batch * p.n_gen);
        EXPECT_NEAR(x.pp_tps * x.pp_s, x.batch * p.n_prompt, 1e-6 * x.batch * p.n_prompt);
    }
    std::istringstream lines(batch_bench_json(*r));
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
        const auto j = nlohmann::json::parse(line);
        EXPECT_EQ(j.at("batch").get<int>(), p.batches[static_cast<size_t>(n)]);
        EXPECT_EQ(j.at("n_prompt").get<int>(), 12);
        ++n;
    }
    EXPECT_EQ(n, 3);
    EXPECT_NE(batch_bench_table(*r).find("S_tg"), std::string::npos);
}

// A context shorter than one KV block (-p 2 -n 2, blocks of 16) still runs.
TEST(BatchBench, ContextShorterThanABlock) {
    BatchBenchParams p;
    p.batches = {2};
    p.n_prompt = 2;
    p.n_gen = 2;
    p.n_threads = 2;
    auto r = run_batch_bench(engine(), p);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->rows.size(), 1u);
    EXPECT_EQ(r->rows[0].kv_capacity_tokens, 2 * 16);
}

TEST(BatchBench, ASmallPoolPreempts) {
    BatchBenchParams p;
    p.batches = {6};
    p.n_prompt = 16;
    p.n_gen = 8;
    p.n_batch = 64;
    p.block_tokens = 4;
    p.n_threads = 2;
    p.kv_memory_gib = 1e-9;  // one block: the pool cannot hold the batch
    auto small = run_batch_bench(engine(), p);
    ASSERT_TRUE(small.ok()) << small.error().message;
    // A pool of one block cannot hold even one sequence: every request ends with kContext and
    // nothing is generated after the prompts; the bench still returns a row.
    ASSERT_EQ(small->rows.size(), 1u);
    EXPECT_EQ(small->rows[0].kv_capacity_tokens, 4);
    p.kv_memory_gib = 0;
    auto full = run_batch_bench(engine(), p);
    ASSERT_TRUE(full.ok());
    // Room for three of the six sequences (25 positions each, 7 blocks): preemptions.
    const double per_block =
        full->rows[0].kv_bytes / static_cast<double>(full->rows[0].kv_capacity_tokens / 4);
    p.kv_memory_gib = per_block * 21 / (1024.0 * 1024.0 * 1024.0);
    auto half = run_batch_bench(engine(), p);
    ASSERT_TRUE(half.ok()) << half.error().message;
    EXPECT_EQ(half->rows[0].kv_capacity_tokens, 84);
    EXPECT_GT(half->rows[0].preemptions, 0);
    // Prefill stops when no prompt can go on (the done ones hold their blocks while decode is paused);
    // the rest get their first token in the decode phase: 48 .. 54 of the 6 * 9 tokens are counted there.
    const double tg = half->rows[0].tg_tps * half->rows[0].tg_s;
    EXPECT_GE(tg, 48 - 1e-6);
    EXPECT_LE(tg, 54 + 1e-6);
}

TEST(BatchBench, BadParametersAreRefused) {
    BatchBenchParams p;
    p.batches = {};
    EXPECT_FALSE(run_batch_bench(engine(), p).ok());
    p.batches = {1};
    p.n_gen = 0;
    EXPECT_FALSE(run_batch_bench(engine(), p).ok());
    p.n_gen = 4;
    p.n_batch = 0;
    EXPECT_FALSE(run_batch_bench(engine(), p).ok());
    p.n_batch = 8;
    p.kv_memory_gib = -1;
    EXPECT_FALSE(run_batch_bench(engine(), p).ok());
}

}  // namespace
}  // namespace pelican
