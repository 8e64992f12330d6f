// GGUF for the hybrid Qwen3.5 archs: `pelican convert` writes a tiny random HF folder (made by the
// test) as GGUF with llama.cpp's names (qwen35moe / qwen35: blk.N.attn_qkv, ssm_a, ssm_conv1d,
// ffn_gate_exps, nextn.eh_proj, ...) and transforms (1 + w norms, A = -exp(A_log), tiled value
// heads); loading that GGUF gives the same logits (main pass and MTP) as loading the HF folder.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "convert/convert.h"
#include "formats/gguf.h"
#include "golden_test_util.h"
#include "hybrid_test_util.h"
#include "executor_test_util.h"
#include "model/model.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using test::HybridSpec;

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return t;
}

struct Logits {
    std::vector<float> main, mtp;
};

// All logits of `toks` (CPU executor, one step), then the MTP logits over the whole sequence (one MTP step).
Logits run(const Model& m, const std::vector<int32_t>& toks, int64_t vocab, bool mtp) {
    EXPECT_EQ(m.weights().mtp.present, mtp);
    EXPECT_EQ(m.hparams().n_vocab, vocab);
    auto r = test::run_executor(m, toks, mtp ? std::span(toks).subspan(1) : std::span<const int32_t>{});
    return Logits{std::move(r.main), std::move(r.mtp)};
}

void check_round_trip(HybridSpec s, const std::string& tag, bool unfuse) {
    s.n_vocab = 520;  // the golden tokenizer has 517 tokens
    const auto w = test::hybrid_weights(s);
    test::TempDir dir(tag);
    const std::string hf = dir.str("hf"), gguf = dir.str("model.gguf");
    fs::create_directories(hf);
    test::write_hybrid_folder(hf, s, unfuse ? test::unfuse_experts(w, s) : w);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        fs::copy_file(fs::path(PELICAN_SOURCE_DIR) / "tests/golden/qwen3" / f, fs::path(hf) / f);
    ConvertOptions opt;
    opt.type = DType::F32;
    opt.emit.progress = false;
    opt.emit.threads = 2;
    auto c = convert_model(hf, gguf, opt);
    ASSERT_TRUE(c.ok()) << c.error().message;

    // llama.cpp's names and keys.
    auto g = GgufFile::open(gguf);
    ASSERT_TRUE(g.ok()) << g.error().message;
    const std::string arch = s.moe ? "qwen35moe" : "qwen35";
    EXPECT_EQ(g->get_string("general.architecture"), arch);
    EXPECT_EQ(g->get_int(arch + ".block_count"), s.n_layer + (s.mtp ? 1 : 0));
    EXPECT_EQ(g->get_int(arch + ".ssm.group_count"), s.nk);
    EXPECT_EQ(g->get_int(arch + ".ssm.time_step_rank"), s.nv);
    EXPECT_EQ(g->get_int(arch + ".full_attention_interval"), 4);
    for (const char* t :
         {"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_a", "blk.0.ssm_dt.bias",
          "blk.0.ssm_conv1d.weight", "blk.0.ssm_beta.weight", "blk.0.ssm_alpha.weight",
          "blk.0.ssm_norm.weight", "blk.0.ssm_out.weight", "blk.3.attn_q.weight", "blk.3.attn_q_norm.weight",
          "blk.0.post_attention_norm.weight", "output_norm.weight"})
        EXPECT_NE(g->find_tensor(t), nullptr) << t;
    if (s.moe) {
        for (const char* t :
             {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight",
              "blk.0.ffn_gate_inp.weight", "blk.0.ffn_gate_inp_shexp.weight", "blk.0.ffn_gate_shexp.weight"})
            EXPECT_NE(g->find_tensor(t), nullptr) << t;
    }
    if (s.mtp) {
        EXPECT_EQ(g->get_int(arch + ".nextn_predict_layers"), 1);
        for (const char* t :
             {"blk.4.nextn.eh_proj.weight", "blk.4.nextn.enorm.weight", "blk.4.nextn.hnorm.weight",
              "blk.4.nextn.shared_head_norm.weight", "blk.4.attn_q.weight"})
            EXPECT_NE(g->find_tensor(t), nullptr) << t;
    }
    {  // ssm_a = -exp(A_log) in tiled value-head order: tiled head j = v * nk + g <- grouped g * r + v
        const GgufTensorInfo* a = g->find_tensor("blk.0.ssm_a");
        ASSERT_NE(a, nullptr);
        const auto* got = reinterpret_cast<const float*>(g->tensor_data(*a).data());
        const auto& a_log = w.at(s.prefix + "layers.0.linear_attn.A_log").data;
        const int r = s.nv / s.nk;
        for (int j = 0; j < s.nv; ++j)
            EXPECT_FLOAT_EQ(got[j], -std::exp(a_log[static_cast<size_t>((j % s.nk) * r + j / s.nk)])) << j;
    }

    auto from_hf = Model::load(hf);
    ASSERT_TRUE(from_hf.ok()) << from_hf.error().message;
    auto from_gguf = Model::load(gguf);
    ASSERT_TRUE(from_gguf.ok()) << from_gguf.error().message;
    EXPECT_EQ((*from_gguf)->arch().name, arch);
    EXPECT_EQ((*from_gguf)->hparams().n_layer, s.n_layer);
    // Both readers give every layer its kinds: the spec's full-attention layers gated attention, the rest
    // DeltaNet; every FFN MoE (qwen35moe) or SwiGLU (qwen35); zero-centred norms.
    for (const Model* m : {from_hf->get(), from_gguf->get()}) {
        const ModelHParams& hp = m->hparams();
        ASSERT_EQ(hp.layer.size(), static_cast<size_t>(s.n_layer));
        EXPECT_EQ(hp.norm_weight, NormWeight::kOnePlus);
        EXPECT_FALSE(hp.uniform_attention());
        for (int l = 0; l < s.n_layer; ++l)
            EXPECT_EQ(hp.layer[static_cast<size_t>(l)],
                      (LayerKind{s.full(l) ? Mixer::kGatedAttention : Mixer::kDeltaNet,
                                 s.moe ? Ffn::kMoe : Ffn::kSwiglu}))
                << l;
    }
    const auto toks = random_tokens(100, s.n_vocab, 17);
    const Logits a = run(**from_hf, toks, s.n_vocab, s.mtp), b = run(**from_gguf, toks, s.n_vocab, s.mtp);
    const auto V = static_cast<size_t>(s.n_vocab);
    const double d = golden::row_rel_diff(b.main, a.main, V);
    const double dm = s.mtp ? golden::row_rel_diff(b.mtp, a.mtp, V) : 0.0;
    fmt::print(
        "{}: GGUF (f32) vs HF folder, 100 positions: max relative logit difference {:.2e}, MTP {:.2e}\n", tag,
        d, dm);
    // With n_k_heads == n_v_heads the value-head order is unchanged and the GGUF pass does the same
    // arithmetic (bitwise equal). Otherwise the tiled order changes ssm_out's summation order: fp32
    // rounding (a few 1e-6 through 4 layers and 100 positions).
    const double tol = s.nk == s.nv ? 0.0 : 1e-5;
    EXPECT_LE(d, tol);
    EXPECT_LE(dm, tol);
}

TEST(HybridGguf, MoeWithMtpConvertsAndMatches) {
    HybridSpec s;
    s.mtp = true;
    check_round_trip(s, "gguf_moe", false);
}

TEST(HybridGguf, EqualKeyAndValueHeadsAreBitwiseEqual) {
    HybridSpec s;
    s.mtp = true;
    s.nk = s.nv;
    s.seed = 23;
    check_round_trip(s, "gguf_nkv", false);
}

TEST(HybridGguf, PerExpertTensorsAreStacked) {
    HybridSpec s;
    s.prefix = "model.";
    s.seed = 31;
    check_round_trip(s, "gguf_split", true);
}

TEST(HybridGguf, DenseConvertsAndMatches) {
    HybridSpec s;
    s.moe = false;
    s.prefix = "model.";
    s.mtp = true;
    s.seed = 41;
    check_round_trip(s, "gguf_dense", false);
}

// Not a check: with PELICAN_HYBRID_INTEROP_DIR set, writes two tiny random HF folders there (moe/ with an
// MTP block, dense/) whose vocabulary (151936 rows) fits the real Qwen3 tokenizer, for the manual
// llama.cpp comparison in tools/interop/qwen35_llama_cpp.sh (which copies the tokenizer in).
TEST(HybridGguf, WriteInteropFolders) {
    const char* dir = std::getenv("PELICAN_HYBRID_INTEROP_DIR");
    if (!dir) GTEST_SKIP() << "PELICAN_HYBRID_INTEROP_DIR is not set";
    for (const bool moe : {true, false}) {
        HybridSpec s;
        s.moe = moe;
        s.mtp = true;
        s.n_vocab = 151936;
        s.seed = moe ? 101 : 103;
        const std::string out = (fs::path(dir) / (moe ? "moe" : "dense")).string();
        fs::create_directories(out);
        test::write_hybrid_folder(out, s, test::hybrid_weights(s));
    }
}

}  // namespace
}  // namespace pelican
