// pelican convert: HF folder -> GGUF (names, shapes, permuted q/k, metadata, tokenizer), quantized
// outputs within the quantizers' bounds, GGUF -> GGUF, golden fixtures through convert give
// transformers' logits, errors, the CLI. Synthetic models: convert_synthetic_test.cpp; shared helpers:
// convert_test_util.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "convert/convert.h"
#include "convert/synthetic.h"
#include "core/dequantize.h"
#include "core/float_convert.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/forward.h"
#include "runtime/forward_factory.h"
#include "model/model.h"
#include "model/rope_permute.h"
#include "tokenizer/tokenizer.h"
#include "convert_test_util.h"

namespace pelican {
namespace {

namespace fs = std::filesystem;
using test::block_amax;
using test::file_bytes;
using test::kSource;
using test::kSpmVocab;
using test::kSynthConfig;
using test::quiet;
using test::TempDir;
using test::to_f32;
using test::write_synthetic;
using test::write_text;

// A tiny HF checkpoint: torch-order shapes and the fp32 values the converter must see (after the
// storage dtype's rounding).
struct Tiny {
    std::string model_type = "llama";
    int E = 256, L = 2, H = 4, KV = 2, HD = 64, F = 96, V = 520;  // vocab 520 > 512 tokens: padded
    bool tied = false, qkv_bias = false, qk_norm = false;
    int sliding_window = 0;  // written to config.json when > 0
};
struct HfTensorData {
    std::vector<uint64_t> shape;
    std::vector<float> values;  // as the converter reads them
    StDType dtype = StDType::F32;
    std::vector<uint8_t> bytes;
};
using HfMap = std::map<std::string, HfTensorData>;

HfMap write_tiny_hf(const std::string& dir, const Tiny& s, uint32_t seed = 1) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0, 1);
    HfMap m;
    const auto add = [&](const std::string& name, std::vector<uint64_t> shape, float scale, float mean = 0,
                         StDType dt = StDType::F32) {
        HfTensorData t;
        t.shape = shape;
        t.dtype = dt;
        size_t n = 1;
        for (auto d : shape) n *= d;
        for (size_t i = 0; i < n; ++i) {
            float x = mean + scale * nd(rng);
            if (dt == StDType::F32) {
                t.bytes.insert(t.bytes.end(), reinterpret_cast<uint8_t*>(&x),
                               reinterpret_cast<uint8_t*>(&x) + 4);
            } else {
                const uint16_t h = dt == StDType::F16 ? f32_to_f16(x) : f32_to_bf16(x);
                x = dt == StDType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
                t.bytes.push_back(static_cast<uint8_t>(h & 0xff));
                t.bytes.push_back(static_cast<uint8_t>(h >> 8));
            }
            t.values.push_back(x);
        }
        m[name] = std::move(t);
    };
    const auto u = [](int v) { return static_cast<uint64_t>(v); };
    add("model.embed_tokens.weight", {u(s.V), u(s.E)}, 0.5f, 0, StDType::BF16);
    add("model.norm.weight", {u(s.E)}, 0.1f, 1);
    if (!s.tied) add("lm_head.weight", {u(s.V), u(s.E)}, 0.1f);
    for (int l = 0; l < s.L; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l);
        add(p + "input_layernorm.weight", {u(s.E)}, 0.1f, 1);
        add(p + "post_attention_layernorm.weight", {u(s.E)}, 0.1f, 1);
        add(p + "self_attn.q_proj.weight", {u(s.H * s.HD), u(s.E)}, 0.1f);
        add(p + "self_attn.k_proj.weight", {u(s.KV * s.HD), u(s.E)}, 0.1f);
        add(p + "self_attn.v_proj.weight", {u(s.KV * s.HD), u(s.E)}, 0.1f);
        add(p + "self_attn.o_proj.weight", {u(s.E), u(s.H * s.HD)}, 0.1f);
        if (s.qkv_bias) {
            add(p + "self_attn.q_proj.bias", {u(s.H * s.HD)}, 0.2f);
            add(p + "self_attn.k_proj.bias", {u(s.KV * s.HD)}, 0.2f);
            add(p + "self_attn.v_proj.bias", {u(s.KV * s.HD)}, 0.2f);
        }
        if (s.qk_norm) {
            add(p + "self_attn.q_norm.weight", {u(s.HD)}, 0.1f, 1);
            add(p + "self_attn.k_norm.weight", {u(s.HD)}, 0.1f, 1);
        }
        add(p + "mlp.gate_proj.weight", {u(s.F), u(s.E)}, 0.1f);
        add(p + "mlp.up_proj.weight", {u(s.F), u(s.E)}, 0.1f, 0, l == 0 ? StDType::F16 : StDType::F32);
        add(p + "mlp.down_proj.weight", {u(s.E), u(s.F)}, 0.1f);
    }
    std::vector<SafetensorsWriteTensor> st;
    for (auto& [name, t] : m) st.push_back({name, t.dtype, t.shape, t.bytes});
    EXPECT_TRUE(safetensors_write(dir + "/model.safetensors", st, {}).ok());

    nlohmann::json c = {
        {"model_type", s.model_type}, {"hidden_size", s.E},         {"intermediate_size", s.F},
        {"num_hidden_layers", s.L},   {"num_attention_heads", s.H}, {"num_key_value_heads", s.KV},
        {"head_dim", s.HD},           {"vocab_size", s.V},          {"max_position_embeddings", 512},
        {"rms_norm_eps", 1e-5},       {"rope_theta", 50000.0},      {"tie_word_embeddings", s.tied}};
    if (s.sliding_window > 0) c["sliding_window"] = s.sliding_window;
    write_text(dir + "/config.json", c.dump());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        fs::copy_file(kSource / "tests/golden/llama" / f, fs::path(dir) / f);
    return m;
}

// The HF values a GGUF tensor must hold: same order, or q/k rows permuted (weights and biases).
std::vector<float> expected_gguf_values(const HfTensorData& t, int64_t permute_heads) {
    if (permute_heads == 0) return t.values;
    const int64_t rows = static_cast<int64_t>(t.shape[0]);
    const int64_t row_len = t.shape.size() == 2 ? static_cast<int64_t>(t.shape[1]) : 1;
    const int64_t hd = rows / permute_heads;
    std::vector<float> out(t.values.size());
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t src = r / hd * hd + rope_permute_src_row(r % hd, hd);
        std::copy_n(t.values.begin() + src * row_len, row_len, out.begin() + r * row_len);
    }
    return out;
}

std::string gguf_name_of(const std::string& hf) {
    static const std::map<std::string, std::string> fixed = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"}};
    if (auto it = fixed.find(hf); it != fixed.end()) return it->second;
    static const std::map<std::string, std::string> parts = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}};
    const size_t a = std::string("model.layers.").size(), b = hf.find('.', a);
    return "blk." + hf.substr(a, b - a) + "." + parts.at(hf.substr(b + 1));
}

GgufFile convert_ok(const std::string& in, const std::string& out, DType t) {
    auto r = convert_model(in, out, quiet(t));
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    auto f = GgufFile::open(out);
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
    return std::move(f).value();
}

void check_hf_conversion(const Tiny& s, bool permuted, const std::string& arch_key) {
    TempDir dir;
    const HfMap hf = write_tiny_hf(dir.path.string(), s);
    const GgufFile f = convert_ok(dir.path.string(), dir / "out.gguf", DType::F32);

    // Every HF tensor (but a tied lm_head) is present under its GGUF name with the reversed shape.
    EXPECT_EQ(f.tensors().size(), hf.size());
    for (const auto& [name, t] : hf) {
        const std::string g = gguf_name_of(name);
        const GgufTensorInfo* gt = f.find_tensor(g);
        ASSERT_NE(gt, nullptr) << g;
        EXPECT_EQ(gt->dims, std::vector<uint64_t>(t.shape.rbegin(), t.shape.rend())) << g;
        EXPECT_EQ(gt->type, DType::F32) << g;
        int64_t heads = 0;
        if (permuted && (g.find("attn_q.") != std::string::npos)) heads = s.H;
        if (permuted && (g.find("attn_k.") != std::string::npos)) heads = s.KV;
        EXPECT_EQ(to_f32(f, *gt), expected_gguf_values(t, heads)) << g;
    }

    EXPECT_EQ(f.get_string("general.architecture"), arch_key);
    EXPECT_EQ(f.get_int("general.file_type"), 0);
    EXPECT_EQ(f.get_int("general.quantization_version"), 2);
    const std::string a = arch_key + ".";
    EXPECT_EQ(f.get_int(a + "context_length"), 512);
    EXPECT_EQ(f.get_int(a + "embedding_length"), s.E);
    EXPECT_EQ(f.get_int(a + "block_count"), s.L);
    EXPECT_EQ(f.get_int(a + "feed_forward_length"), s.F);
    EXPECT_EQ(f.get_int(a + "attention.head_count"), s.H);
    EXPECT_EQ(f.get_int(a + "attention.head_count_kv"), s.KV);
    EXPECT_EQ(f.get_int(a + "attention.key_length"), s.HD);
    EXPECT_EQ(f.get_int(a + "rope.dimension_count"), s.HD);
    EXPECT_EQ(f.get_int(a + "vocab_size"), s.V);
    EXPECT_FLOAT_EQ(static_cast<float>(*f.get_float(a + "rope.freq_base")), 50000.0f);
    EXPECT_FLOAT_EQ(static_cast<float>(*f.get_float(a + "attention.layer_norm_rms_epsilon")), 1e-5f);
    if (s.sliding_window > 0) {
        EXPECT_EQ(f.get_int(a + "attention.sliding_window"), s.sliding_window);
    }

    // Tokenizer arrays equal the HF tokenizer's, padded to the embedding rows.
    auto tok = Tokenizer::load(dir.path.string());
    ASSERT_TRUE(tok.ok());
    const TokenizerSpec& spec = tok->spec();
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
    const auto tokens = *f.get_string_array("tokenizer.ggml.tokens");
    const auto types = *f.get_i32_array("tokenizer.ggml.token_type");
    ASSERT_EQ(tokens.size(), static_cast<size_t>(s.V));
    ASSERT_EQ(types.size(), static_cast<size_t>(s.V));
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (i < spec.tokens.size()) {
            EXPECT_EQ(tokens[i], spec.tokens[i]);
            EXPECT_EQ(types[i], std::max(1, static_cast<int>(spec.types[i])));
        } else {
            EXPECT_EQ(tokens[i], fmt::format("[PAD{}]", i));
            EXPECT_EQ(types[i], 5);
        }
    }
    const auto merges = *f.get_string_array("tokenizer.ggml.merges");
    ASSERT_EQ(merges.size(), spec.merges.size());
    for (size_t i = 0; i < merges.size(); ++i)
        EXPECT_EQ(merges[i], spec.merges[i].first + " " + spec.merges[i].second);
    EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), spec.bos_id);
    EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), spec.eos_id);
    EXPECT_EQ(f.get_bool("tokenizer.ggml.add_bos_token"), spec.add_bos);
    EXPECT_EQ(f.get_string("tokenizer.chat_template"), spec.chat_template);
    // The GGUF tokenizer encodes like the HF one.
    auto gtok = Tokenizer::from_gguf(f);
    ASSERT_TRUE(gtok.ok()) << gtok.error().message;
    const std::string text = "Hello world, the quick brown fox 123!";
    EXPECT_EQ(gtok->encode(text), tok->encode(text));
}

TEST(Convert, HfLlamaToF32PermutesQK) { check_hf_conversion(Tiny{}, true, "llama"); }

TEST(Convert, HfQwen3ToF32KeepsOrder) {
    Tiny s;
    s.model_type = "qwen3";
    s.qk_norm = true;
    check_hf_conversion(s, false, "qwen3");
}

TEST(Convert, HfQwen2BiasesAndTiedEmbeddings) {
    Tiny s;
    s.model_type = "qwen2";
    s.qkv_bias = true;
    s.tied = true;
    check_hf_conversion(s, false, "qwen2");
}

TEST(Convert, HfMistralBecomesLlama) {
    Tiny s;
    s.model_type = "mistral";
    s.sliding_window = 4;
    check_hf_conversion(s, true, "llama");
}

TEST(Convert, HfLlamaBiasesArePermutedToo) {
    Tiny s;
    s.qkv_bias = true;  // q/k biases move element by element like the weight rows
    check_hf_conversion(s, true, "llama");
}

TEST(Convert, QuantizedOutputsWithinBounds) {
    TempDir dir;
    const HfMap hf = write_tiny_hf(dir.path.string(), Tiny{});
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
        const std::string out = dir / fmt::format("out-{}.gguf", dtype_name(t));
        auto job = plan_convert(dir.path.string(), quiet(t));
        ASSERT_TRUE(job.ok()) << job.error().message;
        const GgufFile f = convert_ok(dir.path.string(), out, t);
        for (const auto& [name, src] : hf) {
            const std::string g = gguf_name_of(name);
            const GgufTensorInfo* gt = f.find_tensor(g);
            ASSERT_NE(gt, nullptr);
            DType want = src.shape.size() == 1 ? DType::F32 : t;
            if (g == "output.weight" && t != DType::Q8_0) want = DType::Q6_K;  // 4-bit request
            if (t == DType::Q4_K && gt->dims[0] % 256 != 0 && want != DType::F32)
                want = DType::Q8_0;  // fallback
            EXPECT_EQ(gt->type, want) << g;
            if (want == DType::F32) continue;
            const int64_t heads = g.find("attn_q.") != std::string::npos   ? 4
                                  : g.find("attn_k.") != std::string::npos ? 2
                                                                           : 0;
            const std::vector<float> ref = expected_gguf_values(src, heads), got = to_f32(f, *gt);
            ASSERT_EQ(got.size(), ref.size());
            // Per element: Q8_0 within half a step (amax/127, fp16-rounded scale), Q4_0 within one step
            // of amax/8 (values clamped at +7 steps), Q4_K/Q6_K within 2% of the block's range.
            const size_t block = dtype_info(gt->type).block_elems;
            for (size_t i = 0; i < got.size(); ++i) {
                const float amax = block_amax(ref, i, block);
                float bound = 0;
                if (gt->type == DType::Q8_0) bound = amax / 127 * 0.5f * 1.002f;
                if (gt->type == DType::Q4_0) bound = amax / 8 * 1.002f;
                if (gt->type == DType::Q4_K) bound = amax * 2 / 15 * 1.05f;
                if (gt->type == DType::Q6_K) bound = amax / 32 * 1.05f;
                ASSERT_LE(std::fabs(got[i] - ref[i]), bound + 1e-7f) << g << " element " << i;
            }
        }
        if (t == DType::Q4_K) {
            ASSERT_TRUE(job.ok());
            EXPECT_FALSE(job->notes.empty());  // ffn_down rows of 96 fall back to q8_0, with a note
            EXPECT_NE(job->notes[0].find("q8_0"), std::string::npos) << job->notes[0];
        }
        EXPECT_EQ(f.get_int("general.file_type"), t == DType::Q8_0 ? 7 : t == DType::Q4_0 ? 2 : 14);
    }
}

TEST(Convert, GgufToGguf) {
    TempDir dir;
    write_tiny_hf(dir.path.string(), Tiny{});
    const GgufFile f32 = convert_ok(dir.path.string(), dir / "f32.gguf", DType::F32);
    const GgufFile q8 = convert_ok(dir / "f32.gguf", dir / "q8.gguf", DType::Q8_0);
    const GgufFile q8b = convert_ok(dir / "q8.gguf", dir / "q8b.gguf", DType::Q8_0);
    EXPECT_EQ(q8.tensors().size(), f32.tensors().size());
    for (const GgufKV& kv : f32.kvs()) {
        if (kv.key == "general.file_type") continue;
        ASSERT_NE(q8.find(kv.key), nullptr) << kv.key;
    }
    EXPECT_EQ(q8.get_int("general.file_type"), 7);
    for (const GgufTensorInfo& t : q8.tensors()) {
        // Same-type tensors are copied byte for byte.
        const GgufTensorInfo* tb = q8b.find_tensor(t.name);
        ASSERT_NE(tb, nullptr);
        EXPECT_TRUE(std::ranges::equal(q8.tensor_data(t), q8b.tensor_data(*tb))) << t.name;
        const std::vector<float> a = to_f32(f32, *f32.find_tensor(t.name)), b = to_f32(q8, t);
        for (size_t i = 0; i < a.size(); ++i)
            ASSERT_NEAR(a[i], b[i], block_amax(a, i, 32) / 127 * 0.5f * 1.002f + 1e-7f) << t.name;
    }
}

// ---- golden fixtures through convert ------------------------------------------------------------

TEST(Convert, GoldenFixturesMatchTransformers) {
    const fs::path golden = kSource / "tests" / "golden";
    if (!fs::is_directory(golden)) GTEST_SKIP() << "no tests/golden";
    TempDir dir;
    ThreadPool pool(2);
    int n = 0;
    for (const auto& e : fs::directory_iterator(golden)) {
        const fs::path ref_path = e.path() / "reference.safetensors";
        if (!fs::exists(ref_path)) continue;
        const std::string name = e.path().filename().string();
        auto ref = SafetensorsFile::open(ref_path.string());
        ASSERT_TRUE(ref.ok());
        const SafetensorsTensor* tt = ref->find("tokens_a");
        const SafetensorsTensor* lt = ref->find("logits_a");
        ASSERT_TRUE(tt && lt);
        std::vector<int32_t> toks(tt->data.size() / 4);
        std::memcpy(toks.data(), tt->data.data(), tt->data.size());
        std::vector<float> want(lt->data.size() / 4);
        std::memcpy(want.data(), lt->data.data(), lt->data.size());
        for (DType t : {DType::F32, DType::Q8_0}) {
            const std::string out = dir / fmt::format("{}-{}.gguf", name, dtype_name(t));
            convert_ok(e.path().string(), out, t);
            auto m = Model::load(out);
            ASSERT_TRUE(m.ok()) << name << ": " << m.error().message;
            auto fw = create_cpu_pass(**m, ForwardOptions{.n_ctx = 64});
            ASSERT_TRUE(fw.ok());
            std::vector<float> got(want.size());
            ASSERT_TRUE((*fw)->eval(toks, 0, pool, got).ok()) << name;
            double scale = 0, diff = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
                diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
            }
            // f32: exact up to float reordering. q8_0 (weights and, in the CPU matmul, activations): a few
            // % of the largest logit for these tiny random models (weights std 0.1, random norms).
            EXPECT_LT(diff / scale, t == DType::F32 ? 1e-4 : 0.1) << name << " " << dtype_name(t);
        }
        ++n;
    }
    EXPECT_GE(n, 5);
}

// ---- errors -----------------------------------------------------------------------------------

void expect_error(const Expected<EmitStats>& r, const std::string& needle) {
    ASSERT_FALSE(r.ok()) << "expected an error containing: " << needle;
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
}

TEST(Convert, Errors) {
    TempDir dir;
    const std::string out = dir / "out.gguf";
    expect_error(convert_model(dir / "missing", out, quiet(DType::F16)), "no such file");
    fs::create_directories(dir / "empty");
    expect_error(convert_model(dir / "empty", out, quiet(DType::F16)), "config.json");

    fs::create_directories(dir / "gptneox");
    write_tiny_hf(dir / "gptneox", Tiny{});
    {
        auto cfg = nlohmann::json::parse(file_bytes(dir / "gptneox/config.json"));
        cfg["model_type"] = "gpt_neox";
        write_text(dir / "gptneox/config.json", cfg.dump());
    }
    expect_error(convert_model(dir / "gptneox", out, quiet(DType::F16)), "gpt_neox");

    fs::create_directories(dir / "notok");
    write_tiny_hf(dir / "notok", Tiny{});
    fs::remove(dir / "notok/tokenizer.json");
    expect_error(convert_model(dir / "notok", out, quiet(DType::F16)), "tokenizer");

    write_text(dir / "junk.gguf", "not a gguf file at all");
    expect_error(convert_model(dir / "junk.gguf", out, quiet(DType::F16)), "junk.gguf");

    auto bad_type = parse_convert_type("q5_k");
    ASSERT_FALSE(bad_type.ok());
    EXPECT_NE(bad_type.error().message.find("q4_k"), std::string::npos);  // lists the accepted types
    EXPECT_TRUE(parse_convert_type("Q4_0").ok());

    expect_error(write_synthetic("gpt2", kSynthConfig, out, DType::F16, 0), "unknown architecture");
    expect_error(write_synthetic("llama", "{not json", out, DType::F16, 0), "not valid JSON");
    expect_error(write_synthetic("llama", R"({"hidden_size": 64, "vocab_size": 100, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 4})",
                                 out, DType::F16, 0),
                 "32000 tokens");
    expect_error(
        write_synthetic("llama", R"({"model_type": "qwen2", "hidden_size": 64})", out, DType::F16, 0),
        "does not match");
    expect_error(write_synthetic("llama", kSynthConfig, out, DType::F16, 0, dir / "nope.gguf"), "vocabulary");
    EXPECT_FALSE(fs::exists(out));

    // A cancel request stops the write and leaves neither the file nor its temporary.
    std::atomic<bool> cancel{true};
    ConvertOptions o = quiet(DType::F16);
    o.emit.cancel = &cancel;
    SyntheticOptions s{.arch = "llama", .config_json = kSynthConfig, .vocab = kSpmVocab.string()};
    auto job = plan_synthetic(s, o);
    ASSERT_TRUE(job.ok());
    expect_error(write_job(*job, out, o.emit), "interrupted");
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out + ".tmp"));
    for (const auto& e : fs::directory_iterator(dir.path))  // nor the writer's own temporary
        EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// Runs the pelican binary; returns the exit code, stderr in *err.
int run_cli(const std::string& args, const TempDir& dir, std::string* err) {
    const std::string log = dir / "stderr.txt";
    const int rc = std::system((std::string(PELICAN_BINARY) + " " + args + " 2> " + log).c_str());
    std::ifstream in(log);
    err->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(Convert, Cli) {
    TempDir dir;
    const std::string out = dir / "cli.gguf";
    const std::string cfg = "'" + std::string(kSynthConfig) + "'";
    const std::string base =
        "convert --synthetic llama --config " + cfg + " --vocab " + kSpmVocab.string() + " -o " + out;
    std::string err;
    EXPECT_EQ(run_cli(base + " --type q5_k", dir, &err), 1);
    EXPECT_NE(err.find("unsupported output type \"q5_k\""), std::string::npos) << err;
    EXPECT_EQ(run_cli("convert --synthetic llama --config " + cfg + " -o " + out, dir, &err), 1);
    EXPECT_NE(err.find("--vocab"), std::string::npos) << err;
    EXPECT_EQ(run_cli("convert -o " + out, dir, &err), 1);
    EXPECT_NE(err.find("give an input"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(out));

    ASSERT_EQ(run_cli(base + " --type q8_0 --seed 3 --name tiny", dir, &err), 0) << err;
    EXPECT_NE(err.find("wrote"), std::string::npos) << err;
    auto f = GgufFile::open(out);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->get_string("general.name"), "tiny");
    EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->type, DType::Q8_0);
}

TEST(Convert, TypeRule) {
    const std::vector<uint64_t> m256 = {256, 1000}, m96 = {96, 1000}, m100 = {100, 10}, v = {256};
    EXPECT_EQ(choose_tensor_type("blk.0.attn_norm.weight", v, DType::Q4_0, false).type, DType::F32);
    EXPECT_EQ(choose_tensor_type("blk.0.attn_q.weight", m256, DType::Q4_0, false).type, DType::Q4_0);
    EXPECT_EQ(choose_tensor_type("output.weight", m256, DType::Q4_0, false).type, DType::Q6_K);
    EXPECT_EQ(choose_tensor_type("output.weight", m256, DType::Q8_0, false).type, DType::Q8_0);
    EXPECT_EQ(choose_tensor_type("token_embd.weight", m256, DType::Q4_K, true).type, DType::Q6_K);
    EXPECT_EQ(choose_tensor_type("token_embd.weight", m256, DType::Q4_K, false).type, DType::Q4_K);
    EXPECT_EQ(choose_tensor_type("blk.0.ffn_down.weight", m96, DType::Q4_K, false).type, DType::Q8_0);
    EXPECT_EQ(choose_tensor_type("output.weight", m96, DType::Q4_0, false).type, DType::Q8_0);
    // llama.cpp keeps routers and the DeltaNet conv kernel in F32.
    EXPECT_EQ(choose_tensor_type("blk.0.ssm_conv1d.weight", m256, DType::BF16, false).type, DType::F32);
    EXPECT_EQ(choose_tensor_type("blk.0.ffn_gate_inp.weight", m256, DType::Q8_0, false).type, DType::F32);
    EXPECT_EQ(choose_tensor_type("blk.1.ffn_gate_inp_shexp.weight", m256, DType::Q4_K, false).type,
              DType::F32);
    const TypeChoice c = choose_tensor_type("blk.0.ffn_down.weight", m100, DType::Q4_0, false);
    EXPECT_EQ(c.type, DType::F16);
    EXPECT_NE(c.note.find("100"), std::string::npos);
    EXPECT_EQ(choose_tensor_type("blk.0.ffn_down.weight", m100, DType::BF16, false).type, DType::BF16);
}

}  // namespace
}  // namespace pelican
