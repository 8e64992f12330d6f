// Synthetic model plans (see synthetic.h).
#include "convert/synthetic.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "convert/convert_hybrid.h"
#include "convert/metadata.h"
#include "formats/gguf_writer.h"
#include "formats/hf_config.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "model/tensor_names.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

const ArchSpec* find_arch(std::string_view name) {
    for (const ArchSpec* a : all_archs())
        if (a->name == name) return a;
    return find_arch_by_hf_model_type(name);
}

}  // namespace

void synthetic_row(uint64_t seed, std::string_view name, int64_t row, float mean, float std, float* dst,
                   int64_t n) {
    uint64_t state = seed ^ fnv1a(name);
    state = splitmix64(state) + static_cast<uint64_t>(row) * 0xD1B54A32D192ED03ull;
    // Sum X of four 16-bit uniforms: (X + 2) / 65536 is Irwin-Hall(4) (mean 2, variance 1/3).
    const float c = std * std::sqrt(3.0f) / 65536.0f;
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t x = splitmix64(state);
        const int64_t sum =
            static_cast<int64_t>((x & 0xffff) + ((x >> 16) & 0xffff) + ((x >> 32) & 0xffff) + (x >> 48));
        dst[i] = mean + c * static_cast<float>(sum + 2 - 131072);
    }
}

Expected<ConvertJob> plan_synthetic(const SyntheticOptions& s, const ConvertOptions& opt) {
    const ArchSpec* arch = find_arch(s.arch);
    if (!arch)
        return make_error("unknown architecture \"{}\" (supported: {})", s.arch, supported_arch_list());
    if (arch->gguf_write_name.empty())
        return make_error(
            "--synthetic {}: this architecture has no GGUF layout yet (Hugging Face folders only)", s.arch);

    nlohmann::json j;
    try {
        j = nlohmann::json::parse(s.config_json);
    } catch (const nlohmann::json::exception& e) {
        return make_error("{}: not valid JSON: {}", s.config_name, e.what());
    }
    if (!j.is_object()) return make_error("{}: expected a JSON object of config.json keys", s.config_name);
    const std::string model_type(arch->hf_model_types.empty() ? arch->name : arch->hf_model_types[0]);
    if (auto it = j.find("model_type"); it != j.end() && !it->is_null()) {
        if (!it->is_string() || find_arch(it->get<std::string>()) != arch)
            return make_error("{}: model_type {} does not match the requested architecture {}", s.config_name,
                              it->dump(), s.arch);
    }
    j["model_type"] = model_type;

    auto tok = Tokenizer::load(s.vocab);
    if (!tok) return make_error("{}: cannot read the vocabulary: {}", s.vocab, tok.error().message);
    if (!j.contains("vocab_size") || j["vocab_size"].is_null()) j["vocab_size"] = tok->n_vocab();
    if (!j.contains("max_position_embeddings") || j["max_position_embeddings"].is_null())
        j["max_position_embeddings"] = 4096;
    double init_std = 0.02;
    if (auto it = j.find("initializer_range"); it != j.end() && !it->is_null()) {
        if (!it->is_number() || !(it->get<double>() > 0) || !(it->get<double>() < 1))
            return make_error("{}: initializer_range must be a number in (0, 1), found {}", s.config_name,
                              it->dump());
        init_std = it->get<double>();
    }

    PELICAN_ASSIGN(HfConfig cfg, parse_hf_config(j.dump(), s.config_name));
    PELICAN_ASSIGN(ModelHParams hp, hparams_from_hf(cfg, *arch, s.config_name));
    const int64_t n_vocab = cfg.vocab_size;
    if (n_vocab <= 0) return make_error("{}: vocab_size must be positive, found {}", s.config_name, n_vocab);

    ConvertJob job;
    const float sd = static_cast<float>(init_std);
    const uint64_t seed = s.seed;
    const auto add = [&](std::string name, std::vector<uint64_t> dims, float mean) {
        PlannedTensor t;
        t.name = std::move(name);
        t.dims = std::move(dims);
        const auto row_len = static_cast<int64_t>(t.dims[0]);
        t.generate = [seed, name = t.name, mean, sd, row_len](int64_t row, float* dst) {
            synthetic_row(seed, name, row, mean, sd, dst, row_len);
        };
        job.tensors.push_back(std::move(t));
    };
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    const uint64_t E = u(hp.n_embd), Q = u(hp.q_dim()), KV = u(hp.kv_dim()), F = u(hp.n_ff),
                   HD = u(hp.head_dim);
    const uint64_t V = u(n_vocab);
    const bool qkv_bias = arch->qkv_bias == Need::Required || cfg.attention_bias;
    const bool out_bias =
        arch->out_bias == Need::Required || (cfg.attention_bias && arch->qkv_bias != Need::Required);
    const bool mlp_bias = arch->mlp_bias == Need::Required || cfg.mlp_bias;

    if (hp.arch->layer_plan == LayerPlan::kLayerTypes) {
        // Qwen3.5 (qwen35moe / qwen35) with llama.cpp's names and layout: norms hold 1 + w, ssm_a holds
        // A = -exp(A_log) < 0, experts are stacked [E, n_ff, n_embd] tensors, the MTP block is the nextn
        // layer blk.{n_layer}.
        if (cfg.mtp_num_hidden_layers > 1)
            return make_error("{}: {} MTP layers (llama.cpp's qwen35 archs take one)", s.config_name,
                              cfg.mtp_num_hidden_layers);
        const int64_t n_mtp = cfg.mtp_num_hidden_layers > 0 ? 1 : 0;
        const uint64_t QH = u(hp.n_head * hp.head_dim), KVH = u(hp.n_head_kv * hp.head_dim);
        const uint64_t C = u(hp.deltanet.linear.conv_dim()), VD = u(hp.deltanet.linear.value_dim()),
                       NV = u(hp.deltanet.linear.n_v_heads);
        const uint64_t X = u(hp.moe.n_expert), FE = u(hp.moe.n_ff_expert), FS = u(hp.moe.n_ff_shared);
        add("token_embd.weight", {E, V}, 0);
        for (int64_t i = 0; i < hp.n_layer + n_mtp; ++i) {
            const std::string b = fmt::format("blk.{}.", i);
            const bool full =
                i >= hp.n_layer || hp.layer[static_cast<size_t>(i)].mixer == Mixer::kGatedAttention;
            if (i >= hp.n_layer) {
                add(b + "nextn.eh_proj.weight", {2 * E, E}, 0);
                add(b + "nextn.enorm.weight", {E}, 1);
                add(b + "nextn.hnorm.weight", {E}, 1);
                add(b + "nextn.shared_head_norm.weight", {E}, 1);
            }
            add(b + "attn_norm.weight", {E}, 1);
            add(b + "post_attention_norm.weight", {E}, 1);
            if (full) {
                add(b + "attn_q.weight", {E, 2 * QH}, 0);  // per head [query | gate]
                add(b + "attn_k.weight", {E, KVH}, 0);
                add(b + "attn_v.weight", {E, KVH}, 0);
                add(b + "attn_output.weight", {QH, E}, 0);
                add(b + "attn_q_norm.weight", {HD}, 1);
                add(b + "attn_k_norm.weight", {HD}, 1);
            } else {
                add(b + "attn_qkv.weight", {E, C}, 0);
                add(b + "attn_gate.weight", {E, VD}, 0);
                add(b + "ssm_beta.weight", {E, NV}, 0);
                add(b + "ssm_alpha.weight", {E, NV}, 0);
                add(b + "ssm_conv1d.weight", {u(hp.deltanet.conv_kernel), C}, 0);
                add(b + "ssm_dt.bias", {NV}, 0);
                add(b + "ssm_a", {NV}, -0.35f);  // bounded samples: A in about [-0.70, -0.004]
                add(b + "ssm_norm.weight", {u(hp.deltanet.linear.d_v)}, 1);
                add(b + "ssm_out.weight", {VD, E}, 0);
            }
            if (hp.has(Ffn::kMoe)) {
                add(b + "ffn_gate_inp.weight", {E, X}, 0);
                add(b + "ffn_gate_exps.weight", {E, FE, X}, 0);
                add(b + "ffn_up_exps.weight", {E, FE, X}, 0);
                add(b + "ffn_down_exps.weight", {FE, E, X}, 0);
                add(b + "ffn_gate_inp_shexp.weight", {E, 1}, 0);
                add(b + "ffn_gate_shexp.weight", {E, FS}, 0);
                add(b + "ffn_up_shexp.weight", {E, FS}, 0);
                add(b + "ffn_down_shexp.weight", {FS, E}, 0);
            } else {
                add(b + "ffn_gate.weight", {E, F}, 0);
                add(b + "ffn_up.weight", {E, F}, 0);
                add(b + "ffn_down.weight", {F, E}, 0);
            }
        }
        add("output_norm.weight", {E}, 1);
        if (!cfg.tie_word_embeddings) add("output.weight", {E, V}, 0);
        const std::string name = opt.name.empty() ? "synthetic-" + std::string(arch->name) : opt.name;
        append_general_kvs(job.kvs, arch->gguf_write_name, name, opt.type);
        job.kvs.push_back(
            {"general.description",
             gguf_string(fmt::format("synthetic random weights (pelican convert --synthetic {}, seed {}, "
                                     "std {})",
                                     arch->name, seed, init_std))});
        PELICAN_TRY(append_hybrid_kvs(job.kvs, cfg, hp, n_vocab, n_mtp, s.config_name));
        PELICAN_TRY(append_tokenizer_kvs(job.kvs, tok->spec(), n_vocab));
        assign_output_types(job, opt.type);
        return job;
    }

    add("token_embd.weight", {E, V}, 0);
    for (int i = 0; i < hp.n_layer; ++i) {
        const auto n = [i](std::string_view base, std::string_view suffix = "weight") {
            return gguf_layer_tensor(i, base, suffix);
        };
        add(n("attn_norm"), {E}, 1);
        add(n("attn_q"), {E, Q}, 0);
        add(n("attn_k"), {E, KV}, 0);
        add(n("attn_v"), {E, KV}, 0);
        if (qkv_bias) {
            add(n("attn_q", "bias"), {Q}, 0);
            add(n("attn_k", "bias"), {KV}, 0);
            add(n("attn_v", "bias"), {KV}, 0);
        }
        if (arch->qk_norm == Need::Required) {
            add(n("attn_q_norm"), {HD}, 1);
            add(n("attn_k_norm"), {HD}, 1);
        }
        add(n("attn_output"), {Q, E}, 0);
        if (out_bias) add(n("attn_output", "bias"), {E}, 0);
        add(n("ffn_norm"), {E}, 1);
        add(n("ffn_gate"), {E, F}, 0);
        add(n("ffn_up"), {E, F}, 0);
        add(n("ffn_down"), {F, E}, 0);
        if (mlp_bias) {
            add(n("ffn_gate", "bias"), {F}, 0);
            add(n("ffn_up", "bias"), {F}, 0);
            add(n("ffn_down", "bias"), {E}, 0);
        }
    }
    add("output_norm.weight", {E}, 1);
    if (!cfg.tie_word_embeddings) add("output.weight", {E, V}, 0);

    const std::string name = opt.name.empty() ? "synthetic-" + std::string(arch->name) : opt.name;
    append_general_kvs(job.kvs, arch->gguf_write_name, name, opt.type);
    job.kvs.push_back(
        {"general.description",
         gguf_string(fmt::format("synthetic random weights (pelican convert --synthetic {}, seed {}, "
                                 "std {})",
                                 arch->name, seed, init_std))});
    PELICAN_ASSIGN(HparamKvs hk, hparam_kvs(cfg, hp, n_vocab));
    job.kvs.insert(job.kvs.end(), hk.kvs.begin(), hk.kvs.end());
    if (hk.rope_freqs) job.tensors.insert(job.tensors.begin() + 1, std::move(*hk.rope_freqs));
    PELICAN_TRY(append_tokenizer_kvs(job.kvs, tok->spec(), n_vocab));
    assign_output_types(job, opt.type);
    return job;
}

}  // namespace pelican
