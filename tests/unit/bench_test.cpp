// pelican bench (runtime/bench.h): timings, byte accounting against an independent sum over the
// checkpoint's tensors, the JSON report, argument errors, and the CLI end to end.
#include "runtime/bench.h"

#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cache_info.h"
#include "backend/cpu/mem_bandwidth.h"
#include "formats/safetensors.h"
#include "model_test_util.h"
#include "pelican/engine.h"

namespace pelican {
namespace {

const std::string kModel = std::string(PELICAN_SOURCE_DIR) + "/tests/golden/llama";

const Engine& engine() {
    static std::unique_ptr<Engine> e = [] {
        auto r = Engine::load(kModel);
        EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
        return r.ok() ? std::move(r).value() : nullptr;
    }();
    return *e;
}

// No roofline probe (~0.5 s, 1 GiB) in the tests that time the model; the probe has its own test.
BenchParams small() {
    return BenchParams{.n_prompt = 8, .n_gen = 4, .reps = 2, .n_threads = 2, .measure_roofline = false};
}

TEST(Bench, RunsAndReportsPositiveMedians) {
    auto r = run_bench(engine(), small());
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->runs.size(), 2u);
    for (const BenchRun& run : r->runs) {
        EXPECT_GT(run.prefill_s, 0);
        EXPECT_GT(run.decode_s, 0);
    }
    EXPECT_GT(r->prefill.median, 0);
    EXPECT_GT(r->decode.median, 0);
    EXPECT_LE(r->decode.min, r->decode.median);
    EXPECT_LE(r->decode.median, r->decode.max);
    EXPECT_EQ(r->n_threads, 2);
    EXPECT_EQ(r->n_ctx, 8);
    EXPECT_GT(r->gbps, 0);
    // The session is left empty and the model unchanged: a second run works the same.
    EXPECT_TRUE(run_bench(engine(), small()).ok());
}

TEST(Bench, WeightBytesEqualTheCheckpointsTensors) {
    // Independent sum: every tensor of model.safetensors (all F32, as the kernels read them), except
    // that the token embedding counts one row.
    auto st = SafetensorsFile::open(kModel + "/model.safetensors");
    ASSERT_TRUE(st.ok()) << st.error().message;
    uint64_t read = 0, total = 0, params = 0;
    for (const SafetensorsTensor& t : st->tensors()) {
        ASSERT_EQ(t.dtype_str, "F32") << t.name;
        total += t.n_bytes();
        params += t.n_elements();
        if (t.name == "model.embed_tokens.weight") {
            ASSERT_EQ(t.shape.size(), 2u);
            read += t.shape[1] * sizeof(float);  // one row of [n_vocab, n_embd]
        } else {
            read += t.n_bytes();
        }
    }
    const ModelBytes b = model_bytes(engine().model());
    EXPECT_EQ(b.decode_weight_bytes, static_cast<int64_t>(read));
    EXPECT_EQ(b.total_bytes, static_cast<int64_t>(total));
    EXPECT_EQ(b.n_params, static_cast<int64_t>(params));
    EXPECT_EQ(b.types, "f32");
}

TEST(Bench, BytesOfAQuantizedTiedModelWithBiasesNormsAndWindow) {
    // GGUF q8_0 matrices, fp32 vectors, tied output, qkv biases, q/k norms, sliding window 4, no tokenizer.
    test::TempDir dir("bench");
    test::TinySpec s;
    s.model_type = "qwen3";
    s.tied = s.qkv_bias = s.qk_norm = true;
    s.window = 4;
    const test::HfWeightsMap w = test::make_weights(s);
    const std::string path = dir.str("tiny.gguf");
    test::write_gguf_model(path, s, w, DType::Q8_0);
    auto e = Engine::load(path, {.load_tokenizer = false});
    ASSERT_TRUE(e.ok()) << e.error().message;

    int64_t read = 0, total = 0, params = 0;
    for (const auto& [name, t] : w) {
        const auto n = static_cast<int64_t>(t.data.size());
        const int64_t bytes =
            t.shape.size() == 2 ? static_cast<int64_t>(*dtype_row_bytes(DType::Q8_0, t.data.size())) : n * 4;
        total += bytes;
        params += n;
        read += bytes;  // the tied embedding is the LM head, read whole ...
        if (name == "model.embed_tokens.weight")
            read += static_cast<int64_t>(*dtype_row_bytes(DType::Q8_0, t.shape[1]));  // ... and one row
    }
    const ModelBytes b = model_bytes((*e)->model());
    EXPECT_EQ(b.decode_weight_bytes, read);
    EXPECT_EQ(b.total_bytes, total);
    EXPECT_EQ(b.n_params, params);
    EXPECT_EQ(b.types, "q8_0");

    // Window 4: steps at positions 0..5 attend 1, 2, 3, 4, 4, 4 positions.
    const KvBytes kv = decode_kv_bytes((*e)->model(), 0, 6);
    EXPECT_DOUBLE_EQ(kv.mean_positions, 3.0);
    EXPECT_DOUBLE_EQ(kv.bytes_per_token, 2.0 * s.n_layer * s.kv_dim() * 4 * 3.0);

    auto r = run_bench(**e, small());  // every id is fair game without a tokenizer
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_GT(r->decode.median, 0);
}

TEST(Bench, KvBytesAtTheMeanDecodeDepth) {
    // 2 layers, kv_dim 2 heads x 16; K and V fp32. Steps at positions 0..3 attend 1..4 positions.
    const double row = 2.0 * 2 * 32 * 4;
    KvBytes kv = decode_kv_bytes(engine().model(), 0, 4);
    EXPECT_DOUBLE_EQ(kv.mean_positions, 2.5);
    EXPECT_DOUBLE_EQ(kv.bytes_per_token, row * 2.5);
    kv = decode_kv_bytes(engine().model(), 10, 3);  // positions 10..12 attend 11..13
    EXPECT_DOUBLE_EQ(kv.mean_positions, 12.0);
    EXPECT_DOUBLE_EQ(kv.bytes_per_token, row * 12.0);
}

TEST(Bench, GbpsIsBytesTimesMedianDecodeRate) {
    BenchParams p = small();
    p.depth = 5;
    auto r = run_bench(engine(), p);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->n_ctx, 9);
    EXPECT_DOUBLE_EQ(r->kv.mean_positions, 7.5);  // positions 5..8 attend 6..9
    const double bytes = static_cast<double>(r->model.decode_weight_bytes) + r->kv.bytes_per_token;
    EXPECT_NEAR(r->gbps, bytes * r->decode.median / 1e9, 1e-9 * r->gbps);
}

TEST(Bench, RooflineGivenIsAPercentageAndSkippedIsNull) {
    BenchParams p = small();
    p.roofline_gbps = 10.0;
    auto r = run_bench(engine(), p);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_DOUBLE_EQ(r->roofline_gbps, 10.0);
    EXPECT_NEAR(r->roofline_pct, 100.0 * r->gbps / 10.0, 1e-9 * r->roofline_pct);
    std::string table = bench_table(*r);
    EXPECT_NE(table.find(fmt::format("decode: {:.1f} GB/s = {:.1f}% of given read roofline 10.0 GB/s",
                                     r->gbps, r->roofline_pct)),
              std::string::npos)
        << table;
    auto j = nlohmann::json::parse(bench_json(*r));
    EXPECT_DOUBLE_EQ(j["roofline_gbps"].get<double>(), 10.0);
    EXPECT_DOUBLE_EQ(j["roofline_pct"].get<double>(), r->roofline_pct);

    r = run_bench(engine(), small());  // skipped
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->roofline_gbps, 0);
    j = nlohmann::json::parse(bench_json(*r));
    EXPECT_TRUE(j["roofline_gbps"].is_null());
    EXPECT_TRUE(j["roofline_pct"].is_null());
    table = bench_table(*r);
    EXPECT_NE(table.find("read roofline skipped (--no-roofline)"), std::string::npos) << table;
}

// A model whose bytes per token fit in the last-level cache gets no memory roofline: the fixture
// (~100 KB) reached "158%" of one before. A given roofline is still used, and says so.
TEST(Bench, NoRooflineWhenTheWeightsFitInTheCache) {
    const int64_t llc = cpu::last_level_cache_bytes();
    if (llc <= 0) GTEST_SKIP() << "the last-level cache size is not readable here";
    BenchParams p = small();
    p.measure_roofline = true;
    auto r = run_bench(engine(), p);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(r->fits_in_cache);
    EXPECT_EQ(r->llc_bytes, llc);
    EXPECT_EQ(r->roofline_gbps, 0);
    EXPECT_EQ(r->roofline_pct, 0);
    const std::string table = bench_table(*r);
    EXPECT_NE(table.find("| in cache |"), std::string::npos) << table;
    EXPECT_NE(table.find("last-level cache"), std::string::npos) << table;
    auto j = nlohmann::json::parse(bench_json(*r));
    EXPECT_TRUE(j["roofline_pct"].is_null());
    EXPECT_TRUE(j["fits_in_cache"].get<bool>());
    p.roofline_gbps = 10.0;
    r = run_bench(engine(), p);
    ASSERT_TRUE(r.ok());
    EXPECT_GT(r->roofline_pct, 0);
    EXPECT_NE(bench_table(*r).find("(in cache)"), std::string::npos);
}

TEST(Bench, ReadBandwidthProbeOnASmallBuffer) {
    auto bw = cpu::probe_read_bandwidth(2, size_t{8} << 20, 0.0);
    ASSERT_TRUE(bw.ok()) << bw.error().message;
    EXPECT_GT(bw->median_gbps, 0);
    EXPECT_TRUE(std::isfinite(bw->median_gbps));
    EXPECT_GE(bw->max_gbps, bw->median_gbps);
    EXPECT_EQ(bw->n_threads, 2);
    EXPECT_EQ(bw->bytes, size_t{8} << 20);
    EXPECT_GE(bw->passes, 5);
    EXPECT_FALSE(bw->reduced);
}

TEST(Bench, RateStatsMedianMinMax) {
    RateStats s = rate_stats({2.0, 1.0, 4.0}, 8);  // 4, 8, 2 tok/s
    EXPECT_DOUBLE_EQ(s.median, 4);
    EXPECT_DOUBLE_EQ(s.min, 2);
    EXPECT_DOUBLE_EQ(s.max, 8);
    s = rate_stats({1.0, 2.0}, 4);  // 4, 2: the mean of the middle two
    EXPECT_DOUBLE_EQ(s.median, 3);
}

TEST(Bench, JsonHasTheKeys) {
    auto r = run_bench(engine(), small());
    ASSERT_TRUE(r.ok()) << r.error().message;
    const std::string text = bench_json(*r);
    EXPECT_EQ(text.find('\n'), std::string::npos);
    const auto j = nlohmann::json::parse(text);
    for (const char* key :
         {"prefill_tok_s", "decode_tok_s", "weight_bytes_per_token", "kv_bytes_per_token", "gbps", "n_prompt",
          "n_gen", "depth", "reps", "threads", "model", "prefill_s", "decode_s"})
        EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j["n_prompt"], 8);
    EXPECT_EQ(j["n_gen"], 4);
    EXPECT_EQ(j["reps"], 2);
    EXPECT_EQ(j["model"], kModel);
    EXPECT_EQ(j["weight_bytes_per_token"], r->model.decode_weight_bytes);
    EXPECT_EQ(j["prefill_s"].size(), 2u);
    EXPECT_EQ(j["decode_s"].size(), 2u);
    EXPECT_GT(j["decode_tok_s"].get<double>(), 0);

    const std::string table = bench_table(*r);
    for (const char* col : {"pp8 tok/s", "tg4 tok/s", "bytes/token", "GB/s", "f32"})
        EXPECT_NE(table.find(col), std::string::npos) << col << "\n" << table;
}

TEST(Bench, ReportsTheProcessMemory) {
    auto r = run_bench(engine(), small());
    ASSERT_TRUE(r.ok()) << r.error().message;
    // After the runs: read by run_bench; after the load: only the caller knows, unset here.
    ASSERT_TRUE(r->memory_after_runs.has_value());
    EXPECT_FALSE(r->memory_after_load.has_value());
    const ProcMemory& m = *r->memory_after_runs;
    EXPECT_GT(m.rss, 0u);
    EXPECT_EQ(m.rss, m.anon + m.file + m.shmem);
    EXPECT_GE(m.peak, m.rss);
    auto j = nlohmann::json::parse(bench_json(*r));
    EXPECT_TRUE(j["memory_after_load"].is_null());
    EXPECT_EQ(j["memory_after_runs"]["rss"].get<uint64_t>(), m.rss);
    EXPECT_EQ(j["memory_after_runs"]["anon"].get<uint64_t>(), m.anon);
    EXPECT_EQ(j["memory_after_runs"]["file"].get<uint64_t>(), m.file);
    EXPECT_EQ(j["memory_after_runs"]["peak"].get<uint64_t>(), m.peak);
    std::string table = bench_table(*r);
    EXPECT_NE(table.find("memory after the runs: " + describe_memory(m) + "\n"), std::string::npos) << table;

    r->memory_after_load = ProcMemory{.rss = 3 << 20, .anon = 2 << 20, .file = 1 << 20, .peak = 4 << 20};
    j = nlohmann::json::parse(bench_json(*r));
    EXPECT_EQ(j["memory_after_load"]["rss"].get<uint64_t>(), uint64_t{3} << 20);
    EXPECT_EQ(j["memory_after_load"]["peak"].get<uint64_t>(), uint64_t{4} << 20);
    table = bench_table(*r);
    EXPECT_NE(
        table.find("memory after load: RSS 3.00 MiB (anon 2.00 MiB, file 1.00 MiB), peak 4.00 MiB; after the "
                   "runs: "),
        std::string::npos)
        << table;
}

void expect_error(BenchParams p, const std::string& needle) {
    auto r = run_bench(engine(), p);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
}

TEST(Bench, BadArgumentsAreErrors) {
    BenchParams p = small();
    p.n_prompt = 0;
    expect_error(p, "-p");
    p = small();
    p.n_gen = -1;
    expect_error(p, "-n");
    p = small();
    p.reps = 0;
    expect_error(p, "-r");
    p = small();
    p.depth = -2;
    expect_error(p, "-d");
    p = small();
    p.n_threads = -1;
    expect_error(p, "-t");
    p = small();
    p.n_threads = 1 << 20;
    expect_error(p, "-t");
    p = small();
    p.roofline_gbps = -1.0;
    expect_error(p, "--roofline-gbps must be a positive");
    p.roofline_gbps = std::nan("");
    expect_error(p, "--roofline-gbps must be a positive");
    p = small();
    p.n_prompt = 257;  // the model's context is 256
    expect_error(p, "pass -p 256 or less");
    p = small();
    p.depth = 250;
    p.n_gen = 7;
    expect_error(p, "add up to 256 or less");
    p = small();
    p.n_prompt = 256;
    p.depth = 252;
    p.n_gen = 4;  // both fit: prefill and decode are separate runs from an empty cache
    p.reps = 1;
    EXPECT_TRUE(run_bench(engine(), p).ok());
}

TEST(Bench, ParseDepths) {
    auto one = parse_depths("4096");
    ASSERT_TRUE(one.ok()) << one.error().message;
    EXPECT_EQ(*one, std::vector<int64_t>({4096}));
    auto many = parse_depths("0,4096,32768");
    ASSERT_TRUE(many.ok()) << many.error().message;
    EXPECT_EQ(*many, std::vector<int64_t>({0, 4096, 32768}));
    for (const char* bad : {"", "-1", "1,,2", "4k", "1,", " 1", "99999999999999999999"}) {
        auto r = parse_depths(bad);
        ASSERT_FALSE(r.ok()) << "'" << bad << "'";
        EXPECT_NE(r.error().message.find("is not a token count"), std::string::npos) << r.error().message;
    }
}

int run_cli(const std::string& args, std::string* out) {
    std::FILE* f = ::popen((std::string("'") + PELICAN_BINARY + "' bench " + args + " 2>&1").c_str(), "r");
    if (!f) return -1;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
    const int st = ::pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(Bench, Cli) {
    std::string out;
    ASSERT_EQ(run_cli("-m '" + kModel + "' -p 8 -n 4 -r 1 -t 1 --no-roofline --json", &out), 0) << out;
    const auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["threads"], 1);
    EXPECT_GT(j["decode_tok_s"].get<double>(), 0);
    EXPECT_TRUE(j["roofline_pct"].is_null());
    out.clear();
    ASSERT_EQ(run_cli("-m '" + kModel + "' -p 8 -n 4 -r 1 -t 1 --roofline-gbps 50", &out), 0) << out;
    EXPECT_NE(out.find("% roofline |"), std::string::npos) << out;
    EXPECT_NE(out.find("of given read roofline 50.0 GB/s"), std::string::npos) << out;
    out.clear();
    EXPECT_NE(run_cli("-m '" + kModel + "' --roofline-gbps 50 --no-roofline", &out), 0) << out;
    out.clear();
    EXPECT_EQ(run_cli("-m '" + kModel + "' --roofline-gbps 0", &out), 1) << out;
    EXPECT_NE(out.find("--roofline-gbps must be a positive"), std::string::npos) << out;
    out.clear();
    EXPECT_EQ(run_cli("-m /nonexistent/model.gguf", &out), 1);
    EXPECT_NE(out.find("not found"), std::string::npos) << out;
    out.clear();
    // Two depths: one JSON line each, on one load.
    ASSERT_EQ(run_cli("-m '" + kModel + "' -p 8 -n 4 -r 1 -t 1 -d 0,16 --no-roofline --json", &out), 0)
        << out;
    {
        const size_t nl = out.find('\n');
        ASSERT_NE(nl, std::string::npos) << out;
        const auto j0 = nlohmann::json::parse(out.substr(0, nl)),
                   j1 = nlohmann::json::parse(out.substr(nl + 1));
        EXPECT_EQ(j0["depth"], 0);
        EXPECT_EQ(j1["depth"], 16);
        EXPECT_GT(j1["decode_tok_s"].get<double>(), 0);
    }
    out.clear();
    EXPECT_EQ(run_cli("-m '" + kModel + "' -p 8 -d 0,300 -n 4", &out), 1) << out;  // the context is 256
    EXPECT_NE(out.find("add up to 256 or less"), std::string::npos) << out;
    out.clear();
    EXPECT_EQ(run_cli("-m '" + kModel + "' -d 0,x", &out), 1) << out;
    EXPECT_NE(out.find("'x' is not a token count"), std::string::npos) << out;
    out.clear();
    EXPECT_EQ(run_cli("-m '" + kModel + "' -n 0", &out), 1);
    EXPECT_NE(out.find("-n (decoded tokens) must be positive"), std::string::npos) << out;
}

// --synthetic: a model generated into memory (memfd) instead of a file, benchmarked, named by what it
// is; bad combinations of options are errors.
TEST(Bench, CliSyntheticInMemory) {
    const std::string vocab = std::string(PELICAN_SOURCE_DIR) + "/models/ggml-vocab-llama-spm.gguf";
    const std::string llama =
        R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16})";
    std::string out;
    ASSERT_EQ(run_cli("--synthetic llama --config '" + llama + "' --vocab '" + vocab +
                          "' --type q8_0 -p 8 -n 4 -r 1 -t 1 --device cpu --no-roofline --json",
                      &out),
              0)
        << out;
    const auto j = nlohmann::json::parse(out.substr(out.find('{')));
    EXPECT_EQ(j["model"], "synthetic llama inline q8_0");
    EXPECT_GT(j["decode_tok_s"].get<double>(), 0);
    out.clear();
    EXPECT_EQ(run_cli("--synthetic llama --vocab '" + vocab + "'", &out), 1);
    EXPECT_NE(out.find("--config JSON is required"), std::string::npos) << out;
    out.clear();
    EXPECT_EQ(
        run_cli("-m '" + kModel + "' --synthetic llama --config '" + llama + "' --vocab '" + vocab + "'",
                &out),
        1);
    EXPECT_NE(out.find("either -m MODEL or --synthetic"), std::string::npos) << out;
    out.clear();
    EXPECT_EQ(run_cli("--synthetic nosucharch --config '" + llama + "' --vocab '" + vocab + "'", &out), 1);
    EXPECT_FALSE(out.empty());
}

}  // namespace
}  // namespace pelican
