// Model loading: picks the source (GGUF or HF folder), the architecture, hyper-parameters and
// weights (see model.h).
#include "model/model.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

namespace pelican {
std::string Model::describe() const {
    const ModelHParams& h = hp_;
    std::string s =
        fmt::format("{}, {} layers, hidden {}, heads {}/{} x {}, ff {}, vocab {}, rope {} dim {} theta {}",
                    h.arch->name, h.n_layer, h.n_embd, h.n_head, h.n_head_kv, h.head_dim, h.n_ff, h.n_vocab,
                    rope_layout_name(h.rope_layout), h.rope_dim, h.rope_theta);
    if (!h.rope_scaling.empty()) s += fmt::format(" ({} scaling)", h.rope_scaling);
    if (h.sliding_window > 0) s += fmt::format(", sliding window {}", h.sliding_window);
    if (w_.tied_output) s += ", tied output";
    if (h.has(Mixer::kDeltaNet)) {
        const DeltaNetHParams& y = h.deltanet;
        s += fmt::format(
            ", hybrid: {} DeltaNet + {} full-attention layers, linear heads {}/{} x {}/{}, conv {}",
            h.count(Mixer::kDeltaNet), h.n_kv_layers(), y.linear.n_k_heads, y.linear.n_v_heads, y.linear.d_k,
            y.linear.d_v, y.conv_kernel);
    }
    if (h.has(Ffn::kMoe))
        s += fmt::format(", {} experts top-{} (ff {}) + shared (ff {})", h.moe.n_expert, h.moe.n_expert_used,
                         h.moe.n_ff_expert, h.moe.n_ff_shared);
    if (w_.mtp.present) s += fmt::format(", MTP {} layer(s)", w_.mtp.layers.size());
    return s;
}

Expected<std::string> resolve_model_path(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(path, ec))
        return make_error("{}: no such file or folder (give a GGUF file or a Hugging Face model folder)",
                          path);
    if (fs::is_directory(path, ec)) return path;
    const fs::path p(path);
    const std::string name = p.filename().string();
    const bool hf_file =
        p.extension() == ".safetensors" || name == "config.json" || name.ends_with(".safetensors.index.json");
    if (!hf_file) return path;
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    if (is_hf_folder(dir.string())) return dir.string();
    return make_error(
        "{} is a single {} file; pelican runs a Hugging Face model folder (config.json, the *.safetensors "
        "weights and tokenizer.json together): pass that folder with -m, or convert the model to GGUF",
        path, name == "config.json" ? "config" : "safetensors");
}

Expected<std::unique_ptr<Model>> Model::load(const std::string& path_in, const ModelLoadOptions& opt) {
    PELICAN_ASSIGN(const std::string path, resolve_model_path(path_in));
    std::unique_ptr<Model> m(new Model());
    m->path_ = path;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        return make_error("{}: no such file or folder (give a GGUF file or a Hugging Face model folder)",
                          path);
    std::optional<WeightSource> src;
    if (std::filesystem::is_directory(path, ec)) {
        if (!is_hf_folder(path))
            return make_error("{}: folder has no config.json (expected a Hugging Face model folder)", path);
        PELICAN_ASSIGN(HfConfig cfg, load_hf_config(path));
        const ArchSpec* arch = find_arch_by_hf_model_type(cfg.model_type);
        if (!arch)
            return make_error("{}: model_type \"{}\" is not supported (supported: {})", path, cfg.model_type,
                              supported_arch_list());
        const std::string cfg_path = (std::filesystem::path(path) / "config.json").string();
        PELICAN_ASSIGN(m->hp_, hparams_from_hf(cfg, *arch, cfg_path));
        PELICAN_ASSIGN(HfWeights w, HfWeights::open(path));
        m->hf_ = std::make_shared<const HfWeights>(std::move(w));
        m->hf_config_ = std::make_unique<HfConfig>(std::move(cfg));
        src = WeightSource::from_hf(m->hf_);
    } else {
        PELICAN_ASSIGN(GgufFile f, GgufFile::open(path));
        const auto arch_name = f.get_string("general.architecture");
        if (!arch_name) return make_error("{}: missing metadata key general.architecture", path);
        const ArchSpec* arch = find_arch_by_gguf(*arch_name);
        if (!arch)
            return make_error("{}: architecture \"{}\" is not supported (supported: {})", path, *arch_name,
                              supported_arch_list());
        PELICAN_ASSIGN(m->hp_, hparams_from_gguf(f, *arch));
        // The metadata (the vocabulary: megabytes with 128k tokens and their merges) was parsed
        // into copies by open(); its pages are not read again.
        f.mapping().release_pages(f.bytes().first(std::min<size_t>(f.data_offset(), f.bytes().size())));
        m->gguf_ = std::make_shared<const GgufFile>(std::move(f));
        src = WeightSource::from_gguf(m->gguf_);
    }
    PELICAN_ASSIGN(m->w_, load_weights(*src, m->hp_, WeightLoadOptions{.allow_repack = opt.allow_repack}));
    if (m->hf_config_ && !m->hf_config_->tie_word_embeddings && m->w_.tied_output)
        return make_error("{}: missing tensor lm_head.weight (config.json has tie_word_embeddings false)",
                          path);
    return m;
}

}  // namespace pelican
