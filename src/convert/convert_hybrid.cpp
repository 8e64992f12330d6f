// Plan for a Hugging Face Qwen3.5 hybrid folder (qwen3_5_moe / qwen3_5) -> GGUF with llama.cpp's
// names and layout for the archs qwen35moe / qwen35 (see convert_hybrid.h). The transforms are the
// ones llama.cpp's converter applies (third_party/llama.cpp conversion/qwen.py, read not copied):
//   - zero-centred RMSNorm weights (all but linear_attn.norm) are written as 1 + w;
//   - A_log is written as A = -exp(A_log) (blk.N.ssm_a), dt_bias as blk.N.ssm_dt.bias;
//   - conv1d [C, 1, K] becomes [C, K];
//   - DeltaNet value heads go from HF's grouped order (by key head) to tiled order: the V rows of
//     in_proj_qkv and the conv channels, the rows of in_proj_z / in_proj_a / in_proj_b, A_log,
//     dt_bias and the columns of out_proj;
//   - fused experts gate_up_proj [E, 2I, H] split into ffn_gate_exps / ffn_up_exps [E, I, H];
//     per-expert tensors are stacked; down_proj becomes ffn_down_exps [E, H, I];
//   - the MTP block becomes layer n_layer (block_count counts it; nextn_predict_layers = 1):
//     mtp.fc -> nextn.eh_proj, pre_fc_norm_embedding -> nextn.enorm, pre_fc_norm_hidden ->
//     nextn.hnorm, mtp.norm -> nextn.shared_head_norm, mtp.layers.0.* -> blk.{n_layer}.*.
// The full-attention q_proj keeps its per-head [query | gate] rows. Vision tensors are skipped.
#include "convert/convert_hybrid.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "convert/metadata.h"
#include "core/log.h"
#include "formats/gguf_writer.h"
#include "formats/hf_folder.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

// A source tensor read as fp32 elements.
struct Src {
    const uint8_t* data = nullptr;
    DType type = DType::F32;
    size_t elem_bytes = 4;
    void read(uint64_t off, uint64_t n, float* dst) const {
        dtype_info(type).to_float(data + off * elem_bytes, dst, static_cast<int64_t>(n));
    }
};

Expected<Src> source(const SafetensorsTensor& t, const std::string& folder) {
    if (!t.dtype || !(*t.dtype == DType::F32 || *t.dtype == DType::F16 || *t.dtype == DType::BF16))
        return make_error("{}: tensor {} has dtype {}; convert reads F32, F16 and BF16 checkpoints", folder,
                          t.name, t.dtype_str);
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;
    const size_t eb = dtype_info(*t.dtype).block_bytes;
    if (t.data.size() != n * eb)
        return make_error("{}: tensor {} holds {} bytes, its shape needs {}", folder, t.name, t.data.size(),
                          n * eb);
    return Src{t.data.data(), *t.dtype, eb};
}

// GGUF writing order: token_embd, blk.0.*, blk.1.*, ..., output_norm, output.
std::pair<int64_t, std::string_view> order_key(std::string_view name) {
    if (name.starts_with("token_embd.")) return {-1, name};
    if (name.starts_with("blk.")) {
        int64_t layer = 0;
        std::from_chars(name.data() + 4, name.data() + name.size(), layer);
        return {layer, name};
    }
    return {name.starts_with("output_norm.") ? INT64_MAX - 1 : INT64_MAX, name};
}

// The grouped -> tiled value-head reorder (copied into the row generators, which outlive the planner).
struct VHeads {
    int64_t nk = 1, r = 1;
    // Source value-head index of tiled output head j (HF groups value heads by key head).
    int64_t src_head(int64_t j) const { return (j % nk) * r + j / nk; }
    // Source row of output row o of a [n_v_heads * hd, ...] block that starts at row `skip`.
    int64_t row(int64_t o, int64_t hd, int64_t skip = 0) const {
        if (o < skip) return o;
        const int64_t j = (o - skip) / hd, d = (o - skip) % hd;
        return skip + src_head(j) * hd + d;
    }
};

class Planner {
public:
    Planner(const ModelHParams& hp, const std::string& folder)
        : hp_(hp),
          folder_(folder),
          vh_{std::max(hp_.deltanet.linear.n_k_heads, 1),
              hp_.deltanet.linear.n_k_heads > 0
                  ? hp_.deltanet.linear.n_v_heads / hp_.deltanet.linear.n_k_heads
                  : 1} {}

    std::vector<PlannedTensor> tensors;

    // Copies rows (dims in GGUF order) with an optional source-row map and value transform.
    void rows(std::string name, std::vector<uint64_t> dims, Src s,
              std::function<int64_t(int64_t)> row_map = {}, float (*fn)(float) = nullptr) {
        PlannedTensor p;
        p.name = std::move(name);
        p.dims = std::move(dims);
        const uint64_t n = p.dims[0];
        p.generate = [s, n, row_map, fn](int64_t r, float* dst) {
            const int64_t sr = row_map ? row_map(r) : r;
            s.read(static_cast<uint64_t>(sr) * n, n, dst);
            if (fn)
                for (uint64_t i = 0; i < n; ++i) dst[i] = fn(dst[i]);
        };
        tensors.push_back(std::move(p));
    }

    Status layer_tensor(const std::string& blk, const std::string& rest, const SafetensorsTensor& t, Src s) {
        const auto& sh = t.shape;
        const std::vector<uint64_t> rev(sh.rbegin(), sh.rend());
        const auto plus_one = [](float w) { return 1.0f + w; };
        const int64_t kd = hp_.deltanet.linear.key_dim(), dv = hp_.deltanet.linear.d_v;
        const VHeads vh = vh_;
        static const std::map<std::string, std::string> plain = {
            {"self_attn.q_proj.weight", "attn_q.weight"},
            {"self_attn.k_proj.weight", "attn_k.weight"},
            {"self_attn.v_proj.weight", "attn_v.weight"},
            {"self_attn.o_proj.weight", "attn_output.weight"},
            {"linear_attn.norm.weight", "ssm_norm.weight"},
            {"mlp.gate.weight", "ffn_gate_inp.weight"},
            {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
            {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
            {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
            {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
            {"mlp.gate_proj.weight", "ffn_gate.weight"},
            {"mlp.up_proj.weight", "ffn_up.weight"},
            {"mlp.down_proj.weight", "ffn_down.weight"},
        };
        static const std::map<std::string, std::string> zc = {
            {"input_layernorm.weight", "attn_norm.weight"},
            {"post_attention_layernorm.weight", "post_attention_norm.weight"},
            {"self_attn.q_norm.weight", "attn_q_norm.weight"},
            {"self_attn.k_norm.weight", "attn_k_norm.weight"},
        };
        if (auto it = plain.find(rest); it != plain.end()) {
            rows(blk + it->second, rev, s);
        } else if (auto z = zc.find(rest); z != zc.end()) {
            rows(blk + z->second, rev, s, {}, +plus_one);
        } else if (rest == "linear_attn.in_proj_qkv.weight") {
            rows(blk + "attn_qkv.weight", rev, s, [vh, dv, kd](int64_t o) { return vh.row(o, dv, 2 * kd); });
        } else if (rest == "linear_attn.in_proj_z.weight") {
            rows(blk + "attn_gate.weight", rev, s, [vh, dv](int64_t o) { return vh.row(o, dv); });
        } else if (rest == "linear_attn.in_proj_b.weight" || rest == "linear_attn.in_proj_a.weight") {
            rows(blk + (rest.find("in_proj_b") != std::string::npos ? "ssm_beta.weight" : "ssm_alpha.weight"),
                 rev, s, [vh](int64_t o) { return vh.row(o, 1); });
        } else if (rest == "linear_attn.conv1d.weight") {
            if (sh.size() != 3 || sh[1] != 1)
                return make_error("{}: tensor {} is not [C, 1, K]", folder_, t.name);
            rows(blk + "ssm_conv1d.weight", {sh[2], sh[0]}, s,
                 [vh, dv, kd](int64_t o) { return vh.row(o, dv, 2 * kd); });
        } else if (rest == "linear_attn.dt_bias" || rest == "linear_attn.A_log") {
            // 1-D [n_v_heads]: one "row" of n_v_heads values, reordered element by element.
            const bool a = rest.ends_with("A_log");
            const uint64_t nv = sh.at(0);
            PlannedTensor p;
            p.name = blk + (a ? "ssm_a" : "ssm_dt.bias");
            p.dims = {nv};
            p.generate = [vh, s, nv, a](int64_t, float* dst) {
                std::vector<float> v(nv);
                s.read(0, nv, v.data());
                for (uint64_t j = 0; j < nv; ++j) {
                    const float x = v[static_cast<size_t>(vh.src_head(static_cast<int64_t>(j)))];
                    dst[j] = a ? -std::exp(x) : x;
                }
            };
            tensors.push_back(std::move(p));
        } else if (rest == "linear_attn.out_proj.weight") {
            const uint64_t n_in = sh.at(1);
            PlannedTensor p;
            p.name = blk + "ssm_out.weight";
            p.dims = rev;
            p.generate = [vh, s, n_in, dv](int64_t r, float* dst) {
                std::vector<float> v(n_in);
                s.read(static_cast<uint64_t>(r) * n_in, n_in, v.data());
                for (uint64_t c = 0; c < n_in; ++c)
                    dst[c] = v[static_cast<size_t>(vh.row(static_cast<int64_t>(c), dv))];
            };
            tensors.push_back(std::move(p));
        } else if (rest == "mlp.experts.gate_up_proj") {
            if (sh.size() != 3 || sh[1] % 2 != 0)
                return make_error("{}: tensor {} is not [E, 2I, H]", folder_, t.name);
            const auto ff = static_cast<int64_t>(sh[1] / 2);
            for (int half = 0; half < 2; ++half)
                rows(blk + (half ? "ffn_up_exps.weight" : "ffn_gate_exps.weight"), {sh[2], sh[1] / 2, sh[0]},
                     s, [ff, half](int64_t o) { return (o / ff) * 2 * ff + half * ff + o % ff; });
        } else if (rest == "mlp.experts.down_proj") {
            rows(blk + "ffn_down_exps.weight", rev, s);
        } else if (rest.starts_with("mlp.experts.")) {
            // per expert: mlp.experts.{e}.{gate,up,down}_proj.weight, stacked once all are seen
            const std::string tail = rest.substr(12);
            const size_t dot = tail.find('.');
            int64_t e = -1;
            std::from_chars(tail.data(), tail.data() + dot, e);
            const std::string which = dot == std::string::npos ? "" : tail.substr(dot + 1);
            if (e < 0 || e >= hp_.moe.n_expert || sh.size() != 2 ||
                (which != "gate_proj.weight" && which != "up_proj.weight" && which != "down_proj.weight"))
                return make_error("{}: tensor {} is not a known expert tensor", folder_, t.name);
            auto& group = experts_[blk + which];
            group.shape = sh;
            group.src.resize(static_cast<size_t>(hp_.moe.n_expert));
            group.src[static_cast<size_t>(e)] = s;
            group.seen.insert(e);
        } else {
            return make_error("{}: tensor {} has no GGUF name for a {} model", folder_, t.name,
                              hp_.arch->name);
        }
        return {};
    }

    Status finish_experts() {
        for (auto& [key, g] : experts_) {
            if (static_cast<int64_t>(g.seen.size()) != hp_.moe.n_expert)
                return make_error("{}: {} of {} experts found for {}", folder_, g.seen.size(),
                                  hp_.moe.n_expert, key);
            const size_t dot = key.find('.', 4);  // "blk.N."
            const std::string blk = key.substr(0, dot + 1), which = key.substr(dot + 1);
            const std::string name = blk + "ffn_" + which.substr(0, which.find('_')) + "_exps.weight";
            const uint64_t n_out = g.shape[0], n_in = g.shape[1];
            PlannedTensor p;
            p.name = name;
            p.dims = {n_in, n_out, static_cast<uint64_t>(hp_.moe.n_expert)};
            auto srcs = g.src;
            p.generate = [srcs, n_in, n_out](int64_t r, float* dst) {
                srcs[static_cast<size_t>(static_cast<uint64_t>(r) / n_out)].read(
                    (static_cast<uint64_t>(r) % n_out) * n_in, n_in, dst);
            };
            tensors.push_back(std::move(p));
        }
        return {};
    }

private:
    struct ExpertGroup {
        std::vector<uint64_t> shape;
        std::vector<Src> src;
        std::set<int64_t> seen;
    };
    const ModelHParams& hp_;

    const std::string& folder_;
    VHeads vh_;
    std::map<std::string, ExpertGroup> experts_;
};

}  // namespace

Status append_hybrid_kvs(std::vector<GgufKV>& kvs, const HfConfig& cfg, const ModelHParams& hp,
                         int64_t n_vocab, int64_t n_mtp, const std::string& where) {
    const std::string arch_name(hp.arch->gguf_write_name);
    const std::string a = arch_name + ".";
    const auto put = [&](std::string key, GgufValue v) { kvs.push_back({a + key, std::move(v)}); };
    const auto u32 = [](int64_t v) { return gguf_u32(static_cast<uint32_t>(v)); };
    if (hp.n_ctx_train > 0) put("context_length", u32(hp.n_ctx_train));
    put("embedding_length", u32(hp.n_embd));
    put("block_count", u32(hp.n_layer + n_mtp));
    if (n_mtp > 0) put("nextn_predict_layers", u32(n_mtp));
    put("attention.head_count", u32(hp.n_head));
    put("attention.head_count_kv", u32(hp.n_head_kv));
    put("attention.key_length", u32(hp.head_dim));
    put("attention.value_length", u32(hp.head_dim));
    put("attention.layer_norm_rms_epsilon", gguf_f32(hp.rms_eps));
    put("rope.dimension_count", u32(hp.rope_dim));
    put("rope.freq_base", gguf_f32(static_cast<float>(hp.rope_theta)));
    {
        std::vector<int64_t> sec = {11, 11, 10, 0};
        if (cfg.rope_scaling && !cfg.rope_scaling->mrope_section.empty())
            sec = cfg.rope_scaling->mrope_section;
        sec.resize(4, 0);
        std::vector<GgufValue> arr;
        for (int64_t v : sec) arr.push_back(gguf_i32(static_cast<int32_t>(v)));
        put("rope.dimension_sections", gguf_array(GgufType::I32, std::move(arr)));
    }
    put("vocab_size", u32(n_vocab));
    if (hp.has(Ffn::kMoe)) {
        put("expert_count", u32(hp.moe.n_expert));
        put("expert_used_count", u32(hp.moe.n_expert_used));
        put("expert_feed_forward_length", u32(hp.moe.n_ff_expert));
        put("expert_shared_feed_forward_length", u32(hp.moe.n_ff_shared));
        put("feed_forward_length", u32(hp.moe.n_ff_expert));
    } else {
        put("feed_forward_length", u32(hp.n_ff));
    }
    put("ssm.conv_kernel", u32(hp.deltanet.conv_kernel));
    put("ssm.state_size", u32(hp.deltanet.linear.d_k));
    put("ssm.group_count", u32(hp.deltanet.linear.n_k_heads));
    put("ssm.time_step_rank", u32(hp.deltanet.linear.n_v_heads));
    put("ssm.inner_size", u32(hp.deltanet.linear.value_dim()));
    // llama.cpp marks full attention by an interval: find the one layer_types follows.
    int64_t every = 0;
    for (int64_t k = 1; k <= hp.n_layer && every == 0; ++k) {
        bool ok = true;
        for (int64_t i = 0; i < hp.n_layer && ok; ++i)
            ok = (hp.layer[static_cast<size_t>(i)].mixer == Mixer::kGatedAttention) == ((i + 1) % k == 0);
        if (ok) every = k;
    }
    if (every == 0)
        return make_error(
            "{}: layer_types is not every-k-th-layer full attention (llama.cpp's "
            "full_attention_interval cannot express it)",
            where);
    put("full_attention_interval", u32(every));
    return {};
}

Expected<ConvertJob> plan_convert_hybrid(const std::string& folder, const ConvertOptions& opt,
                                         const HfConfig& cfg, const ModelHParams& hp) {
    auto tok = Tokenizer::from_hf(folder);
    if (!tok) return make_error("{}: cannot read the tokenizer: {}", folder, tok.error().message);
    PELICAN_ASSIGN(HfWeights weights, HfWeights::open(folder));
    auto w = std::make_shared<HfWeights>(std::move(weights));

    // Layer prefix of the checkpoint: model.language_model. (multimodal) or model. (text-only).
    const std::string prefix =
        w->find("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
    const bool has_mtp = w->find("mtp.fc.weight") != nullptr;
    const int64_t n_mtp = has_mtp ? std::max<int64_t>(hp.n_mtp_layers, 1) : 0;
    if (n_mtp > 1) return make_error("{}: {} MTP layers (llama.cpp's qwen35 archs take one)", folder, n_mtp);

    ConvertJob job;
    job.keepalive = w;
    Planner P(hp, folder);
    const auto plus_one = [](float x) { return 1.0f + x; };
    int64_t n_vocab = 0, skipped = 0;
    const std::string mtp_blk = fmt::format("blk.{}.", hp.n_layer);
    for (const SafetensorsTensor* t : w->tensors()) {
        const std::string& n = t->name;
        if (n.starts_with("model.visual.") || n.starts_with("visual.") ||
            n.ends_with("rotary_emb.inv_freq")) {
            ++skipped;
            continue;
        }
        PELICAN_ASSIGN(const Src s, source(*t, folder));
        const std::vector<uint64_t> rev(t->shape.rbegin(), t->shape.rend());
        if (n == prefix + "embed_tokens.weight") {
            if (t->shape.size() != 2) return make_error("{}: tensor {} is not 2-D", folder, n);
            n_vocab = static_cast<int64_t>(t->shape[0]);
            P.rows("token_embd.weight", rev, s);
        } else if (n == prefix + "norm.weight") {
            P.rows("output_norm.weight", rev, s, {}, +plus_one);
        } else if (n == "lm_head.weight") {
            if (!cfg.tie_word_embeddings) P.rows("output.weight", rev, s);
        } else if (n.starts_with(prefix + "layers.")) {
            const std::string r = n.substr(prefix.size() + 7);
            const size_t dot = r.find('.');
            PELICAN_TRY(P.layer_tensor("blk." + r.substr(0, dot) + ".", r.substr(dot + 1), *t, s));
        } else if (n == "mtp.fc.weight") {
            P.rows(mtp_blk + "nextn.eh_proj.weight", rev, s);
        } else if (n == "mtp.pre_fc_norm_embedding.weight") {
            P.rows(mtp_blk + "nextn.enorm.weight", rev, s, {}, +plus_one);
        } else if (n == "mtp.pre_fc_norm_hidden.weight") {
            P.rows(mtp_blk + "nextn.hnorm.weight", rev, s, {}, +plus_one);
        } else if (n == "mtp.norm.weight") {
            P.rows(mtp_blk + "nextn.shared_head_norm.weight", rev, s, {}, +plus_one);
        } else if (n.starts_with("mtp.layers.0.")) {
            PELICAN_TRY(P.layer_tensor(mtp_blk, n.substr(13), *t, s));
        } else {
            return make_error("{}: tensor {} has no GGUF name for a {} model (not part of the architecture)",
                              folder, n, hp.arch->name);
        }
    }
    PELICAN_TRY(P.finish_experts());
    if (skipped > 0)
        log_info("{}: skipped {} vision / buffer tensors (not part of the text model)", folder, skipped);
    if (n_vocab == 0) return make_error("{}: no token embeddings ({}embed_tokens.weight)", folder, prefix);
    job.tensors = std::move(P.tensors);

    // Metadata, as llama.cpp's converter and loader name it.
    std::string name = opt.name;
    if (name.empty()) name = std::filesystem::path(folder).lexically_normal().filename().string();
    if (name.empty() || name == ".")
        name = std::filesystem::absolute(folder).lexically_normal().parent_path().filename().string();
    const std::string arch_name(hp.arch->gguf_write_name);
    append_general_kvs(job.kvs, arch_name, name, opt.type);
    PELICAN_TRY(append_hybrid_kvs(job.kvs, cfg, hp, n_vocab, n_mtp, folder));
    {
        const GenerationDefaults gen = read_generation_config(folder);
        for (const std::string& w : gen.warnings) log_warn("{}", w);
        append_sampling_kvs(job.kvs, gen);
    }
    PELICAN_TRY(append_tokenizer_kvs(job.kvs, tok->spec(), n_vocab));

    std::stable_sort(
        job.tensors.begin(), job.tensors.end(),
        [](const PlannedTensor& x, const PlannedTensor& y) { return order_key(x.name) < order_key(y.name); });
    assign_output_types(job, opt.type);
    return job;
}

}  // namespace pelican
