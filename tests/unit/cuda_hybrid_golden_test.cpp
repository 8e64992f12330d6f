// The hybrid Qwen3.5 fixtures (tests/golden/hybrid: qwen3_5_moe, qwen3_5; see hybrid_golden_test.cpp)
// on the GPU pass (backend/cuda/cuda_hybrid_forward.h): the same bounds as on the CPU — every logit
// within 1e-4 of transformers' (float64) relative to its row's largest logit, through micro-batched
// prefill and through the one-token graph step, and the 32 greedy tokens identical. Also: a rewind
// (eval at an earlier position replays the kept prefix) gives the first run's logits again.
// The fixtures are F32 models, so the pass keeps an F32 KV cache (as CudaForward does).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "backend/cuda/cuda_hybrid_forward.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_model.h"
#include "golden_test_util.h"
#include "model/model.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;

const fs::path kHybridDir = golden::kGoldenDir / "hybrid";

std::vector<std::string> hybrid_fixtures() {
    std::vector<std::string> out;
    std::error_code ec;
    if (!fs::is_directory(kHybridDir, ec)) return out;
    for (const auto& e : fs::directory_iterator(kHybridDir))
        if (fs::exists(e.path() / "reference.safetensors")) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

class CudaHybridGolden : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
        dir_ = kHybridDir / GetParam();
        auto st = SafetensorsFile::open((dir_ / "reference.safetensors").string());
        ASSERT_TRUE(st.ok()) << st.error().message;
        ref_ = std::make_unique<SafetensorsFile>(std::move(st).value());
        auto m = Model::load(dir_.string(), ModelLoadOptions{.allow_repack = false});
        ASSERT_TRUE(m.ok()) << m.error().message;
        model_ = std::move(m).value();
        auto gm = cuda::GpuModel::upload(*model_, /*log_progress=*/false);
        ASSERT_TRUE(gm.ok()) << gm.error().message;
        gm_ = std::shared_ptr<const cuda::GpuModel>(std::move(gm).value());
        V_ = static_cast<size_t>(model_->hparams().n_vocab);
    }
    template <typename T>
    std::vector<T> vec(const std::string& name) {
        auto v = golden::tensor_values<T>(*ref_, name);
        EXPECT_FALSE(v.empty()) << "reference.safetensors has no " << name;
        return v;
    }
    std::unique_ptr<cuda::CudaHybridForward> pass() {
        auto f = cuda::CudaHybridForward::create(gm_, ForwardOptions{.n_ctx = 512, .n_batch = 512});
        EXPECT_TRUE(f.ok()) << f.error().message;
        return f.ok() ? std::move(f).value() : nullptr;
    }
    // Every token's logits: one eval with all_logits (micro-batches of 8), or token by token through
    // the one-token step (graph) reading last_logits().
    std::vector<float> run(const std::vector<int32_t>& toks, bool one_by_one) {
        auto f = pass();
        if (!f) return {};
        ThreadPool pool(1);
        std::vector<float> got(toks.size() * V_);
        if (!one_by_one) {
            auto s = f->eval(toks, 0, pool, got);
            EXPECT_TRUE(s.ok()) << s.error().message;
            return got;
        }
        EXPECT_TRUE(f->uses_graph());
        for (size_t t = 0; t < toks.size(); ++t) {
            auto s = f->eval(std::span(&toks[t], 1), static_cast<int64_t>(t), pool);
            EXPECT_TRUE(s.ok()) << s.error().message;
            const auto l = f->last_logits();
            std::copy(l.begin(), l.end(), got.begin() + static_cast<std::ptrdiff_t>(t * V_));
        }
        return got;
    }
    void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
        ASSERT_EQ(got.size(), want.size()) << what;
        const double d = golden::row_rel_diff(got, want, V_);
        fmt::print("cuda hybrid golden {} {}: max relative logit error {:.2e}\n", GetParam(), what, d);
        EXPECT_LT(d, 1e-4) << what;
    }

    fs::path dir_;
    std::unique_ptr<SafetensorsFile> ref_;
    std::unique_ptr<Model> model_;
    std::shared_ptr<const cuda::GpuModel> gm_;
    size_t V_ = 0;
};

TEST_P(CudaHybridGolden, LogitsMatchTransformers) {
    for (const char* seq : {"a", "b"}) {
        const auto toks = vec<int32_t>(std::string("tokens_") + seq);
        const auto want = vec<float>(std::string("logits_") + seq);
        expect_close(run(toks, false), want, std::string("tokens_") + seq + " micro-batched prefill");
        expect_close(run(toks, true), want, std::string("tokens_") + seq + " token by token (graph)");
    }
    expect_close(run(vec<int32_t>("greedy_prompt"), false), vec<float>("greedy_prompt_logits"),
                 "prompt prefill");
}

TEST_P(CudaHybridGolden, GreedyMatchesTransformers) {
    const auto prompt = vec<int32_t>("greedy_prompt");
    const auto want = vec<int32_t>("greedy_tokens");
    auto f = pass();
    ASSERT_TRUE(f);
    ThreadPool pool(1);
    ASSERT_TRUE(f->eval(prompt, 0, pool).ok());
    std::vector<int32_t> got;
    std::vector<float> steps;
    for (size_t i = 0; i < want.size(); ++i) {
        const auto l = f->last_logits();
        steps.insert(steps.end(), l.begin(), l.end());
        const auto tok = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
        got.push_back(tok);
        if (i + 1 < want.size()) {
            ASSERT_TRUE(f->eval(std::span(&tok, 1), static_cast<int64_t>(prompt.size() + i), pool).ok());
        }
    }
    EXPECT_EQ(got, want);
    expect_close(steps, vec<float>("greedy_step_logits"), "greedy decode steps");
}

// eval at an earlier position resets the recurrent state and replays the kept prefix.
TEST_P(CudaHybridGolden, RewindReplaysThePrefix) {
    const auto toks = vec<int32_t>("tokens_a");
    ASSERT_GE(toks.size(), 20u);
    auto f = pass();
    ASSERT_TRUE(f);
    ThreadPool pool(1);
    std::vector<float> first(toks.size() * V_), again(5 * V_);
    ASSERT_TRUE(f->eval(toks, 0, pool, first).ok());
    ASSERT_TRUE(f->eval(std::span(toks).subspan(10, 5), 10, pool, again).ok());
    EXPECT_EQ(f->n_past(), 15);
    const std::vector<float> want(first.begin() + static_cast<std::ptrdiff_t>(10 * V_),
                                  first.begin() + static_cast<std::ptrdiff_t>(15 * V_));
    const double d = golden::row_rel_diff(again, want, V_);
    EXPECT_LT(d, 1e-5) << "rewound logits differ from the first run (micro-batches split differently)";
    // Positions must follow on: skipping ahead is an error, and the pass stays usable.
    EXPECT_FALSE(f->eval(std::span(toks).subspan(0, 1), 40, pool).ok());
    EXPECT_TRUE(f->eval(std::span(toks).subspan(15, 1), 15, pool).ok());
}

INSTANTIATE_TEST_SUITE_P(Model, CudaHybridGolden, ::testing::ValuesIn(hybrid_fixtures()),
                         [](const auto& info) { return golden::param_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CudaHybridGolden);

}  // namespace
}  // namespace pelican
