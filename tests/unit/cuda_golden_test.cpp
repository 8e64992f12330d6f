// The transformers golden fixtures (tests/golden/, tools/golden/make_golden.py) through the CUDA
// pass with the CPU tests' bounds: f32 logits within 1e-4 of the largest logit per position and
// the same 32 greedy tokens (HF folder and `pelican convert` f32 GGUF), the bf16/f16/q8_0/q4_0
// conversions within the derived rho / KLD bounds of model_quant_golden_test.cpp
// (quant_error_model.h), `pelican run --device cuda` streaming transformers' greedy text, seeded
// sampling equal to the CPU's, and `pelican bench` on the GPU. Skipped without a GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_model.h"
#include "cli_test_util.h"
#include "convert/convert.h"
#include "golden_test_util.h"
#include "model/model.h"
#include "model_test_util.h"
#include "pelican/engine.h"
#include "quant_error_model.h"
#include "runtime/bench.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

std::unique_ptr<Engine> load_cuda(const std::string& path, bool tokenizer = true) {
    auto e = Engine::load(path, EngineOptions{.load_tokenizer = tokenizer, .device = Device::kCuda});
    EXPECT_TRUE(e.ok()) << path << ": " << (e.ok() ? "" : e.error().message);
    if (!e.ok()) return nullptr;
    EXPECT_EQ((*e)->device(), Device::kCuda);
    return std::move(e).value();
}

// All logits of both reference sequences (prefill path) within 1e-4 per position.
void check_logits(Engine& engine, const golden::Reference& ref, const std::string& what) {
    auto session = engine.create_session(SessionOptions{.n_ctx = 64});
    ASSERT_TRUE(session.ok()) << session.error().message;
    ASSERT_EQ((*session)->device_name(), "cuda");
    const auto V = static_cast<size_t>(engine.n_vocab());
    for (int s = 0; s < 2; ++s) {
        const auto& toks = ref.tokens[s];
        const auto& want = ref.logits[s];
        ASSERT_EQ(want.size(), toks.size() * V);
        std::vector<float> got(want.size());
        (*session)->reset();
        auto r = (*session)->eval(toks, got);
        ASSERT_TRUE(r.ok()) << r.error().message;
        const double d = golden::row_rel_diff(got, want, V);
        const char* fixture = ::testing::UnitTest::GetInstance()->current_test_info()->value_param();
        fmt::print("golden cuda {} {} tokens_{}: max relative logit error {:.2e}\n", fixture ? fixture : "?",
                   what, s == 0 ? "a" : "b", d);
        EXPECT_LT(d, 1e-4) << what << " sequence " << s << " (" << toks.size() << " positions)";
    }
}

void check_greedy(Engine& engine, const golden::Reference& ref) {
    auto session = engine.create_session(SessionOptions{.n_ctx = 128});
    ASSERT_TRUE(session.ok()) << session.error().message;
    GenerateParams gp;
    gp.max_tokens = static_cast<int32_t>(ref.greedy_tokens.size());
    gp.sampling.temperature = 0;
    gp.ignore_eos = true;
    auto res = (*session)->generate(std::span<const int32_t>(ref.greedy_prompt), gp);
    ASSERT_TRUE(res.ok()) << res.error().message;
    EXPECT_EQ(res->tokens, ref.greedy_tokens);
}

class CudaGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGolden, LogitsAndGreedyMatchTransformers) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const auto dir = golden::kGoldenDir / GetParam();
    auto ref = golden::load_reference(dir);
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    auto engine = load_cuda(dir.string());
    ASSERT_TRUE(engine);
    check_logits(*engine, *ref, "hf");
    check_greedy(*engine, *ref);
}

TEST_P(CudaGolden, SameResultsAfterPelicanConvert) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const auto dir = golden::kGoldenDir / GetParam();
    auto ref = golden::load_reference(dir);
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    test::TempDir tmp("cuda_golden_cv_" + GetParam());
    ConvertOptions opt;
    opt.type = DType::F32;
    opt.emit.progress = false;
    auto cv = convert_model(dir.string(), tmp.str("m.gguf"), opt);
    ASSERT_TRUE(cv.ok()) << cv.error().message;
    auto engine = load_cuda(tmp.str("m.gguf"));
    ASSERT_TRUE(engine);
    check_logits(*engine, *ref, "convert");
    check_greedy(*engine, *ref);
}

// Seeded sampling with penalties: the CUDA session samples on the GPU with the host RNG's draws and
// gives the CPU session's tokens.
TEST_P(CudaGolden, SeededSamplingEqualsTheCpu) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const auto dir = golden::kGoldenDir / GetParam();
    auto ref = golden::load_reference(dir);
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    auto gpu = load_cuda(dir.string());
    auto cpu = Engine::load(dir.string(), EngineOptions{.device = Device::kCpu});
    ASSERT_TRUE(gpu && cpu.ok());
    GenerateParams gp;
    gp.max_tokens = 32;
    gp.ignore_eos = true;
    gp.sampling.seed = 77;
    gp.sampling.repetition_penalty = 1.2f;
    gp.sampling.top_k = 20;
    for (float temp : {0.0f, 0.8f}) {
        gp.sampling.temperature = temp;
        auto a = (*cpu)->create_session({.n_ctx = 128, .n_threads = 2});
        auto b = gpu->create_session({.n_ctx = 128});
        ASSERT_TRUE(a.ok() && b.ok());
        auto ra = (*a)->generate(std::span<const int32_t>(ref->greedy_prompt), gp);
        auto rb = (*b)->generate(std::span<const int32_t>(ref->greedy_prompt), gp);
        ASSERT_TRUE(ra.ok() && rb.ok());
        EXPECT_EQ(rb->tokens, ra->tokens) << "temperature " << temp;
        // A second call reuses the cached prompt on both devices.
        ra = (*a)->generate(std::span<const int32_t>(ref->greedy_prompt), gp);
        rb = (*b)->generate(std::span<const int32_t>(ref->greedy_prompt), gp);
        ASSERT_TRUE(ra.ok() && rb.ok());
        EXPECT_EQ(rb->n_prompt_evaluated, ra->n_prompt_evaluated);
        EXPECT_EQ(rb->tokens, ra->tokens) << "temperature " << temp << ", second call";
    }
}

INSTANTIATE_TEST_SUITE_P(Model, CudaGolden, ::testing::ValuesIn(golden::fixture_names()),
                         [](const auto& info) { return golden::param_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaGolden);

// ---- reduced precision: the CPU test's derived bounds -------------------------------------------

class CudaQuantGolden : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(CudaQuantGolden, LogitsWithinDerivedBounds) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const auto& [fixture, type_name] = GetParam();
    const auto dir = golden::kGoldenDir / fixture;
    auto ref = golden::load_reference(dir);
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    auto type = parse_convert_type(type_name);
    ASSERT_TRUE(type.ok()) << type.error().message;
    test::TempDir tmp("cuda_qgolden_" + fixture + "_" + type_name);
    const std::string gguf = tmp.str("m.gguf");
    ConvertOptions opt;
    opt.type = *type;
    opt.emit.progress = false;
    auto cv = convert_model(dir.string(), gguf, opt);
    ASSERT_TRUE(cv.ok()) << cv.error().message;
    auto rho_model = model_rel_error(gguf);
    ASSERT_TRUE(rho_model.ok()) << rho_model.error().message;
    auto engine = load_cuda(gguf);
    ASSERT_TRUE(engine);
    auto rows = golden::compare_all(*engine, *ref);
    ASSERT_TRUE(rows.ok()) << rows.error().message;
    const double rho_bound = kGain * *rho_model;
    const golden::QuantSummary q = golden::summarize_quant(*rows, engine->n_vocab(), rho_bound, kTieSigmas);
    fmt::print(
        "golden cuda {} {}: rel {:.2e} (bound {:.2e}, model {:.2e}, worst position {:.2e}), kld {:.3g} "
        "(bound "
        "{:.3g}), top-1 {}/{} ({} near-ties excluded)\n",
        fixture, type_name, q.rho, rho_bound, *rho_model, q.max_row, q.mean_kld, q.kld_bound, q.top1,
        rows->size(), q.ties);
    EXPECT_EQ(q.argmax_mismatches, 0)
        << "argmax differs at positions whose top-2 gap is outside the near-tie band";
    EXPECT_LE(q.rho, rho_bound);
    EXPECT_LE(q.mean_kld, q.kld_bound);
}

INSTANTIATE_TEST_SUITE_P(Model, CudaQuantGolden,
                         ::testing::Combine(::testing::ValuesIn(golden::fixture_names()),
                                            ::testing::Values("bf16", "f16", "q8_0", "q4_0")),
                         [](const auto& info) {
                             return golden::param_name(std::get<0>(info.param) + "_" +
                                                       std::get<1>(info.param));
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaQuantGolden);

// ---- the CLI ------------------------------------------------------------------------------------

class CudaRunGolden : public ::testing::TestWithParam<std::string> {};

// As RunGolden (model_quant_golden_test.cpp): stdout is transformers' greedy_text byte for byte (the
// reference tokens' bytes with invalid UTF-8 repaired as runtime/text_stream.h does).
TEST_P(CudaRunGolden, CliStreamsTransformersGreedyText) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const auto dir = golden::kGoldenDir / GetParam();
    auto ref = golden::load_reference(dir);
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    const std::string prompt = ref->info["greedy_prompt_text"].get<std::string>();
    const int n = static_cast<int>(ref->greedy_tokens.size());
    auto engine = Engine::load(dir.string(), EngineOptions{.device = Device::kCpu});
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    const std::string want_text = ref->info["greedy_text"].get<std::string>();
    test::TempDir tmp("cuda_run_golden_" + GetParam());
    const auto r = test::run_pelican_in({"run", "-m", dir.string(), "-p", prompt, "-n", std::to_string(n),
                                         "--temp", "0", "--ignore-eos", "--device", "cuda", "-v"},
                                        tmp);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, want_text) << "stdout: " << ::testing::PrintToString(r.out);
    EXPECT_NE(r.err.find(fmt::format("generated {} tokens, decode {} forward passes", n, n - 1)),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(", cuda, greedy, stop: max tokens"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("device cuda: "), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Model, CudaRunGolden, ::testing::ValuesIn(golden::fixture_names()),
                         [](const auto& info) { return golden::param_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaRunGolden);

TEST(CudaBench, ApiAndCli) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    const std::string model = (golden::kGoldenDir / "llama").string();
    auto engine = load_cuda(model);
    ASSERT_TRUE(engine);
    BenchParams p{.n_prompt = 16, .n_gen = 8, .depth = 4, .reps = 2, .measure_roofline = true};
    auto r = run_bench(*engine, p);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->device.rfind("cuda: ", 0), 0u) << r->device;
    EXPECT_EQ(r->kv_type, "f32");  // f32 fixture: f32 cache
    EXPECT_EQ(r->model.decode_weight_bytes, static_cast<int64_t>(engine->gpu_model()->decode_read_bytes()));
    const KvBytes kv = decode_kv_bytes(engine->model(), 4, 8, 4);
    EXPECT_DOUBLE_EQ(r->kv.bytes_per_token, kv.bytes_per_token);
    EXPECT_GT(r->prefill.median, 0);
    EXPECT_GT(r->decode.median, 0);
    EXPECT_GT(r->roofline_gbps, 100) << "a GPU copies faster than 100 GB/s";
    EXPECT_NE(bench_table(*r).find("| device |"), std::string::npos) << bench_table(*r);
    fmt::print("{}", bench_table(*r));

    test::TempDir tmp("cuda_bench_cli");
    const auto c = test::run_pelican_in({"bench", "-m", model, "-p", "16", "-n", "8", "-r", "1", "--device",
                                         "cuda", "--no-roofline", "--json"},
                                        tmp);
    ASSERT_EQ(c.status, 0) << c.err;
    const auto j = nlohmann::json::parse(c.out);
    EXPECT_EQ(j["device"].get<std::string>().rfind("cuda: ", 0), 0u) << c.out;
    EXPECT_GT(j["decode_tok_s"].get<double>(), 0);
}

}  // namespace
}  // namespace pelican
