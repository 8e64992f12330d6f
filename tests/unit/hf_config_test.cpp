// config.json -> HfConfig on realistic configs (llama-3.1, qwen2.5, qwen3, granite, qwen3.5-moe) and bad
// ones.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "formats/hf_config.h"

namespace pelican {
namespace {

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

HfConfig parse_ok(const std::string& text) {
    auto r = parse_hf_config(text, "config.json");
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : HfConfig{};
}

std::string parse_err(const std::string& text) {
    auto r = parse_hf_config(text, "cfg.json");
    EXPECT_FALSE(r.ok());
    if (r.ok()) return "";
    EXPECT_TRUE(contains(r.error().message, "cfg.json")) << r.error().message;
    return r.error().message;
}

// Meta-Llama-3.1-8B-Instruct
const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

TEST(HfConfig, Llama31) {
    HfConfig c = parse_ok(kLlama31);
    EXPECT_EQ(c.model_type, "llama");
    EXPECT_EQ(c.outer_model_type, "llama");
    EXPECT_FALSE(c.has_text_config);
    ASSERT_EQ(c.architectures.size(), 1u);
    EXPECT_EQ(c.architectures[0], "LlamaForCausalLM");
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.intermediate_size, 14336);
    EXPECT_EQ(c.num_hidden_layers, 32);
    EXPECT_EQ(c.num_attention_heads, 32);
    EXPECT_EQ(c.num_key_value_heads, 8);
    EXPECT_EQ(c.head_dim, 128);  // derived
    EXPECT_EQ(c.vocab_size, 128256);
    EXPECT_EQ(c.max_position_embeddings, 131072);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
    EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
    ASSERT_TRUE(c.rope_scaling.has_value());
    EXPECT_EQ(c.rope_scaling->type, "llama3");
    EXPECT_DOUBLE_EQ(c.rope_scaling->factor, 8.0);
    EXPECT_EQ(c.rope_scaling->low_freq_factor, 1.0);
    EXPECT_EQ(c.rope_scaling->high_freq_factor, 4.0);
    EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 8192);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.bos_token_ids, (std::vector<int64_t>{128000}));
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
    EXPECT_EQ(c.torch_dtype, "bfloat16");
    EXPECT_FALSE(c.attention_bias);
    EXPECT_FALSE(c.is_moe());
    EXPECT_TRUE(c.layer_types.empty());
    EXPECT_EQ(c.rotary_dim(), 128);
    ASSERT_TRUE(c.raw);
    EXPECT_EQ((*c.raw)["pretraining_tp"], 1);  // raw JSON stays available
    EXPECT_EQ(c.text.get(), c.raw.get());
}

// Qwen2.5-0.5B-Instruct: sliding_window is present but disabled.
TEST(HfConfig, Qwen25) {
    HfConfig c = parse_ok(R"({
      "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
      "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
      "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
      "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
      "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
      "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
      "use_sliding_window": false, "vocab_size": 151936})");
    EXPECT_EQ(c.model_type, "qwen2");
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_FALSE(c.sliding_window.has_value());
    EXPECT_FALSE(c.rope_scaling.has_value());
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645}));
}

// Qwen3-0.6B: explicit head_dim (not hidden/heads), nulls treated as absent, integer rope_theta.
TEST(HfConfig, Qwen3) {
    HfConfig c = parse_ok(R"({
      "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
      "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
      "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
      "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
      "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
      "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
      "use_sliding_window": false, "vocab_size": 151936})");
    EXPECT_EQ(c.model_type, "qwen3");
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.hidden_size, 1024);
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
    EXPECT_FALSE(c.rope_scaling.has_value());
}

// granite-3.0-2b-instruct
TEST(HfConfig, Granite) {
    HfConfig c = parse_ok(R"({
      "architectures": ["GraniteForCausalLM"], "attention_bias": false, "attention_dropout": 0.1,
      "attention_multiplier": 0.015625, "bos_token_id": 0, "embedding_multiplier": 12.0, "eos_token_id": 0,
      "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
      "logits_scaling": 8.0, "max_position_embeddings": 4096, "mlp_bias": false, "model_type": "granite",
      "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "pad_token_id": 0,
      "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 49155})");
    EXPECT_EQ(c.model_type, "granite");
    EXPECT_DOUBLE_EQ(c.embedding_multiplier, 12.0);
    EXPECT_DOUBLE_EQ(c.residual_multiplier, 0.22);
    ASSERT_TRUE(c.attention_multiplier.has_value());
    EXPECT_DOUBLE_EQ(*c.attention_multiplier, 0.015625);
    EXPECT_DOUBLE_EQ(c.logits_scaling, 8.0);
    EXPECT_EQ(c.pad_token_id, 0);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.vocab_size, 49155);
}

// Qwen3.5-35B-A3B: multimodal wrapper, language model in text_config, v5 rope_parameters.
const char* kQwen35Moe = R"({
  "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
  "image_token_id": 248056, "tie_word_embeddings": false, "transformers_version": "4.57.0.dev0",
  "text_config": {
    "model_type": "qwen3_5_moe_text", "vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40,
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "hidden_act": "silu",
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 256, "num_experts_per_tok": 8,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "rms_norm_eps": 1e-06,
    "full_attention_interval": 4, "max_position_embeddings": 262144, "attn_output_gate": true,
    "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": false,
    "dtype": "bfloat16", "eos_token_id": 248044,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                        "mrope_section": [11, 11, 10], "mrope_interleaved": true}
  },
  "vision_config": {"depth": 27, "hidden_size": 1152, "model_type": "qwen3_5_moe"}
})";

TEST(HfConfig, Qwen35MoeTextConfig) {
    HfConfig c = parse_ok(kQwen35Moe);
    EXPECT_TRUE(c.has_text_config);
    EXPECT_EQ(c.model_type, "qwen3_5_moe_text");
    EXPECT_EQ(c.outer_model_type, "qwen3_5_moe");
    EXPECT_EQ(c.architectures, (std::vector<std::string>{"Qwen3_5MoeForConditionalGeneration"}));
    EXPECT_EQ(c.hidden_size, 2048);  // from text_config, not vision_config
    EXPECT_EQ(c.vocab_size, 248320);
    EXPECT_EQ(c.num_hidden_layers, 40);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.intermediate_size, 0);
    EXPECT_TRUE(c.is_moe());
    EXPECT_EQ(c.num_experts, 256);
    EXPECT_EQ(c.num_experts_per_tok, 8);
    EXPECT_EQ(c.moe_intermediate_size, 512);
    EXPECT_EQ(c.shared_expert_intermediate_size, 512);
    EXPECT_EQ(c.linear_num_key_heads, 16);
    EXPECT_EQ(c.linear_num_value_heads, 32);
    EXPECT_EQ(c.linear_key_head_dim, 128);
    EXPECT_EQ(c.linear_value_head_dim, 128);
    EXPECT_EQ(c.linear_conv_kernel_dim, 4);
    EXPECT_EQ(c.mtp_num_hidden_layers, 1);
    EXPECT_TRUE(c.attn_output_gate);
    EXPECT_FALSE(c.tie_word_embeddings);  // top level
    EXPECT_EQ(c.torch_dtype, "bfloat16");
    EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
    EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
    EXPECT_EQ(c.rotary_dim(), 64);
    ASSERT_TRUE(c.rope_scaling.has_value());
    EXPECT_EQ(c.rope_scaling->mrope_section, (std::vector<int64_t>{11, 11, 10}));
    EXPECT_TRUE(c.rope_scaling->mrope_interleaved);
    // layer_types built from full_attention_interval: layers 3, 7, ... are full attention.
    ASSERT_EQ(c.layer_types.size(), 40u);
    EXPECT_EQ(c.layer_types[0], "linear_attention");
    EXPECT_EQ(c.layer_types[3], "full_attention");
    EXPECT_EQ(c.layer_types[39], "full_attention");
    EXPECT_EQ(std::count(c.layer_types.begin(), c.layer_types.end(), "full_attention"), 10);
    EXPECT_EQ((*c.text)["mamba_ssm_dtype"], "float32");
    EXPECT_TRUE(c.raw->contains("vision_config"));
}

TEST(HfConfig, ExplicitLayerTypesAndQuantization) {
    nlohmann::json j = nlohmann::json::parse(kLlama31);
    j["num_hidden_layers"] = 2;
    j["layer_types"] = {"sliding_attention", "full_attention"};
    j["quantization_config"] = {{"quant_method", "auto-round"}, {"bits", 4}, {"group_size", 128}};
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};
    HfConfig c = parse_ok(j.dump());
    EXPECT_EQ(c.layer_types, (std::vector<std::string>{"sliding_attention", "full_attention"}));
    EXPECT_EQ(c.quant_method, "auto-round");
    EXPECT_EQ(c.rope_scaling->type, "linear");
    EXPECT_DOUBLE_EQ(c.rope_scaling->factor, 2.0);
}

TEST(HfConfig, WrongTypesNameTheKey) {
    nlohmann::json base = nlohmann::json::parse(kLlama31);
    auto with = [&](const char* key, nlohmann::json v) {
        nlohmann::json j = base;
        j[key] = v;
        return parse_err(j.dump());
    };
    EXPECT_TRUE(contains(with("hidden_size", "4096"), "'hidden_size' must be an integer"))
        << with("hidden_size", "x");
    EXPECT_TRUE(contains(with("hidden_size", 4096.5), "'hidden_size'"));
    EXPECT_TRUE(contains(with("rms_norm_eps", "1e-5"), "'rms_norm_eps' must be a number"));
    EXPECT_TRUE(contains(with("tie_word_embeddings", 1), "'tie_word_embeddings' must be true or false"));
    EXPECT_TRUE(contains(with("eos_token_id", nlohmann::json::array({1, "x"})), "'eos_token_id'"));
    EXPECT_TRUE(contains(with("architectures", "Llama"), "'architectures'"));
    EXPECT_TRUE(contains(with("rope_scaling", 3), "'rope_scaling'"));
    EXPECT_TRUE(contains(with("torch_dtype", 16), "'torch_dtype'"));
    EXPECT_TRUE(contains(with("text_config", 1), "'text_config'"));
    nlohmann::json j = base;
    j["rope_scaling"]["factor"] = "8";
    EXPECT_TRUE(contains(parse_err(j.dump()), "'factor'"));
    // Integral floats are accepted for integer keys.
    j = base;
    j["max_position_embeddings"] = 8192.0;
    EXPECT_EQ(parse_ok(j.dump()).max_position_embeddings, 8192);
}

TEST(HfConfig, InconsistentValues) {
    nlohmann::json base = nlohmann::json::parse(kLlama31);
    nlohmann::json j = base;
    j.erase("hidden_size");
    EXPECT_TRUE(contains(parse_err(j.dump()), "'hidden_size'"));
    j = base;
    j["num_key_value_heads"] = 5;
    EXPECT_TRUE(contains(parse_err(j.dump()), "num_key_value_heads"));
    j = base;
    j["num_attention_heads"] = 30;  // 4096 % 30 != 0 and no head_dim
    j["num_key_value_heads"] = 10;
    EXPECT_TRUE(contains(parse_err(j.dump()), "head_dim"));
    j = base;
    j["layer_types"] = {"full_attention"};
    EXPECT_TRUE(contains(parse_err(j.dump()), "layer_types has 1 entries"));
    j = base;
    j["num_hidden_layers"] = -3;
    EXPECT_TRUE(contains(parse_err(j.dump()), "num_hidden_layers"));
    j = base;
    j["vocab_size"] = int64_t{1} << 40;
    EXPECT_TRUE(contains(parse_err(j.dump()), "vocab_size"));
    j = base;
    j["num_experts"] = 4;
    j["num_experts_per_tok"] = 8;
    EXPECT_TRUE(contains(parse_err(j.dump()), "num_experts_per_tok"));
    j = base;
    j["partial_rotary_factor"] = 1.5;
    EXPECT_TRUE(contains(parse_err(j.dump()), "partial_rotary_factor"));
    EXPECT_TRUE(contains(parse_err("{\"hidden_size\": "), "not valid JSON"));
    EXPECT_TRUE(contains(parse_err("[1]"), "JSON object"));
}

TEST(HfConfig, LoadFromFolder) {
    auto dir = std::filesystem::temp_directory_path() / ("pelican_cfg_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::string text = kLlama31;
    ASSERT_TRUE(write_file_atomic((dir / "config.json").string(),
                                  {reinterpret_cast<const uint8_t*>(text.data()), text.size()})
                    .ok());
    auto c = load_hf_config(dir.string());
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->hidden_size, 4096);
    auto missing = load_hf_config((dir / "nope").string());
    EXPECT_FALSE(missing.ok());
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pelican
