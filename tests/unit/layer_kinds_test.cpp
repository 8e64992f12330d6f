// Layer kinds as data (model/layer_kind.h): what the config readers make of each layer, and the files
// they refuse (a plan without attention layers, unknown layer types, counts that do not match).
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "formats/hf_config.h"
#include "model/arch.h"
#include "model/hparams.h"

namespace pelican {
namespace {

nlohmann::json qwen35_moe_text(int n_layer) {
    return {{"model_type", "qwen3_5_moe_text"},
            {"vocab_size", 512},
            {"hidden_size", 64},
            {"num_hidden_layers", n_layer},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", 16},
            {"hidden_act", "silu"},
            {"linear_num_key_heads", 2},
            {"linear_num_value_heads", 4},
            {"linear_key_head_dim", 16},
            {"linear_value_head_dim", 16},
            {"linear_conv_kernel_dim", 4},
            {"num_experts", 8},
            {"num_experts_per_tok", 2},
            {"moe_intermediate_size", 32},
            {"shared_expert_intermediate_size", 32},
            {"rms_norm_eps", 1e-6},
            {"full_attention_interval", 4},
            {"max_position_embeddings", 4096},
            {"rope_theta", 1e7},
            {"partial_rotary_factor", 0.25}};
}

Expected<ModelHParams> from_json(const nlohmann::json& j) {
    auto c = parse_hf_config(j.dump(), "config.json");
    if (!c) return c.take_error();
    const ArchSpec* arch = find_arch_by_hf_model_type(c->model_type);
    if (!arch) return make_error("no arch for {}", c->model_type);
    return hparams_from_hf(*c, *arch, "config.json");
}

TEST(LayerKinds, Qwen35MoePlanFromTheInterval) {
    auto hp = from_json(qwen35_moe_text(8));
    ASSERT_TRUE(hp.ok()) << hp.error().message;
    ASSERT_EQ(hp->layer.size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
        const Mixer want = (i + 1) % 4 == 0 ? Mixer::kGatedAttention : Mixer::kDeltaNet;
        EXPECT_EQ(hp->layer[i], (LayerKind{want, Ffn::kMoe})) << i;
    }
    EXPECT_EQ(hp->n_kv_layers(), 2);
    EXPECT_EQ(hp->count(Mixer::kDeltaNet), 6);
    EXPECT_TRUE(hp->has(Ffn::kMoe));
    EXPECT_FALSE(hp->has(Ffn::kSwiglu));
    EXPECT_FALSE(hp->uniform_attention());
    EXPECT_EQ(hp->norm_weight, NormWeight::kOnePlus);
    EXPECT_EQ(hp->moe.n_expert, 8);
    EXPECT_EQ(hp->moe.n_expert_used, 2);
    EXPECT_EQ(hp->n_ff, 32);  // the expert width
    EXPECT_EQ(hp->deltanet.linear.n_v_heads, 4);
    EXPECT_EQ(hp->deltanet.conv_kernel, 4);
}

TEST(LayerKinds, ExplicitLayerTypesAndTheDenseQwen35) {
    nlohmann::json j = qwen35_moe_text(3);
    j["model_type"] = "qwen3_5_text";
    j["intermediate_size"] = 96;
    j["layer_types"] = {"full_attention", "linear_attention", "full_attention"};
    auto hp = from_json(j);
    ASSERT_TRUE(hp.ok()) << hp.error().message;
    EXPECT_EQ(hp->layer[0], (LayerKind{Mixer::kGatedAttention, Ffn::kSwiglu}));
    EXPECT_EQ(hp->layer[1], (LayerKind{Mixer::kDeltaNet, Ffn::kSwiglu}));
    EXPECT_EQ(hp->layer[2], (LayerKind{Mixer::kGatedAttention, Ffn::kSwiglu}));
    EXPECT_EQ(hp->n_ff, 96);
}

TEST(LayerKinds, LlamaLayersAreUniformAttention) {
    const nlohmann::json j = {{"model_type", "llama"},    {"vocab_size", 512},
                              {"hidden_size", 64},        {"num_hidden_layers", 5},
                              {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                              {"intermediate_size", 128}, {"hidden_act", "silu"},
                              {"rms_norm_eps", 1e-5},     {"max_position_embeddings", 2048}};
    auto hp = from_json(j);
    ASSERT_TRUE(hp.ok()) << hp.error().message;
    ASSERT_EQ(hp->layer.size(), 5u);
    for (const LayerKind& k : hp->layer) EXPECT_EQ(k, LayerKind{});
    EXPECT_TRUE(hp->uniform_attention());
    EXPECT_EQ(hp->n_kv_layers(), 5);
    EXPECT_EQ(hp->norm_weight, NormWeight::kPlain);
}

TEST(LayerKinds, BadPlansAreClearErrors) {
    {  // every layer a DeltaNet: no layer to keep a KV cache or position information
        nlohmann::json j = qwen35_moe_text(2);
        j["layer_types"] = {"linear_attention", "linear_attention"};
        auto hp = from_json(j);
        ASSERT_FALSE(hp.ok());
        EXPECT_NE(hp.error().message.find("no attention layer"), std::string::npos) << hp.error().message;
    }
    {  // an unknown layer type
        nlohmann::json j = qwen35_moe_text(2);
        j["layer_types"] = {"full_attention", "sliding_attention"};
        auto hp = from_json(j);
        ASSERT_FALSE(hp.ok());
        EXPECT_NE(hp.error().message.find("sliding_attention"), std::string::npos) << hp.error().message;
    }
    {  // more layer types than layers
        nlohmann::json j = qwen35_moe_text(2);
        j["layer_types"] = {"full_attention", "linear_attention", "full_attention"};
        auto hp = from_json(j);
        ASSERT_FALSE(hp.ok());
        EXPECT_NE(hp.error().message.find("layer_types has 3 entries"), std::string::npos)
            << hp.error().message;
    }
    {  // a layer count no file needs, refused before anything is sized by it
        nlohmann::json j = qwen35_moe_text(2);
        j["num_hidden_layers"] = 1 << 20;
        auto hp = from_json(j);
        ASSERT_FALSE(hp.ok());
        EXPECT_NE(hp.error().message.find("num_hidden_layers 1048576 is above the supported 4096"),
                  std::string::npos)
            << hp.error().message;
    }
}

}  // namespace
}  // namespace pelican
