// GGUF metadata for `pelican convert` (see metadata.h).
#include "convert/metadata.h"

#include <fmt/format.h>

#include "core/log.h"
#include "formats/gguf_writer.h"
#include "model/rope_freq.h"
#include "tokenizer/pretokenizer.h"

namespace pelican {
namespace {

void put(std::vector<GgufKV>& kvs, std::string key, GgufValue v) {
    kvs.push_back({std::move(key), std::move(v)});
}

}  // namespace

void append_general_kvs(std::vector<GgufKV>& kvs, std::string_view arch_name, std::string_view model_name,
                        DType requested) {
    put(kvs, "general.architecture", gguf_string(std::string(arch_name)));
    if (!model_name.empty()) put(kvs, "general.name", gguf_string(std::string(model_name)));
    put(kvs, "general.file_type", gguf_u32(gguf_file_type(requested)));
    put(kvs, "general.quantization_version", gguf_u32(2));
}

Expected<HparamKvs> hparam_kvs(const HfConfig& c, const ModelHParams& hp, int64_t n_vocab) {
    const ArchSpec& arch = *hp.arch;
    const std::string a = std::string(arch.gguf_write_name) + ".";
    HparamKvs out;
    auto& kvs = out.kvs;
    const auto u32 = [](int64_t v) { return gguf_u32(static_cast<uint32_t>(v)); };
    if (hp.n_ctx_train > 0) put(kvs, a + "context_length", u32(hp.n_ctx_train));
    put(kvs, a + "embedding_length", u32(hp.n_embd));
    put(kvs, a + "block_count", u32(hp.n_layer));
    put(kvs, a + "feed_forward_length", u32(hp.n_ff));
    put(kvs, a + "attention.head_count", u32(hp.n_head));
    put(kvs, a + "attention.head_count_kv", u32(hp.n_head_kv));
    put(kvs, a + "attention.key_length", u32(hp.head_dim));
    put(kvs, a + "attention.value_length", u32(hp.head_dim));
    put(kvs, a + "attention.layer_norm_rms_epsilon", gguf_f32(hp.rms_eps));
    put(kvs, a + "rope.dimension_count", u32(hp.rope_dim));
    put(kvs, a + "rope.freq_base", gguf_f32(static_cast<float>(hp.rope_theta)));
    put(kvs, a + "vocab_size", u32(n_vocab));

    if (c.rope_scaling) {
        const RopeScaling& s = *c.rope_scaling;
        if (s.type == "linear" || s.type == "yarn") {
            put(kvs, a + "rope.scaling.type", gguf_string(s.type));
            put(kvs, a + "rope.scaling.factor", gguf_f32(static_cast<float>(s.factor)));
            if (s.original_max_position_embeddings)
                put(kvs, a + "rope.scaling.original_context_length",
                    u32(*s.original_max_position_embeddings));
            if (s.type == "yarn") {
                if (s.attention_factor)
                    put(kvs, a + "rope.scaling.attn_factor",
                        gguf_f32(static_cast<float>(*s.attention_factor)));
                if (s.beta_fast)
                    put(kvs, a + "rope.scaling.yarn_beta_fast", gguf_f32(static_cast<float>(*s.beta_fast)));
                if (s.beta_slow)
                    put(kvs, a + "rope.scaling.yarn_beta_slow", gguf_f32(static_cast<float>(*s.beta_slow)));
            }
        } else if (s.type == "llama3") {
            PELICAN_ASSIGN(RopeFreqs base, compute_rope_freqs(hp.rope_dim, hp.rope_theta, nullptr,
                                                              hp.n_ctx_train, "config.json"));
            PELICAN_ASSIGN(RopeFreqs scaled,
                           compute_rope_freqs(hp.rope_dim, hp.rope_theta, &s, hp.n_ctx_train, "config.json"));
            auto factors = std::make_shared<std::vector<float>>(base.inv_freq.size());
            for (size_t i = 0; i < factors->size(); ++i)
                (*factors)[i] = base.inv_freq[i] / scaled.inv_freq[i];
            PlannedTensor t;
            t.name = "rope_freqs.weight";
            t.dims = {factors->size()};
            t.generate = [factors](int64_t, float* dst) { std::copy(factors->begin(), factors->end(), dst); };
            out.rope_freqs = std::move(t);
        } else if (s.type == "dynamic") {
            log_warn(
                "rope scaling \"dynamic\" is not written to GGUF (exact up to the trained context, as "
                "llama.cpp)");
        } else if (s.type != "default") {
            return make_error("config.json: rope scaling \"{}\" cannot be written to GGUF", s.type);
        }
    }
    // Mistral's window: pelican applies it; llama.cpp's llama arch ignores the key (full attention).
    if (arch.sliding_window && c.sliding_window && *c.sliding_window > 0)
        put(kvs, a + "attention.sliding_window", u32(*c.sliding_window));
    if (arch.scalar_multipliers) {
        put(kvs, a + "embedding_scale", gguf_f32(hp.embd_scale));
        put(kvs, a + "residual_scale", gguf_f32(hp.residual_scale));
        put(kvs, a + "attention.scale", gguf_f32(hp.attn_scale));
        put(kvs, a + "logit_scale", gguf_f32(static_cast<float>(c.logits_scaling)));
    }
    return out;
}

std::optional<std::string> detect_pre_name(const TokenizerSpec& spec) {
    if (!spec.pre_name.empty()) return spec.pre_name;
    // Preference order when several presets share regexes (llama.cpp's usual names first).
    static constexpr const char* kNames[] = {
        "llama-bpe", "qwen2",          "gpt-2",        "starcoder", "smollm",    "falcon", "default",
        "dbrx",      "deepseek-coder", "deepseek-llm", "stablelm2", "smaug-bpe", "refact"};
    for (const char* name : kNames) {
        const PreTokenizerPreset* p = find_pretokenizer_preset(name);
        if (p && p->regexes == spec.pre_regexes && p->ignore_merges == spec.ignore_merges &&
            p->normalize_nfc == spec.normalize_nfc)
            return std::string(name);
    }
    return std::nullopt;
}

void append_sampling_kvs(std::vector<GgufKV>& kvs, const GenerationDefaults& d) {
    const bool greedy = d.do_sample && !*d.do_sample;
    if (greedy)
        kvs.push_back({"general.sampling.temp", gguf_f32(0.0f)});
    else if (d.temperature)
        kvs.push_back({"general.sampling.temp", gguf_f32(*d.temperature)});
    if (d.top_p) kvs.push_back({"general.sampling.top_p", gguf_f32(*d.top_p)});
    if (d.top_k) kvs.push_back({"general.sampling.top_k", gguf_i32(*d.top_k)});
    if (d.min_p) kvs.push_back({"general.sampling.min_p", gguf_f32(*d.min_p)});
    if (d.repetition_penalty)
        kvs.push_back({"general.sampling.penalty_repeat", gguf_f32(*d.repetition_penalty)});
    if (d.penalty_last_n) kvs.push_back({"general.sampling.penalty_last_n", gguf_i32(*d.penalty_last_n)});
}

Status append_tokenizer_kvs(std::vector<GgufKV>& kvs, const TokenizerSpec& spec, int64_t n_vocab) {
    const size_t n_tok = spec.tokens.size();
    if (n_vocab < 0 || n_tok > static_cast<size_t>(n_vocab))
        return make_error("the tokenizer has {} tokens but the model's embedding has only {} rows", n_tok,
                          n_vocab);
    const auto n = static_cast<size_t>(n_vocab);

    std::string model, pre;
    switch (spec.kind) {
        case TokenizerKind::SPM:
            model = "llama", pre = "default";
            break;
        case TokenizerKind::BPE: {
            model = "gpt2";
            if (auto p = detect_pre_name(spec))
                pre = *p;
            else
                log_warn(
                    "the tokenizer's pre-tokenizer matches no known tokenizer.ggml.pre preset; the key is "
                    "left "
                    "out and readers fall back to the GPT-2 regex");
            break;
        }
        case TokenizerKind::WordPiece:
            model = "bert", pre = "default";
            break;
    }
    put(kvs, "tokenizer.ggml.model", gguf_string(model));
    if (!pre.empty()) put(kvs, "tokenizer.ggml.pre", gguf_string(pre));

    std::vector<GgufValue> tokens, scores, types;
    tokens.reserve(n);
    types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        if (i < n_tok) {
            tokens.push_back(gguf_string(spec.tokens[i]));
            const TokenType t = i < spec.types.size() ? spec.types[i] : TokenType::Normal;
            types.push_back(
                gguf_i32(static_cast<int32_t>(t == TokenType::Undefined ? TokenType::Normal : t)));
        } else {
            tokens.push_back(gguf_string(fmt::format("[PAD{}]", i)));
            types.push_back(gguf_i32(static_cast<int32_t>(TokenType::Unused)));
        }
    }
    put(kvs, "tokenizer.ggml.tokens", gguf_array(GgufType::STRING, std::move(tokens)));
    if (!spec.scores.empty()) {
        scores.reserve(n);
        for (size_t i = 0; i < n; ++i)
            scores.push_back(gguf_f32(i < spec.scores.size() ? spec.scores[i] : -1000.0f));
        put(kvs, "tokenizer.ggml.scores", gguf_array(GgufType::F32, std::move(scores)));
    }
    put(kvs, "tokenizer.ggml.token_type", gguf_array(GgufType::I32, std::move(types)));
    if (spec.kind == TokenizerKind::BPE) {
        std::vector<GgufValue> merges;
        merges.reserve(spec.merges.size());
        for (const auto& [l, r] : spec.merges) merges.push_back(gguf_string(l + " " + r));
        put(kvs, "tokenizer.ggml.merges", gguf_array(GgufType::STRING, std::move(merges)));
    }
    const auto id = [&](const char* key, int32_t v) {
        if (v >= 0) put(kvs, key, gguf_u32(static_cast<uint32_t>(v)));
    };
    id("tokenizer.ggml.bos_token_id", spec.bos_id);
    id("tokenizer.ggml.eos_token_id", spec.eos_id);
    id("tokenizer.ggml.unknown_token_id", spec.unk_id);
    id("tokenizer.ggml.seperator_token_id", spec.sep_id);  // sic: llama.cpp's spelling
    id("tokenizer.ggml.padding_token_id", spec.pad_id);
    id("tokenizer.ggml.cls_token_id", spec.cls_id);
    id("tokenizer.ggml.mask_token_id", spec.mask_id);
    put(kvs, "tokenizer.ggml.add_bos_token", gguf_bool(spec.add_bos));
    put(kvs, "tokenizer.ggml.add_eos_token", gguf_bool(spec.add_eos));
    if (spec.kind == TokenizerKind::SPM)
        put(kvs, "tokenizer.ggml.add_space_prefix", gguf_bool(spec.add_space_prefix));
    if (!spec.chat_template.empty()) put(kvs, "tokenizer.chat_template", gguf_string(spec.chat_template));
    return {};
}

}  // namespace pelican
