// Golden tests of reduced-precision weights: every fixture under tests/golden/ goes through
// `pelican convert` to bf16, f16, q8_0 and q4_0, and its logits at every position of both
// reference sequences are compared with transformers' (float64) logits:
//   rho  = ||got - ref||_2 / ||ref||_2 over all positions  <= rho_bound (derived below)
//   mean KL(softmax(ref) || softmax(got))                   <= kld_bound (derived below)
//   same argmax wherever the reference's top-2 gap is not a near-tie at the bound's noise level.
// The figures are printed ("golden llama q8_0: ..."). See "Error model" in quant_error_model.h for
// the bounds.
// Also: `pelican run` (the real binary) streams transformers' greedy continuation byte for byte.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <numbers>
#include <optional>

#include <fmt/format.h>

#include "convert/convert.h"
#include "formats/gguf.h"
#include "cli_test_util.h"
#include "golden_test_util.h"
#include "model_test_util.h"
#include "quant_error_model.h"
#include "pelican/engine.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

// ---- Test ----------------------------------------------------------------------------------------

class QuantGolden : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(QuantGolden, LogitsWithinDerivedBounds) {
    const auto& [fixture, type_name] = GetParam();
    const auto dir = golden::kGoldenDir / fixture;
    auto ref = golden::load_reference(dir);
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    auto type = parse_convert_type(type_name);
    ASSERT_TRUE(type.ok()) << type.error().message;

    test::TempDir tmp("qgolden_" + fixture + "_" + type_name);
    const std::string gguf = tmp.str("m.gguf");
    ConvertOptions opt;
    opt.type = *type;
    opt.emit.progress = false;
    auto cv = convert_model(dir.string(), gguf, opt);
    ASSERT_TRUE(cv.ok()) << cv.error().message;
    auto rho_model = model_rel_error(gguf);
    ASSERT_TRUE(rho_model.ok()) << rho_model.error().message;
    auto engine = Engine::load(gguf);
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    auto rows = golden::compare_all(**engine, *ref);
    ASSERT_TRUE(rows.ok()) << rows.error().message;

    const double rho_bound = kGain * *rho_model;
    const golden::QuantSummary q =
        golden::summarize_quant(*rows, (*engine)->n_vocab(), rho_bound, kTieSigmas);
    EXPECT_EQ(q.argmax_mismatches, 0)
        << "argmax differs at positions whose top-2 gap is outside the near-tie band";
    const double rho = q.rho, max_row = q.max_row, mean_kld = q.mean_kld, kld_bound = q.kld_bound;
    const int top1 = q.top1, ties = q.ties;
    fmt::print(
        "golden {} {}: rel {:.2e} (bound {:.2e}, model {:.2e}, worst position {:.2e}), kld {:.3g} "
        "(bound {:.3g}), top-1 {}/{} ({} near-ties excluded from the argmax check)\n",
        fixture, type_name, rho, rho_bound, *rho_model, max_row, mean_kld, kld_bound, top1, rows->size(),
        ties);
    fmt::print("golden kld {} {}: {:.3e}\n", fixture, type_name, mean_kld);
    EXPECT_LE(rho, rho_bound);
    EXPECT_LE(mean_kld, kld_bound);
    RecordProperty("rel", fmt::format("{:.3e}", rho));
    RecordProperty("kld", fmt::format("{:.3e}", mean_kld));
    RecordProperty("top1", fmt::format("{}/{}", top1, rows->size()));
}

INSTANTIATE_TEST_SUITE_P(Model, QuantGolden,
                         ::testing::Combine(::testing::ValuesIn(golden::fixture_names()),
                                            ::testing::Values("bf16", "f16", "q8_0", "q4_0")),
                         [](const auto& info) {
                             return golden::param_name(std::get<0>(info.param) + "_" +
                                                       std::get<1>(info.param));
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QuantGolden);

// ---- `pelican run` end to end ---------------------------------------------------------------------

class RunGolden : public ::testing::TestWithParam<std::string> {};

// `pelican run` on the HF fixture folder streams transformers' greedy continuation. transformers'
// greedy_text is the byte-level decode of the 32 tokens with invalid UTF-8 replaced (each maximal
// ill-formed subpart -> U+FFFD, Rust's from_utf8_lossy); pelican streams well-formed UTF-8 only,
// repaired the same way (runtime/text_stream.h), so stdout must be greedy_text byte for byte.
TEST_P(RunGolden, CliStreamsTransformersGreedyText) {
    const auto dir = golden::kGoldenDir / GetParam();
    auto ref = golden::load_reference(dir);
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    const std::string prompt = ref->info["greedy_prompt_text"].get<std::string>();
    const std::string want_text = ref->info["greedy_text"].get<std::string>();
    const int n = static_cast<int>(ref->greedy_tokens.size());

    // The prompt as `pelican run` tokenizes it (add_special and parse_special on; the fixture's
    // tokenizer adds no BOS), and the raw bytes of the reference continuation.
    auto engine = Engine::load(dir.string());
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    auto ids = (*engine)->tokenize(prompt, /*add_special=*/true, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.error().message;
    EXPECT_EQ(*ids, ref->greedy_prompt);
    const std::string want_bytes = (*engine)->tokenizer()->decode(ref->greedy_tokens);
    ASSERT_EQ(golden::utf8_lossy(want_bytes), want_text) << "fixture tokenizer decodes differently";

    test::TempDir tmp("run_golden_" + GetParam());
    const auto r = test::run_pelican_in({"run", "-m", dir.string(), "-p", prompt, "-n", std::to_string(n),
                                         "--temp", "0", "--ignore-eos", "-t", "2"},
                                        tmp);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, want_text) << "stdout: " << ::testing::PrintToString(r.out);
    // stderr's summary: the whole prompt was evaluated and n tokens generated.
    EXPECT_NE(r.err.find(fmt::format("prompt {} tokens", ref->greedy_prompt.size())), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(fmt::format("generated {} tokens, decode {} forward passes", n, n - 1)),
              std::string::npos)
        << r.err;
}

INSTANTIATE_TEST_SUITE_P(Model, RunGolden, ::testing::ValuesIn(golden::fixture_names()),
                         [](const auto& info) { return golden::param_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RunGolden);

}  // namespace
}  // namespace pelican
