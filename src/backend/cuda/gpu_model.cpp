// Upload of a Model's weights to the GPU (see gpu_model.h): the support check, the upload and tuning of
// every layer by its kinds, the attention and SwiGLU parts (gpu_model_hybrid.cpp: the other kinds).
#include "backend/cuda/gpu_model.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_upload.h"
#include "core/format_bytes.h"
#include "core/log.h"
#include "model/model.h"

namespace pelican::cuda {
namespace {

RowSegment seg(const cpu::Weight& w, const char* name) { return RowSegment{&w, name, {}}; }

// The matrices of one layer by its kinds, with the names the errors use.
std::vector<std::pair<const cpu::Weight*, std::string>> layer_matrices(const LayerWeights& l) {
    std::vector<std::pair<const cpu::Weight*, std::string>> m;
    if (uses_kv(l.kind.mixer)) {
        m = {{&l.attn.wq, "attn_q"},
             {&l.attn.wk, "attn_k"},
             {&l.attn.wv, "attn_v"},
             {&l.attn.wo, "attn_output"}};
    } else {
        m = {{&l.linear.in_qkv, "attn_qkv"},
             {&l.linear.in_z, "attn_gate"},
             {&l.linear.in_b, "ssm_beta"},
             {&l.linear.in_a, "ssm_alpha"},
             {&l.linear.out, "ssm_out"}};
    }
    if (l.kind.ffn == Ffn::kMoe) {
        m.push_back({&l.moe.router, "ffn_gate_inp"});
        m.push_back({&l.moe.shared_gate, "ffn_gate_inp_shexp"});
        m.push_back({&l.moe.shared.gate, "ffn_gate_shexp"});
        m.push_back({&l.moe.shared.up, "ffn_up_shexp"});
        m.push_back({&l.moe.shared.down, "ffn_down_shexp"});
        for (size_t x = 0; x < l.moe.experts.size(); ++x) {
            m.push_back({&l.moe.experts[x].gate, fmt::format("ffn_gate_exps[{}]", x)});
            m.push_back({&l.moe.experts[x].up, fmt::format("ffn_up_exps[{}]", x)});
            m.push_back({&l.moe.experts[x].down, fmt::format("ffn_down_exps[{}]", x)});
        }
    } else {
        m.push_back({&l.mlp.gate, "ffn_gate"});
        m.push_back({&l.mlp.up, "ffn_up"});
        m.push_back({&l.mlp.down, "ffn_down"});
    }
    return m;
}

}  // namespace

Status gpu_supports_model(const Model& model) {
    const ModelHParams& hp = model.hparams();
    const ModelWeights& w = model.weights();
    if (hp.n_vocab > INT32_MAX || hp.n_embd > INT32_MAX)
        return make_error("{}: vocabulary or width too large for the GPU pass", model.path());
    if (!gpu_matmul_supported(w.tok_embd.dtype))
        return make_error("{}: token_embd has type {}, which the GPU embedding lookup does not read",
                          model.path(), dtype_name(w.tok_embd.dtype));
    if (static_cast<int64_t>(w.layers.size()) != hp.n_layer ||
        static_cast<int64_t>(hp.layer.size()) != hp.n_layer)
        return make_error("{}: {} layers of weights and {} layer kinds for {} layers", model.path(),
                          w.layers.size(), hp.layer.size(), hp.n_layer);
    PELICAN_TRY(gpu_supports_kinds(model));
    // The decoder layers, then the MTP block's layer (named blk.<n_layer>, as llama.cpp's nextn layer).
    std::vector<const LayerWeights*> layers;
    for (const LayerWeights& l : w.layers) layers.push_back(&l);
    if (w.mtp.present && !w.mtp.layers.empty()) {
        Status s = check_gpu_matrix(w.mtp.fc, "mtp.fc");
        if (!s.ok()) return make_error("{}: {}", model.path(), s.error().message);
        layers.push_back(&w.mtp.layers[0]);
    }
    for (int il = 0; il < static_cast<int>(layers.size()); ++il) {
        const LayerWeights& l = *layers[static_cast<size_t>(il)];
        if (il < hp.n_layer && !(l.kind == hp.layer[static_cast<size_t>(il)]))
            return make_error("{}: blk.{}: weights of a {} / {} layer where the model's kinds say {} / {}",
                              model.path(), il, mixer_name(l.kind.mixer), ffn_name(l.kind.ffn),
                              mixer_name(hp.layer[static_cast<size_t>(il)].mixer),
                              ffn_name(hp.layer[static_cast<size_t>(il)].ffn));
        for (const auto& [m, name] : layer_matrices(l)) {
            Status s = check_gpu_matrix(*m, gpu_layer_name(il, name));
            if (!s.ok()) return make_error("{}: {}", model.path(), s.error().message);
        }
        if (l.kind.ffn == Ffn::kMoe) {  // one GPU matrix per expert projection: every expert of one type
            for (size_t x = 1; x < l.moe.experts.size(); ++x) {
                const SwigluWeights& a = l.moe.experts[0];
                const SwigluWeights& b = l.moe.experts[x];
                if (b.gate.type() != a.gate.type() || b.up.type() != a.gate.type() ||
                    b.down.type() != a.down.type())
                    return make_error(
                        "{}: blk.{}: routed experts of mixed types (expert {}); the GPU pass "
                        "stacks every expert's gate/up in one type and its down in one type",
                        model.path(), il, x);
            }
            if (!l.moe.experts.empty() && l.moe.experts[0].up.type() != l.moe.experts[0].gate.type())
                return make_error("{}: blk.{}: ffn_gate_exps and ffn_up_exps differ in type", model.path(),
                                  il);
        }
    }
    Status s = check_gpu_matrix(w.output, w.tied_output ? "token_embd (tied output)" : "output");
    if (!s.ok()) return make_error("{}: {}", model.path(), s.error().message);
    return {};
}

GpuModel::~GpuModel() { free_all(); }

void GpuModel::free_layer(GpuLayer& g) {
    for (GpuPart& p : g.attn.qkv) free_matrix(p.m);
    free_matrix(g.attn.wo);
    for (GpuPart& p : g.linear.in_proj) free_matrix(p.m);
    free_matrix(g.linear.out);
    for (GpuPart& p : g.mlp.gate_up) free_matrix(p.m);
    free_matrix(g.mlp.down);
    for (GpuPart& p : g.moe.router) free_matrix(p.m);
    free_matrix(g.moe.experts_gate_up);
    free_matrix(g.moe.experts_down);
    for (GpuPart& p : g.moe.shared_gate_up) free_matrix(p.m);
    free_matrix(g.moe.shared_down);
}

void GpuModel::free_all() {
    for (GpuLayer& l : layers_) free_layer(l);
    layers_.clear();
    free_layer(mtp_.layer);
    free_matrix(mtp_.fc);
    mtp_ = GpuMtp{};
    free_matrix(output_);
}

Status GpuModel::upload_layer(Uploader& up, VecArena& vecs, const LayerWeights& l, int il, GpuLayer& g,
                              size_t* read, size_t* vec_read) const {
    const int64_t e = model_.hparams().n_embd;
    g.kind = l.kind;
    vecs.add(&g.attn_norm, {{l.attn_norm, e}});
    vecs.add(&g.ffn_norm, {{l.ffn_norm, e}});
    *vec_read += static_cast<size_t>(2 * e) * sizeof(float);
    const size_t before = up.read_bytes;
    switch (l.kind.mixer) {
        case Mixer::kAttention:
            PELICAN_TRY(upload_attention(up, vecs, l.attn, il, g.attn, vec_read));
            break;
        case Mixer::kGatedAttention:
            PELICAN_TRY(upload_gated_attention(up, vecs, l.attn, il, g.attn, vec_read));
            break;
        case Mixer::kDeltaNet:
            PELICAN_TRY(upload_deltanet(up, vecs, l.linear, il, g.linear, vec_read));
            break;
    }
    switch (l.kind.ffn) {
        case Ffn::kSwiglu:
            PELICAN_TRY(upload_mlp(up, vecs, l.mlp, il, g.mlp, vec_read));
            *read += up.read_bytes - before;
            break;
        case Ffn::kMoe:  // adds its own read bytes (k of the E routed experts)
            *read += up.read_bytes - before;
            PELICAN_TRY(upload_moe(up, l.moe, il, g.moe, read));
            break;
    }
    return {};
}

Status GpuModel::upload_attention(Uploader& up, VecArena& vecs, const AttentionWeights& a, int il,
                                  GpuAttention& g, size_t* vec_read) const {
    const ModelHParams& hp = model_.hparams();
    const int64_t e = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim(), hd = hp.head_dim;
    const RowSegment qkv[3] = {seg(a.wq, "attn_q"), seg(a.wk, "attn_k"), seg(a.wv, "attn_v")};
    PELICAN_TRY(up.parts(qkv, il, g.qkv));
    const cpu::Weight* wo[1] = {&a.wo};
    PELICAN_TRY(up.stack(wo, gpu_layer_name(il, "attn_output"), g.wo));
    vecs.add(&g.q_norm, {{a.q_norm, hd}});
    vecs.add(&g.k_norm, {{a.k_norm, hd}});
    vecs.add(&g.b_qkv, {{a.bq, q}, {a.bk, kv}, {a.bv, kv}});
    vecs.add(&g.b_o, {{a.bo, e}});
    const int64_t n_vec =
        (a.q_norm ? hd : 0) + (a.k_norm ? hd : 0) + (a.bq || a.bk || a.bv ? q + 2 * kv : 0) + (a.bo ? e : 0);
    *vec_read += static_cast<size_t>(n_vec) * sizeof(float);
    return {};
}

Status GpuModel::upload_mlp(Uploader& up, VecArena& vecs, const SwigluWeights& m, int il, GpuMlp& g,
                            size_t* vec_read) const {
    const int64_t e = model_.hparams().n_embd, ff = m.gate.n_out();
    const RowSegment gu[2] = {seg(m.gate, "ffn_gate"), seg(m.up, "ffn_up")};
    PELICAN_TRY(up.parts(gu, il, g.gate_up));
    const cpu::Weight* down[1] = {&m.down};
    PELICAN_TRY(up.stack(down, gpu_layer_name(il, "ffn_down"), g.down));
    vecs.add(&g.b_gate_up, {{m.b_gate, ff}, {m.b_up, ff}});
    vecs.add(&g.b_down, {{m.b_down, e}});
    const int64_t n_vec = (m.b_gate || m.b_up ? 2 * ff : 0) + (m.b_down ? e : 0);
    *vec_read += static_cast<size_t>(n_vec) * sizeof(float);
    return {};
}

Expected<std::unique_ptr<GpuModel>> GpuModel::upload(const Model& model, bool log_progress) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    if (!gpu_available()) return make_error("no usable CUDA device (no driver, or no GPU visible)");
    PELICAN_TRY(gpu_supports_model(model));
    const ModelHParams& hp = model.hparams();
    const ModelWeights& w = model.weights();
    std::unique_ptr<GpuModel> g(new GpuModel(model));

    cudaStream_t stream = nullptr;
    PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    struct StreamGuard {
        cudaStream_t s;
        ~StreamGuard() { PELICAN_CUDA_CHECK(cudaStreamDestroy(s)); }
    } guard{stream};

    Uploader up(model.path(), stream);
    VecArena vecs;
    size_t vec_read = 0;    // fp32 vector bytes one decode step reads
    size_t layer_read = 0;  // matrix bytes of the layers one decode step reads (routed experts: k of E)
    const int64_t e = hp.n_embd;
    g->layers_.resize(static_cast<size_t>(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il)
        PELICAN_TRY(g->upload_layer(up, vecs, w.layers[static_cast<size_t>(il)], il,
                                    g->layers_[static_cast<size_t>(il)], &layer_read, &vec_read));
    PELICAN_TRY(g->upload_mtp(up, vecs));
    const cpu::Weight* out[1] = {&w.output};
    PELICAN_TRY(up.stack(out, w.tied_output ? "token_embd (tied output)" : "output", g->output_));
    vecs.add(&g->output_norm_, {{w.output_norm, e}});
    vec_read += static_cast<size_t>(e) * sizeof(float);
    g->device_bytes_ += up.device_bytes;
    // Not the MTP block; of the routed experts only the k a token picks (layer_read).
    g->decode_read_bytes_ += layer_read + g->output_.read_bytes + vec_read;
    g->all_f32_ = up.all_f32;
    vecs.add(&g->inv_freq_, {{hp.inv_freq.data(), static_cast<int64_t>(hp.inv_freq.size())}});
    PELICAN_TRY(vecs.upload(g->vectors_));
    g->device_bytes_ += g->vectors_.size();

    // Token embedding: dense GGUF rows.
    const Tensor& te = w.tok_embd;
    g->tok_embd_type_ = te.dtype;
    g->tok_embd_row_bytes_ = static_cast<size_t>(te.row_bytes());
    const size_t rows = static_cast<size_t>(te.ne[1]);
    g->tok_embd_ = DeviceBuffer(rows * g->tok_embd_row_bytes_);
    if (!g->tok_embd_.ok())
        return make_error("{}: uploading token_embd ({}, {}) to the GPU failed: out of memory ({})",
                          model.path(), dtype_name(te.dtype), human_bytes(rows * g->tok_embd_row_bytes_),
                          gpu_memory_note());
    PELICAN_CUDA_CHECK(cudaMemcpy2D(g->tok_embd_.get(), g->tok_embd_row_bytes_, te.data,
                                    static_cast<size_t>(te.nb[1]), g->tok_embd_row_bytes_, rows,
                                    cudaMemcpyHostToDevice));
    g->device_bytes_ += g->tok_embd_.size();
    g->decode_read_bytes_ += g->tok_embd_row_bytes_;
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream));

    // Decode GEMV variants per matrix, timed on the real shapes with the prologue/epilogue of the
    // decode step (cached per shape: one tuning per distinct shape). PELICAN_GEMV_AUTOTUNE=0 skips.
    {
        const auto tt = clock::now();
        static const float kSet = 0.0f;  // a non-null flag: gemv_autotune never dereferences it
        const auto tune = [&](GpuMatrix& m, bool norm, bool glu, bool residual) {
            GemvArgs a;
            a.norm_w = norm ? &kSet : nullptr;
            a.glu = glu;
            a.residual = residual ? &kSet : nullptr;
            gemv_autotune(m, a, stream);
        };
        g->tune_layers(tune, [&](GpuMatrix& m, const GemvArgs& a) { gemv_autotune(m, a, stream); });
        tune(g->output_, true, false, false);
        if (log_progress)
            log_info("GPU decode GEMV autotune: {:.0f} ms",
                     std::chrono::duration<double, std::milli>(clock::now() - tt).count());
    }

    if (log_progress)
        log_info("GPU weights: {} uploaded in {:.2f} s ({})", human_bytes(g->device_bytes_),
                 std::chrono::duration<double>(clock::now() - t0).count(), gpu_memory_note());
    return g;
}

void GpuModel::tune_layers(const TuneFn& tune, const TuneArgsFn& tune_args) {
    std::vector<GpuLayer*> layers;
    for (GpuLayer& g : layers_) layers.push_back(&g);
    if (mtp_.present) {
        layers.push_back(&mtp_.layer);
        tune(mtp_.fc, false, false, false);
    }
    for (GpuLayer* gp : layers) {
        GpuLayer& g = *gp;
        if (uses_kv(g.kind.mixer)) {
            for (GpuPart& p : g.attn.qkv) tune(p.m, true, false, false);
            tune(g.attn.wo, false, false, true);
        } else {
            for (GpuPart& p : g.linear.in_proj) tune(p.m, true, false, false);
            tune(g.linear.out, false, false, true);
        }
        if (g.kind.ffn == Ffn::kMoe) {
            tune_moe(g.moe, tune_args);
            for (GpuPart& p : g.moe.router) tune(p.m, true, false, false);
            for (GpuPart& p : g.moe.shared_gate_up) tune(p.m, true, g.moe.shared_gate_up.size() == 1, false);
            if (g.moe.shared_down.data) tune(g.moe.shared_down, false, false, false);
        } else {
            for (GpuPart& p : g.mlp.gate_up) tune(p.m, true, g.mlp.gate_up.size() == 1, false);
            tune(g.mlp.down, false, false, true);
        }
    }
}

}  // namespace pelican::cuda
