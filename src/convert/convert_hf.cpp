// Plan for a Hugging Face folder -> GGUF (see convert.h).
#include <algorithm>
#include <charconv>
#include <filesystem>

#include "convert/convert.h"
#include "convert/convert_hybrid.h"
#include "convert/metadata.h"
#include "core/log.h"
#include "formats/hf_config.h"
#include "formats/hf_folder.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "model/tensor_names.h"
#include "tokenizer/tokenizer.h"

namespace pelican {
namespace {

// GGUF writing order: token_embd, rope_freqs, blk.0.*, blk.1.*, ..., output_norm, output.
std::pair<int64_t, std::string_view> order_key(std::string_view name) {
    if (name.starts_with("token_embd.")) return {-2, name};
    if (name.starts_with("rope_freqs.")) return {-1, name};
    if (name.starts_with("blk.")) {
        int64_t layer = 0;
        const char* b = name.data() + 4;
        std::from_chars(b, name.data() + name.size(), layer);
        return {layer, name};
    }
    return {name.starts_with("output_norm.") ? INT64_MAX - 1 : INT64_MAX, name};
}

Expected<DType> readable_float_type(const SafetensorsTensor& t, const std::string& folder) {
    if (t.dtype && (*t.dtype == DType::F32 || *t.dtype == DType::F16 || *t.dtype == DType::BF16 ||
                    *t.dtype == DType::F64))
        return *t.dtype;
    return make_error("{}: tensor {} has dtype {}; convert reads F32, F16 and BF16 checkpoints", folder,
                      t.name, t.dtype_str);
}

}  // namespace

Expected<ConvertJob> plan_convert_hf(const std::string& folder, const ConvertOptions& opt) {
    PELICAN_ASSIGN(HfConfig cfg, load_hf_config(folder));
    const std::string cfg_path = (std::filesystem::path(folder) / "config.json").string();
    if (!cfg.quant_method.empty())
        return make_error(
            "{}: quantized checkpoint (quant_method \"{}\"); convert reads F32/F16/BF16 checkpoints",
            cfg_path, cfg.quant_method);
    const ArchSpec* arch = find_arch_by_hf_model_type(cfg.model_type);
    if (!arch)
        return make_error("{}: model_type \"{}\" is not supported (supported: {})", cfg_path, cfg.model_type,
                          supported_arch_list());
    if (arch->gguf_write_name.empty())
        return make_error(
            "{}: model_type \"{}\" runs from its Hugging Face folder; converting it to GGUF is not "
            "supported yet",
            cfg_path, cfg.model_type);
    PELICAN_ASSIGN(ModelHParams hp, hparams_from_hf(cfg, *arch, cfg_path));
    if (arch->layer_plan == LayerPlan::kLayerTypes) return plan_convert_hybrid(folder, opt, cfg, hp);

    auto tok = Tokenizer::from_hf(folder);
    if (!tok) return make_error("{}: cannot read the tokenizer: {}", folder, tok.error().message);
    PELICAN_ASSIGN(HfWeights weights, HfWeights::open(folder));
    auto w = std::make_shared<HfWeights>(std::move(weights));

    ConvertJob job;
    job.keepalive = w;
    const bool permute = arch->gguf_rope == RopeLayout::kInterleaved;
    int64_t n_vocab = 0;
    for (const SafetensorsTensor* t : w->tensors()) {
        const std::optional<std::string> gname = hf_to_gguf_tensor_name(t->name);
        if (!gname) {
            if (t->name.ends_with("rotary_emb.inv_freq")) continue;  // a buffer HF recomputes
            return make_error("{}: tensor {} has no GGUF name for a {} model (not part of the architecture)",
                              folder, t->name, arch->name);
        }
        if (*gname == "output.weight" && cfg.tie_word_embeddings) continue;  // tied: token_embd serves
        PELICAN_ASSIGN(const DType src_type, readable_float_type(*t, folder));
        if (t->shape.empty() || t->shape.size() > 4)
            return make_error("{}: tensor {} has {} dimensions (1 to 4 supported)", folder, t->name,
                              t->shape.size());
        PlannedTensor p;
        p.name = *gname;
        p.dims.assign(t->shape.rbegin(), t->shape.rend());
        p.src = t->data.data();
        p.src_type = src_type;
        if (t->data.size() != p.n_elements() * dtype_info(src_type).block_bytes)
            return make_error("{}: tensor {} holds {} bytes, its shape needs {}", folder, t->name,
                              t->data.size(), p.n_elements() * dtype_info(src_type).block_bytes);
        if (permute) {
            const QkPermute k = qk_permute_kind(p.name);
            if (k == QkPermute::Q) p.permute_heads = hp.n_head;
            if (k == QkPermute::K) p.permute_heads = hp.n_head_kv;
        }
        if (p.name == "token_embd.weight") {
            if (p.dims.size() != 2) return make_error("{}: tensor {} is not 2-D", folder, t->name);
            n_vocab = static_cast<int64_t>(p.dims[1]);
        }
        job.tensors.push_back(std::move(p));
    }
    if (n_vocab == 0) return make_error("{}: no token embeddings (model.embed_tokens.weight)", folder);
    if (cfg.vocab_size > 0 && cfg.vocab_size != n_vocab)
        log_warn("{}: vocab_size {} differs from the {} rows of the token embeddings; using {}", cfg_path,
                 cfg.vocab_size, n_vocab, n_vocab);

    std::string name = opt.name;
    if (name.empty()) name = std::filesystem::path(folder).lexically_normal().filename().string();
    if (name.empty() || name == ".")
        name = std::filesystem::absolute(folder).lexically_normal().parent_path().filename().string();
    append_general_kvs(job.kvs, arch->gguf_write_name, name, opt.type);
    PELICAN_ASSIGN(HparamKvs hk, hparam_kvs(cfg, hp, n_vocab));
    job.kvs.insert(job.kvs.end(), hk.kvs.begin(), hk.kvs.end());
    if (hk.rope_freqs) job.tensors.push_back(std::move(*hk.rope_freqs));
    {
        const GenerationDefaults gen = read_generation_config(folder);
        for (const std::string& w : gen.warnings) log_warn("{}", w);
        append_sampling_kvs(job.kvs, gen);
    }
    PELICAN_TRY(append_tokenizer_kvs(job.kvs, tok->spec(), n_vocab));

    std::stable_sort(
        job.tensors.begin(), job.tensors.end(),
        [](const PlannedTensor& a, const PlannedTensor& b) { return order_key(a.name) < order_key(b.name); });
    assign_output_types(job, opt.type);
    return job;
}

}  // namespace pelican
