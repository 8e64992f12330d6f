// Upload of a Model's weights to the GPU (see gpu_model.h).
#include "backend/cuda/gpu_model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <string>

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

// Architectures whose forward pass is the shared dense block (backend/cpu/cpu_executor.h) mirrored here.
constexpr std::array<std::string_view, 5> kDenseArchs = {"llama", "mistral", "qwen2", "qwen3", "granite"};

}  // namespace

Status gpu_supports_model(const Model& model) {
    const ModelHParams& hp = model.hparams();
    const ModelWeights& w = model.weights();
    const std::string_view arch = model.arch().name;
    if (model.arch().hybrid) return gpu_supports_hybrid(model);
    if (std::find(kDenseArchs.begin(), kDenseArchs.end(), arch) == kDenseArchs.end())
        return make_error("{}: architecture {} has no GPU forward pass", model.path(), arch);
    if (hp.n_vocab > INT32_MAX || hp.n_embd > INT32_MAX)
        return make_error("{}: vocabulary or width too large for the GPU pass", model.path());
    if (!gpu_matmul_supported(w.tok_embd.dtype))
        return make_error("{}: token_embd has type {}, which the GPU embedding lookup does not read",
                          model.path(), dtype_name(w.tok_embd.dtype));
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights& l = w.layers[static_cast<size_t>(il)];
        const std::pair<const cpu::Weight*, const char*> ms[] = {
            {&l.wq, "attn_q"},       {&l.wk, "attn_k"},   {&l.wv, "attn_v"},      {&l.wo, "attn_output"},
            {&l.w_gate, "ffn_gate"}, {&l.w_up, "ffn_up"}, {&l.w_down, "ffn_down"}};
        for (const auto& [m, name] : ms) {
            Status s = check_gpu_matrix(*m, gpu_layer_name(il, name));
            if (!s.ok()) return make_error("{}: {}", model.path(), s.error().message);
        }
    }
    Status s = check_gpu_matrix(w.output, w.tied_output ? "token_embd (tied output)" : "output");
    if (!s.ok()) return make_error("{}: {}", model.path(), s.error().message);
    return {};
}

GpuModel::~GpuModel() { free_all(); }

void GpuModel::free_all() {
    for (GpuLayer& l : layers_) {
        for (GpuPart& p : l.qkv) free_matrix(p.m);
        for (GpuPart& p : l.gate_up) free_matrix(p.m);
        free_matrix(l.wo);
        free_matrix(l.down);
    }
    layers_.clear();
    free_hybrid();
    free_matrix(output_);
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
    const auto seg = [](const cpu::Weight& w, const char* name) { return RowSegment{&w, name, {}}; };
    VecArena vecs;
    size_t vec_read = 0;  // fp32 vector bytes one decode step reads
    const int64_t e = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim(), ff = hp.n_ff, hd = hp.head_dim;
    if (model.arch().hybrid) {
        PELICAN_TRY(g->upload_hybrid(up, vecs, &vec_read));
    } else {
        g->layers_.resize(static_cast<size_t>(hp.n_layer));
        for (int il = 0; il < hp.n_layer; ++il) {
            const LayerWeights& l = w.layers[static_cast<size_t>(il)];
            GpuLayer& gl = g->layers_[static_cast<size_t>(il)];
            const RowSegment qkv[3] = {seg(l.wq, "attn_q"), seg(l.wk, "attn_k"), seg(l.wv, "attn_v")};
            PELICAN_TRY(up.parts(qkv, il, gl.qkv));
            const RowSegment gu[2] = {seg(l.w_gate, "ffn_gate"), seg(l.w_up, "ffn_up")};
            PELICAN_TRY(up.parts(gu, il, gl.gate_up));
            const cpu::Weight* wo[1] = {&l.wo};
            PELICAN_TRY(up.stack(wo, gpu_layer_name(il, "attn_output"), gl.wo));
            const cpu::Weight* down[1] = {&l.w_down};
            PELICAN_TRY(up.stack(down, gpu_layer_name(il, "ffn_down"), gl.down));

            vecs.add(&gl.attn_norm, {{l.attn_norm, e}});
            vecs.add(&gl.ffn_norm, {{l.ffn_norm, e}});
            vecs.add(&gl.q_norm, {{l.q_norm, hd}});
            vecs.add(&gl.k_norm, {{l.k_norm, hd}});
            vecs.add(&gl.b_qkv, {{l.bq, q}, {l.bk, kv}, {l.bv, kv}});
            vecs.add(&gl.b_o, {{l.bo, e}});
            vecs.add(&gl.b_gate_up, {{l.b_gate, ff}, {l.b_up, ff}});
            vecs.add(&gl.b_down, {{l.b_down, e}});
            const int64_t n_vec = 2 * e + (l.q_norm ? 2 * hd : 0) + (l.bq || l.bk || l.bv ? q + 2 * kv : 0) +
                                  (l.bo ? e : 0) + (l.b_gate || l.b_up ? 2 * ff : 0) + (l.b_down ? e : 0);
            vec_read += static_cast<size_t>(n_vec) * sizeof(float);
        }
    }
    const cpu::Weight* out[1] = {&w.output};
    PELICAN_TRY(up.stack(out, w.tied_output ? "token_embd (tied output)" : "output", g->output_));
    vecs.add(&g->output_norm_, {{w.output_norm, e}});
    vec_read += static_cast<size_t>(e) * sizeof(float);
    g->device_bytes_ += up.device_bytes;
    // Hybrid: only the routed experts a token picks are read (hybrid_read_bytes_ counts k of E).
    g->decode_read_bytes_ +=
        (g->hybrid_ ? g->hybrid_read_bytes_ + g->output_.read_bytes : up.read_bytes) + vec_read;
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
        g->tune_hybrid(tune, [&](GpuMatrix& m, const GemvArgs& a) { gemv_autotune(m, a, stream); });
        for (GpuLayer& gl : g->layers_) {
            for (GpuPart& p : gl.qkv) tune(p.m, true, false, false);
            for (GpuPart& p : gl.gate_up) tune(p.m, true, gl.gate_up.size() == 1, false);
            tune(gl.wo, false, false, true);
            tune(gl.down, false, false, true);
        }
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

}  // namespace pelican::cuda
