// Golden tests against Hugging Face transformers: every fixture under tests/golden/ (made by
// tools/golden/make_golden.py) is an HF folder plus reference logits at every position of two token
// sequences and a greedy continuation. pelican must match the logits (f32, 1e-4 relative to the
// largest logit) and produce the same greedy tokens; the fixture is also converted to GGUF (q/k
// permuted for llama-family archs) and must give the same logits from there.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "convert/convert.h"
#include "core/mmap_file.h"
#include "formats/safetensors.h"
#include "golden_test_util.h"
#include "model/model.h"
#include "model_test_util.h"
#include "pelican/engine.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(PELICAN_SOURCE_DIR) / "tests" / "golden";

std::vector<std::string> fixtures() {
    std::vector<std::string> out;
    std::error_code ec;
    if (!fs::is_directory(kGolden, ec)) return out;
    for (const auto& e : fs::directory_iterator(kGolden))
        if (fs::exists(e.path() / "reference.safetensors")) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

template <typename T>
std::vector<T> read_vec(const SafetensorsFile& f, const std::string& name) {
    const SafetensorsTensor* t = f.find(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return {};
    std::vector<T> v(t->data.size() / sizeof(T));
    std::memcpy(v.data(), t->data.data(), v.size() * sizeof(T));
    return v;
}

using golden::row_rel_diff;

class Golden : public ::testing::TestWithParam<std::string> {};

void check_logits(Engine& engine, const SafetensorsFile& ref, const std::string& what) {
    auto session = engine.create_session(SessionOptions{.n_ctx = 64, .n_threads = 2});
    ASSERT_TRUE(session.ok()) << session.error().message;
    const auto V = static_cast<size_t>(engine.n_vocab());
    for (const char* seq : {"a", "b"}) {
        const auto toks = read_vec<int32_t>(ref, std::string("tokens_") + seq);
        const auto want = read_vec<float>(ref, std::string("logits_") + seq);
        ASSERT_EQ(want.size(), toks.size() * V);
        std::vector<float> got(want.size());
        (*session)->reset();
        auto r = (*session)->eval(toks, got);
        ASSERT_TRUE(r.ok()) << r.error().message;
        const double d = row_rel_diff(got, want, V);
        EXPECT_LT(d, 1e-4) << what << " tokens_" << seq << " (" << toks.size() << " positions)";
        ::testing::Test::RecordProperty(what + "_" + seq, fmt::format("{:.2e}", d));
        const char* fixture = ::testing::UnitTest::GetInstance()->current_test_info()->value_param();
        fmt::print("golden {} {} tokens_{}: max relative logit error {:.2e}\n", fixture ? fixture : "?", what,
                   seq, d);
    }
}

TEST_P(Golden, LogitsAndGreedyMatchTransformers) {
    const fs::path dir = kGolden / GetParam();
    auto ref = SafetensorsFile::open((dir / "reference.safetensors").string());
    ASSERT_TRUE(ref.ok()) << ref.error().message;
    auto engine = Engine::load(dir.string());
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    check_logits(**engine, *ref, "hf");

    // Greedy continuation: same prompt tokens (also checks the tokenizer), same 32 tokens.
    auto info = read_text_file((dir / "reference.json").string());
    ASSERT_TRUE(info.ok());
    const auto j = nlohmann::json::parse(*info);
    const auto prompt = read_vec<int32_t>(*ref, "greedy_prompt");
    const auto want = read_vec<int32_t>(*ref, "greedy_tokens");
    auto ids = (*engine)->tokenize(j["greedy_prompt_text"].get<std::string>());
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, prompt);
    auto session = (*engine)->create_session(SessionOptions{.n_ctx = 128, .n_threads = 2});
    ASSERT_TRUE(session.ok());
    GenerateParams gp;
    gp.max_tokens = static_cast<int32_t>(want.size());
    gp.sampling.temperature = 0;
    gp.sampling.repetition_penalty = 1;
    auto res = (*session)->generate(std::span<const int32_t>(prompt), gp);
    ASSERT_TRUE(res.ok()) << res.error().message;
    EXPECT_EQ(res->tokens, want);
}

TEST_P(Golden, SameLogitsFromGguf) {
    // Convert the fixture's f32 weights to a GGUF the way llama.cpp does, then compare.
    const fs::path dir = kGolden / GetParam();
    auto ref = SafetensorsFile::open((dir / "reference.safetensors").string());
    ASSERT_TRUE(ref.ok());
    auto hf = Model::load(dir.string());
    ASSERT_TRUE(hf.ok()) << hf.error().message;
    const HfConfig& c = *(*hf)->hf_config();
    auto st = SafetensorsFile::open((dir / "model.safetensors").string());
    ASSERT_TRUE(st.ok());
    test::TinySpec s;
    s.model_type = c.model_type;
    s.n_embd = static_cast<int>(c.hidden_size);
    s.n_layer = static_cast<int>(c.num_hidden_layers);
    s.n_head = static_cast<int>(c.num_attention_heads);
    s.n_kv = static_cast<int>(c.num_key_value_heads);
    s.head_dim = static_cast<int>(c.head_dim);
    s.n_ff = static_cast<int>(c.intermediate_size);
    s.n_vocab = static_cast<int>(c.vocab_size);
    s.theta = c.rope_theta;
    s.eps = c.rms_norm_eps;
    s.max_pos = static_cast<int>(c.max_position_embeddings);
    s.embd_mul = static_cast<float>(c.embedding_multiplier);
    s.resid_mul = static_cast<float>(c.residual_multiplier);
    s.attn_mul = static_cast<float>(c.attention_multiplier.value_or(0));
    s.logits_scaling = static_cast<float>(c.logits_scaling);
    test::HfWeightsMap w;
    for (const auto& t : st->tensors()) {
        ASSERT_EQ(t.st_dtype, StDType::F32) << t.name;
        test::HfTensor ht;
        ht.shape = t.shape;
        ht.data.resize(t.n_elements());
        std::memcpy(ht.data.data(), t.data.data(), t.data.size());
        w[t.name] = std::move(ht);
    }
    test::TempDir tmp("golden_" + GetParam());
    test::write_gguf_model(tmp.str("m.gguf"), s, w, DType::F32, {}, true,
                           c.rope_scaling ? &*c.rope_scaling : nullptr);
    auto engine = Engine::load(tmp.str("m.gguf"), EngineOptions{.load_tokenizer = false});
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    check_logits(**engine, *ref, "gguf");
}

TEST_P(Golden, SameResultsAfterPelicanConvert) {
    // The fixture through `pelican convert` (f32): same logits, and the GGUF's own tokenizer gives
    // the same greedy run.
    const fs::path dir = kGolden / GetParam();
    auto ref = SafetensorsFile::open((dir / "reference.safetensors").string());
    ASSERT_TRUE(ref.ok());
    test::TempDir tmp("golden_cv_" + GetParam());
    ConvertOptions opt;
    opt.type = DType::F32;
    opt.emit.progress = false;
    auto cv = convert_model(dir.string(), tmp.str("m.gguf"), opt);
    ASSERT_TRUE(cv.ok()) << cv.error().message;
    auto engine = Engine::load(tmp.str("m.gguf"));
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    check_logits(**engine, *ref, "convert");
    const auto prompt = read_vec<int32_t>(*ref, "greedy_prompt");
    const auto want = read_vec<int32_t>(*ref, "greedy_tokens");
    auto session = (*engine)->create_session(SessionOptions{.n_ctx = 128, .n_threads = 2});
    ASSERT_TRUE(session.ok());
    GenerateParams gp;
    gp.max_tokens = static_cast<int32_t>(want.size());
    gp.sampling.temperature = 0;
    auto res = (*session)->generate(std::span<const int32_t>(prompt), gp);
    ASSERT_TRUE(res.ok()) << res.error().message;
    EXPECT_EQ(res->tokens, want);
}

INSTANTIATE_TEST_SUITE_P(Model, Golden, ::testing::ValuesIn(fixtures()), [](const auto& info) {
    std::string n = info.param;
    for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
});

// The parameterised tests above silently vanish when fixtures are missing; this one fails instead.
TEST(GoldenFixtures, AllPresent) {
    const std::vector<std::string> expected = {
        "granite", "llama", "llama-rope-llama3", "llama-rope-yarn", "mistral", "qwen2", "qwen3"};
    EXPECT_EQ(fixtures(), expected)
        << "tests/golden/ is incomplete: regenerate with tools/golden/make_golden.py";
}

}  // namespace
}  // namespace pelican
