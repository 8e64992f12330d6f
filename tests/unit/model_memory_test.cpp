// What loading a model for the CPU costs in resident memory (issue 16): the matrices are copied
// (Q4_0/Q8_0 repacked, the rest into huge-page memory) and the mapped pages they came from are
// released, so the process holds the weights once, during the load as after it. The bound is
// RSS growth <= 1.1 x the model's file bytes + kSlack; before the pages were released it was ~2x
// (the copies plus the mapped file). Each TEST runs in its own process (gtest_discover_tests), so
// the figures are this model's alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "convert/convert.h"
#include "convert_test_util.h"
#include "core/proc_memory.h"
#include "core/thread_pool.h"
#include "model/forward.h"
#include "runtime/forward_factory.h"
#include "model/model.h"
#include "model_test_util.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;

// Growth beyond the weights that is not a second copy of them: the parsed metadata (the vocabulary
// as GgufValues, ~100 bytes per entry: 8192 tokens x 3 arrays ~2.4 MiB), the loader's code pages
// touched for the first time, malloc bookkeeping, and per tensor at most two pages that straddle it
// and a neighbour (kept mapped: ~200 tensors x 8 KiB ~1.6 MiB).
constexpr double kSlack = 8.0 * (1 << 20);

const std::string kVocab = (test::kSource / "models" / "pelican-tiny.gguf").string();
const std::string kSmallMoe = (test::kSource / "models" / "pelican-small-moe").string();

// ~60 MB in Q4_0: 8 layers of 1024 x 2816, a Q6_K head and Q4_0 embedding over 8192 tokens.
constexpr const char* kConfig = R"({"hidden_size": 1024, "intermediate_size": 2816,
    "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4,
    "rope_theta": 10000.0, "rms_norm_eps": 1e-5})";

ProcMemory memory() {
    auto m = read_proc_memory();
    EXPECT_TRUE(m.ok()) << m.error().message;
    return m.ok() ? *m : ProcMemory{};
}

double mib(double b) { return b / (1 << 20); }

uint64_t bytes_of(const std::string& path) {
    if (!fs::is_directory(path)) return fs::file_size(path);
    uint64_t n = 0;
    for (const auto& e : fs::directory_iterator(path))
        if (e.path().extension() == ".safetensors") n += e.file_size();
    return n;
}

// Loads path for the CPU and checks the RSS growth (now and at the peak) against the bound.
std::unique_ptr<Model> load_within_bound(const std::string& path) {
    const double file = static_cast<double>(bytes_of(path));
    Status reset = reset_peak_memory();
    EXPECT_TRUE(reset.ok()) << reset.error().message;
    const ProcMemory before = memory();
    auto m = Model::load(path);
    EXPECT_TRUE(m.ok()) << m.error().message;
    if (!m.ok()) return nullptr;
    const ProcMemory after = memory();
    const double growth = static_cast<double>(after.rss) - static_cast<double>(before.rss);
    const double peak = static_cast<double>(after.peak) - static_cast<double>(before.rss);
    const double bound = 1.1 * file + kSlack;
    std::printf("%s: %.1f MiB of weights file(s); RSS +%.1f MiB, peak +%.1f MiB (bound %.1f MiB); %s\n",
                path.c_str(), mib(file), mib(growth), mib(peak), mib(bound), describe_memory(after).c_str());
    EXPECT_LE(growth, bound) << "RSS grew " << mib(growth) << " MiB loading " << mib(file)
                             << " MiB: " << describe_memory(after);
    EXPECT_LE(peak, bound) << "peak RSS grew " << mib(peak) << " MiB loading " << mib(file) << " MiB";
    return std::move(m).value();
}

std::vector<int32_t> tokens(int n, int64_t n_vocab) {
    std::mt19937 rng(5);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
    return t;
}

// The CPU pass of the model (a SequencePass on the CPU executor).
std::vector<float> logits(const Model& m, const std::vector<int32_t>& toks) {
    auto f = create_forward_pass(m, ForwardOptions{.n_ctx = 16}, Device::kCpu, nullptr);
    EXPECT_TRUE(f.ok()) << f.error().message;
    if (!f.ok()) return {};
    ThreadPool pool(2);
    std::vector<float> out(toks.size() * static_cast<size_t>(m.hparams().n_vocab));
    Status s = (*f)->eval(toks, 0, pool, out);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return out;
}

// The repacked (AVX-512) kernels sum the same integer block products in another order than the
// row kernels: fp32 rounding, ~1e-6 of the magnitude per matmul. That much can move an activation
// across a rounding boundary of the next matmul's 8-bit activation quantization (one step = 1/254
// of a block's largest value), and random synthetic weights amplify such a step layer by layer:
// measured on 2026-12-02, the q/k/v rows differ by 3e-7, the first layer's MLP output by 5e-5 (one
// flipped step), the logits by 0.8-1.3 %. Weights read from wrong pages differ by O(1) (the
// logits' own magnitude). Without a repack the kernels and bytes are the same: exact.
void expect_same_logits(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    if (cpu::active_isa() == cpu::Isa::kAvx512)
        EXPECT_LT(test::max_rel_diff(got, want), 5e-2);
    else
        EXPECT_EQ(got, want);
}

TEST(ModelMemory, Q4_0GgufLoadsForTheCpuWithoutASecondCopy) {
    test::TempDir dir("rss");
    const std::string path = dir / "q4_0.gguf";
    auto w = test::write_synthetic("llama", kConfig, path, DType::Q4_0, 11, kVocab);
    ASSERT_TRUE(w.ok()) << w.error().message;
    ASSERT_GE(fs::file_size(path), uint64_t{40} << 20);

    std::unique_ptr<Model> m = load_within_bound(path);
    ASSERT_TRUE(m);
    const ProcMemory loaded = memory();
    const auto toks = tokens(8, m->hparams().n_vocab);
    const std::vector<float> got = logits(*m, toks);
    // Nothing reads the released pages again: a forward pass maps back file pages only for the
    // embedding rows it looks up (the embedding stays a view), never more than the embedding.
    const ProcMemory ran = memory();
    const double embd = static_cast<double>(m->weights().tok_embd.n_bytes());
    EXPECT_LE(static_cast<double>(ran.file) - static_cast<double>(loaded.file), embd + kSlack)
        << describe_memory(loaded) << " -> " << describe_memory(ran);

    // Same logits as the load that keeps every matrix a view of the mapping (the GPU's).
    auto views = Model::load(path, ModelLoadOptions{.allow_repack = false});
    ASSERT_TRUE(views.ok()) << views.error().message;
    expect_same_logits(got, logits(**views, toks));
}

TEST(ModelMemory, TiedHeadCopyServesTheEmbeddingLookups) {
    test::TempDir dir("rss_tied");
    const std::string cfg = R"({"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": true})";
    for (DType t : {DType::Q8_0, DType::F16}) {
        SCOPED_TRACE(dtype_name(t));
        const std::string path =
            dir / fmt::format("tied-{}.gguf", dtype_name(t));  // outputs are never replaced
        auto w = test::write_synthetic("qwen2", cfg, path, t, 3, kVocab);
        ASSERT_TRUE(w.ok()) << w.error().message;
        auto m = Model::load(path);
        ASSERT_TRUE(m.ok()) << m.error().message;
        const ModelWeights& mw = (*m)->weights();
        ASSERT_TRUE(mw.tied_output);
        if (mw.output.layout() == cpu::Weight::Layout::kRows) {  // not repacked: one copy serves both
            EXPECT_TRUE(mw.output.owns_data());
            EXPECT_EQ(mw.tok_embd.data, mw.output.data());
        }
        auto views = Model::load(path, ModelLoadOptions{.allow_repack = false});
        ASSERT_TRUE(views.ok()) << views.error().message;
        EXPECT_FALSE((*views)->weights().output.owns_data());
        EXPECT_NE((*views)->weights().tok_embd.data, (*m)->weights().tok_embd.data);
        const auto toks = tokens(8, (*m)->hparams().n_vocab);
        expect_same_logits(logits(**m, toks), logits(**views, toks));
    }
}

TEST(ModelMemory, HybridHfFolderLoadsForTheCpuWithoutASecondCopy) {
    // BF16 safetensors in 4 shards; fused routed experts sliced per expert, per-expert MTP experts.
    std::unique_ptr<Model> m = load_within_bound(kSmallMoe);
    ASSERT_TRUE(m);
    const auto toks = tokens(8, m->hparams().n_vocab);
    const std::vector<float> got = logits(*m, toks);
    auto views = Model::load(kSmallMoe, ModelLoadOptions{.allow_repack = false});
    ASSERT_TRUE(views.ok()) << views.error().message;
    expect_same_logits(got, logits(**views, toks));
}

TEST(ModelMemory, HybridGgufLoadsForTheCpuWithoutASecondCopy) {
    // llama.cpp's layout: experts as ffn_{gate,up,down}_exps [E, ...], sliced per expert.
    test::TempDir dir("rss_hybrid");
    const std::string path = dir / "small-moe-q8_0.gguf";
    auto c = convert_model(kSmallMoe, path, test::quiet(DType::Q8_0));
    ASSERT_TRUE(c.ok()) << c.error().message;
    std::unique_ptr<Model> m = load_within_bound(path);
    ASSERT_TRUE(m);
    const auto toks = tokens(8, m->hparams().n_vocab);
    const std::vector<float> got = logits(*m, toks);
    auto views = Model::load(path, ModelLoadOptions{.allow_repack = false});
    ASSERT_TRUE(views.ok()) << views.error().message;
    expect_same_logits(got, logits(**views, toks));
}

}  // namespace
}  // namespace pelican
