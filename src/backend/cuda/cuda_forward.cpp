// CudaForward: creation, buffers, validation, staging, graphs and sampling (see cuda_forward.h).
// The per-layer work of prefill and decode is in cuda_forward_layers.cpp.
#include "backend/cuda/cuda_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gpu_upload.h"
#include "backend/cuda/host_staging.h"
#include "backend/cuda/layer_args.h"
#include "core/format_bytes.h"
#include "model/model.h"

namespace pelican::cuda {
namespace {

bool same_params(const GpuSampleParams& a, const GpuSampleParams& b) {
    return a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p && a.min_p == b.min_p &&
           a.repetition_penalty == b.repetition_penalty && a.presence_penalty == b.presence_penalty &&
           a.frequency_penalty == b.frequency_penalty;
}

bool penalties_on(const GpuSampleParams& p) {
    return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

}  // namespace

CudaForward::CudaForward(std::shared_ptr<const GpuModel> gm, int64_t n_ctx, int64_t n_batch, DType kv_type,
                         bool use_graph)
    : gm_(std::move(gm)),
      model_(gm_->model()),
      hp_(model_.hparams()),
      n_ctx_(n_ctx),
      n_batch_(n_batch),
      kv_type_(kv_type),
      want_graph_(use_graph) {}

CudaForward::~CudaForward() {
    if (stream_) PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (sample_exec_) PELICAN_CUDA_CHECK(cudaGraphExecDestroy(sample_exec_));
    if (step_exec_) PELICAN_CUDA_CHECK(cudaGraphExecDestroy(step_exec_));
    for (cudaEvent_t& e : ring_ev_)
        if (e) PELICAN_CUDA_CHECK(cudaEventDestroy(e));
    if (prefill_ev_) PELICAN_CUDA_CHECK(cudaEventDestroy(prefill_ev_));
    if (penalty_ev_) PELICAN_CUDA_CHECK(cudaEventDestroy(penalty_ev_));
    if (stream_) PELICAN_CUDA_CHECK(cudaStreamDestroy(stream_));
}

Expected<std::unique_ptr<CudaForward>> CudaForward::create(const Model& model, const ForwardOptions& opt,
                                                           const CudaForwardOptions& copt) {
    PELICAN_ASSIGN(std::unique_ptr<GpuModel> gm, GpuModel::upload(model, /*log_progress=*/false));
    return create(std::shared_ptr<const GpuModel>(std::move(gm)), opt, copt);
}

Expected<std::unique_ptr<CudaForward>> CudaForward::create(std::shared_ptr<const GpuModel> weights,
                                                           const ForwardOptions& opt,
                                                           const CudaForwardOptions& copt) {
    if (!weights) return make_error("CUDA forward pass: no GPU weights given");
    if (!weights->model().hparams().uniform_attention())
        return make_error(
            "CUDA forward pass: runs models whose every layer is attention + SwiGLU with plain norms "
            "(the others take CudaHybridForward or the executor)");
    if (opt.n_ctx <= 0) return make_error("context size must be positive, got {}", opt.n_ctx);
    if (opt.n_ctx > INT32_MAX)
        return make_error("context size {} is too large for the GPU pass (at most {})", opt.n_ctx, INT32_MAX);
    if (opt.n_batch <= 0) return make_error("batch size must be positive, got {}", opt.n_batch);
    const DType kv = copt.kv_type.value_or(weights->all_f32() ? DType::F32 : DType::F16);
    if (kv != DType::F16 && kv != DType::F32)
        return make_error("GPU KV cache type must be f16 or f32, got {}", dtype_name(kv));
    std::unique_ptr<CudaForward> f(
        new CudaForward(std::move(weights), opt.n_ctx, std::min(opt.n_batch, opt.n_ctx), kv, copt.use_graph));
    PELICAN_TRY(f->init());
    return f;
}

Status CudaForward::init() {
    const int64_t E = hp_.n_embd, Q = hp_.q_dim(), KV = hp_.kv_dim(), FF = hp_.n_ff, V = hp_.n_vocab;
    const auto B = static_cast<size_t>(n_batch_);
    const size_t f = sizeof(float);
    qkv_w_ = Q + 2 * KV;
    n_chunks_ = (n_ctx_ + n_batch_ - 1) / n_batch_;
    PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t& e : ring_ev_) PELICAN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    PELICAN_CUDA_CHECK(cudaEventCreateWithFlags(&prefill_ev_, cudaEventDisableTiming));
    PELICAN_CUDA_CHECK(cudaEventCreateWithFlags(&penalty_ev_, cudaEventDisableTiming));

    // KV cache.
    const size_t elem = kv_type_ == DType::F32 ? 4 : 2;
    const size_t kv_half =
        static_cast<size_t>(hp_.n_layer) * static_cast<size_t>(n_ctx_) * static_cast<size_t>(KV) * elem;
    kv_k_ = DeviceBuffer(kv_half);
    kv_v_ = DeviceBuffer(kv_half);
    if (!kv_k_.ok() || !kv_v_.ok())
        return make_error(
            "the {} KV cache for {} positions ({}) does not fit in GPU memory ({}); use a smaller context",
            dtype_name(kv_type_), n_ctx_, human_bytes(2 * kv_half), gpu_memory_note());

    // Widest part of a split QKV / gate-up (prefill runs it into tmp_, then scatters the columns).
    int64_t split_w = 0;
    for (int il = 0; il < hp_.n_layer; ++il) {
        const GpuLayer& l = gm_->layer(il);
        for (const auto* parts : {&l.attn.qkv, &l.mlp.gate_up})
            if (parts->size() > 1)
                for (const GpuPart& p : *parts) split_w = std::max(split_w, p.m.n_out);
    }
    const auto logit_rows = static_cast<size_t>(std::min<int64_t>(n_batch_, kLogitRows));
    const size_t attn_ws_bytes =
        attention_workspace_bytes(n_ctx_, static_cast<int>(hp_.n_head), static_cast<int>(hp_.head_dim), 1);
    const size_t sample_ws_bytes = sampling_workspace_bytes(V);
    Carver c;
    const size_t o_x = c.add(B * E * f), o_xn = c.add(B * E * f), o_qkv = c.add(B * qkv_w_ * f),
                 o_attn = c.add(B * Q * f), o_proj = c.add(B * E * f), o_gu = c.add(B * 2 * FF * f),
                 o_act = c.add(B * FF * f), o_tmp = c.add(B * split_w * f),
                 o_logits = c.add(logit_rows * V * f), o_slog = c.add(V * f), o_aws = c.add(attn_ws_bytes),
                 o_sws = c.add(sample_ws_bytes);
    scratch_ = DeviceBuffer(c.total());
    if (!scratch_.ok())
        return make_error("GPU scratch for {} tokens per step ({}) does not fit in GPU memory ({})", n_batch_,
                          human_bytes(c.total()), gpu_memory_note());
    auto* base = scratch_.as<std::byte>();
    x_ = reinterpret_cast<float*>(base + o_x);
    xn_ = reinterpret_cast<float*>(base + o_xn);
    qkv_ = reinterpret_cast<float*>(base + o_qkv);
    attn_ = reinterpret_cast<float*>(base + o_attn);
    proj_ = reinterpret_cast<float*>(base + o_proj);
    gu_ = reinterpret_cast<float*>(base + o_gu);
    act_ = reinterpret_cast<float*>(base + o_act);
    tmp_ = split_w > 0 ? reinterpret_cast<float*>(base + o_tmp) : nullptr;
    logits_ = reinterpret_cast<float*>(base + o_logits);
    sample_logits_ = reinterpret_cast<float*>(base + o_slog);
    attn_ws_ = base + o_aws;
    sample_ws_ = base + o_sws;
    // The attention workspace must start zeroed (its kernels leave it reusable); the rest is
    // zeroed so no step ever reads uninitialised memory.
    PELICAN_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), 0, scratch_.size(), stream_));

    // Device inputs.
    Carver d;
    const size_t o_step = d.add(sizeof(StepInput)), o_out = d.add(sizeof(int32_t)),
                 o_ids = d.add(static_cast<size_t>(n_ctx_) * 4),
                 o_cpos = d.add(static_cast<size_t>(n_chunks_) * 4),
                 o_pen = d.add(static_cast<size_t>(n_ctx_) * 4),
                 o_rope = d.add(static_cast<size_t>(n_ctx_) * static_cast<size_t>(hp_.rope_dim) * f);
    io_ = DeviceBuffer(d.total());
    if (!io_.ok())
        return make_error("GPU input buffers ({}): out of memory ({})", human_bytes(d.total()),
                          gpu_memory_note());
    auto* io = io_.as<std::byte>();
    step_in_ = reinterpret_cast<StepInput*>(io + o_step);
    out_tok_ = reinterpret_cast<int32_t*>(io + o_out);
    ids_dev_ = reinterpret_cast<int32_t*>(io + o_ids);
    chunk_pos_ = reinterpret_cast<int32_t*>(io + o_cpos);
    penalty_dev_ = reinterpret_cast<int32_t*>(io + o_pen);
    PELICAN_CUDA_CHECK(cudaMemsetAsync(io_.get(), 0, io_.size(), stream_));
    // Rope (cos, sin) per position, built once (bit-identical to the kernel's own sincosf).
    if (hp_.rope_dim > 0 && gm_->inv_freq()) {
        rope_table_ = reinterpret_cast<float*>(io + o_rope);
        rope_table_build(gm_->inv_freq(), static_cast<int>(hp_.rope_dim), n_ctx_, hp_.rope_attn_factor,
                         rope_table_, stream_);
    }

    // Pinned staging.
    PELICAN_TRY(ring_pin_.alloc(sizeof(StepInput) * kRing, "decode inputs"));
    PELICAN_TRY(prefill_pin_.alloc(static_cast<size_t>(n_chunks_ + n_ctx_) * 4, "prompt tokens"));
    PELICAN_TRY(penalty_pin_.alloc(static_cast<size_t>(n_ctx_) * 4, "penalty window"));
    PELICAN_TRY(out_pin_.alloc(sizeof(int32_t), "sampled token"));
    PELICAN_TRY(logits_pin_.alloc(static_cast<size_t>(V) * f, "logits"));

    // cuBLAS prefill: bounds of every matmul of the pass.
    const int64_t max_in = std::max({E, Q, FF});
    const int64_t max_out = std::max({qkv_w_, 2 * FF, E, V});
    const char* err = nullptr;
    if (!mm_.init(max_in, max_out, n_batch_, stream_, &err))
        return make_error("GPU prefill matmul setup failed: {} ({})", err ? err : "unknown error",
                          gpu_memory_note());

    // The decode step: one eager run first (kernels' one-time setup happens outside capture;
    // it writes K/V row 0, which any later eval at position 0 overwrites), then the capture.
    enqueue_step();
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (want_graph_) {
        step_exec_ = capture_graph(stream_, [this] { enqueue_step(); });
        PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    return {};
}

KvView CudaForward::kv(int il) const {
    const size_t elem = kv_type_ == DType::F32 ? 4 : 2;
    const size_t layer_bytes = static_cast<size_t>(n_ctx_) * static_cast<size_t>(hp_.kv_dim()) * elem;
    KvView v;
    v.k = kv_k_.as<std::byte>() + static_cast<size_t>(il) * layer_bytes;
    v.v = kv_v_.as<std::byte>() + static_cast<size_t>(il) * layer_bytes;
    v.type = kv_type_;
    v.n_ctx = n_ctx_;
    return v;
}

// ---- validation ---------------------------------------------------------------------------------

Status CudaForward::check_step(int32_t token, int64_t pos) const {
    if (token < 0 || token >= hp_.n_vocab)
        return make_error("decode: token id {} is outside the vocabulary of {}", token, hp_.n_vocab);
    if (pos < 0 || pos >= n_ctx_)
        return make_error("decode: position {} does not fit the context of {} tokens", pos, n_ctx_);
    return {};
}

Status CudaForward::check_sampling(const GpuSampleParams& p, std::span<const int32_t> penalty_ids,
                                   float u) const {
    if (!std::isfinite(p.temperature) || p.temperature < 0)
        return make_error("GPU sampling: temperature must be a finite number >= 0, got {}", p.temperature);
    if (!(p.top_p > 0 && p.top_p <= 1))
        return make_error("GPU sampling: top_p must be in (0, 1], got {}", p.top_p);
    if (!(p.min_p >= 0 && p.min_p <= 1))
        return make_error("GPU sampling: min_p must be in [0, 1], got {}", p.min_p);
    if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0 ||
        !std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty))
        return make_error("GPU sampling: penalties must be finite (repetition > 0), got {}, {}, {}",
                          p.repetition_penalty, p.presence_penalty, p.frequency_penalty);
    if (!gpu_sampling_exact(p))
        return make_error(
            "GPU sampling: temperature {} with top_k {} is not sampled exactly on the GPU (needs greedy or "
            "1 <= top_k <= {}); sample on the host from last_logits()",
            p.temperature, p.top_k, kMaxGpuTopK);
    if (static_cast<int64_t>(penalty_ids.size()) > n_ctx_)
        return make_error("GPU sampling: {} penalty ids exceed the context of {} tokens", penalty_ids.size(),
                          n_ctx_);
    if (!(u >= 0.0f && u < 1.0f))
        return make_error("GPU sampling: the uniform draw must be in [0, 1), got {}", u);
    return {};
}

// ---- staging ------------------------------------------------------------------------------------

void CudaForward::stage_step(int32_t token, int64_t pos, float u) {
    const int slot = ring_next_;
    ring_next_ = (ring_next_ + 1) % kRing;
    // The slot's previous copy must have left the pinned memory (never-recorded events are done).
    PELICAN_CUDA_CHECK(cudaEventSynchronize(ring_ev_[slot]));
    auto* in = static_cast<StepInput*>(ring_pin_.p) + slot;
    in->token = token;
    in->pos = static_cast<int32_t>(pos);
    in->u = u;
    PELICAN_CUDA_CHECK(cudaMemcpyAsync(step_in_, in, sizeof(StepInput), cudaMemcpyHostToDevice, stream_));
    PELICAN_CUDA_CHECK(cudaEventRecord(ring_ev_[slot], stream_));
}

void CudaForward::stage_penalties(std::span<const int32_t> ids, int* n_out) {
    PELICAN_CUDA_CHECK(cudaEventSynchronize(penalty_ev_));
    auto* host = static_cast<int32_t*>(penalty_pin_.p);
    int n = 0;
    for (int32_t id : ids)
        if (id >= 0 && id < hp_.n_vocab) host[n++] = id;  // as the CPU sampler: others are ignored
    if (n > 0) {
        PELICAN_CUDA_CHECK(
            cudaMemcpyAsync(penalty_dev_, host, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice, stream_));
        PELICAN_CUDA_CHECK(cudaEventRecord(penalty_ev_, stream_));
    }
    *n_out = n;
}

// ---- eval ---------------------------------------------------------------------------------------

Status CudaForward::eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                         std::span<float> all_logits) {
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) return make_error("eval: no tokens");
    if (pos0 < 0 || pos0 + n > n_ctx_)
        return make_error("eval: positions {}..{} do not fit the context of {} tokens", pos0, pos0 + n - 1,
                          n_ctx_);
    for (int64_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab)
            return make_error("eval: token id {} (at index {}) is outside the vocabulary of {}", tokens[i], i,
                              hp_.n_vocab);
    const int64_t V = hp_.n_vocab;
    if (!all_logits.empty() && static_cast<int64_t>(all_logits.size()) != n * V)
        return make_error("eval: all_logits holds {} floats, expected {} tokens x {} vocab",
                          all_logits.size(), n, V);
    host_logits_valid_ = false;
    if (n == 1) {
        stage_step(tokens[0], pos0, 0.0f);
        launch_step();
        have_logits_ = true;
        if (!all_logits.empty()) {
            PELICAN_CUDA_CHECK(cudaMemcpyAsync(all_logits.data(), logits_, static_cast<size_t>(V) * 4,
                                               cudaMemcpyDeviceToHost, stream_));
            PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
        }
        return {};
    }

    // Prompt: chunk positions, then the tokens, in one pinned buffer and two copies.
    PELICAN_CUDA_CHECK(cudaEventSynchronize(prefill_ev_));
    auto* host = static_cast<int32_t*>(prefill_pin_.p);
    const int64_t chunks = (n + n_batch_ - 1) / n_batch_;
    for (int64_t c = 0; c < chunks; ++c) host[c] = static_cast<int32_t>(pos0 + c * n_batch_);
    std::memcpy(host + n_chunks_, tokens.data(), static_cast<size_t>(n) * 4);
    PELICAN_CUDA_CHECK(
        cudaMemcpyAsync(chunk_pos_, host, static_cast<size_t>(chunks) * 4, cudaMemcpyHostToDevice, stream_));
    PELICAN_CUDA_CHECK(cudaMemcpyAsync(ids_dev_, host + n_chunks_, static_cast<size_t>(n) * 4,
                                       cudaMemcpyHostToDevice, stream_));
    PELICAN_CUDA_CHECK(cudaEventRecord(prefill_ev_, stream_));
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t done = c * n_batch_;
        const int64_t m = std::min(n_batch_, n - done);
        prefill_chunk(m, pos0 + done, ids_dev_ + done, chunk_pos_ + c,
                      all_logits.empty() ? nullptr : all_logits.data() + done * V);
    }
    have_logits_ = true;
    if (!all_logits.empty()) PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};
}

std::span<const float> CudaForward::last_logits() const {
    if (!have_logits_) return {};
    const auto V = static_cast<size_t>(hp_.n_vocab);
    if (!host_logits_valid_) {
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(logits_pin_.p, logits_, V * 4, cudaMemcpyDeviceToHost, stream_));
        PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
        host_logits_valid_ = true;
    }
    return {static_cast<const float*>(logits_pin_.p), V};
}

Status CudaForward::synchronize() {
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};
}

// ---- decode -------------------------------------------------------------------------------------

void CudaForward::launch_step() {
    if (step_exec_)
        PELICAN_CUDA_CHECK(cudaGraphLaunch(step_exec_, stream_));
    else
        enqueue_step();
}

Status CudaForward::decode_no_logits(int32_t token, int64_t pos) {
    PELICAN_TRY(check_step(token, pos));
    host_logits_valid_ = false;
    stage_step(token, pos, 0.0f);
    launch_step();
    have_logits_ = true;
    return {};
}

void CudaForward::enqueue_sample(const GpuSampleParams& p, int n_penalty) {
    PELICAN_CUDA_CHECK(cudaMemcpyAsync(sample_logits_, logits_, static_cast<size_t>(hp_.n_vocab) * 4,
                                       cudaMemcpyDeviceToDevice, stream_));
    sample_on_gpu(sample_logits_, hp_.n_vocab, p, n_penalty > 0 ? penalty_dev_ : nullptr, n_penalty,
                  &step_in_->u, out_tok_, sample_ws_, stream_);
}

Expected<int32_t> CudaForward::sample_and_read(const GpuSampleParams& p, int n_penalty) {
    const bool cached = sample_exec_ && same_params(p, sample_key_) && n_penalty == sample_key_n_;
    if (cached) {
        PELICAN_CUDA_CHECK(cudaGraphLaunch(sample_exec_, stream_));
    } else if (want_graph_ && same_params(p, seen_key_) && n_penalty == seen_key_n_) {
        // The same sampling twice in a row: capture it for the following steps.
        if (sample_exec_) PELICAN_CUDA_CHECK(cudaGraphExecDestroy(sample_exec_));
        sample_exec_ = nullptr;
        cudaGraph_t graph = nullptr;
        PELICAN_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        enqueue_sample(p, n_penalty);
        PELICAN_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        PELICAN_CUDA_CHECK(cudaGraphInstantiate(&sample_exec_, graph, 0));
        PELICAN_CUDA_CHECK(cudaGraphDestroy(graph));
        sample_key_ = p;
        sample_key_n_ = n_penalty;
        PELICAN_CUDA_CHECK(cudaGraphLaunch(sample_exec_, stream_));
    } else {
        enqueue_sample(p, n_penalty);
    }
    seen_key_ = p;
    seen_key_n_ = n_penalty;
    PELICAN_CUDA_CHECK(
        cudaMemcpyAsync(out_pin_.p, out_tok_, sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const int32_t tok = *static_cast<const int32_t*>(out_pin_.p);
    if (tok < 0 || tok >= hp_.n_vocab) return make_error("GPU sampling: every logit is NaN or -inf");
    return tok;
}

Expected<int32_t> CudaForward::sample_last(const GpuSampleParams& p, std::span<const int32_t> penalty_ids,
                                           float u) {
    if (!have_logits_) return make_error("GPU sampling: no logits yet (evaluate a token first)");
    PELICAN_TRY(check_sampling(p, penalty_ids, u));
    int n_pen = 0;
    if (penalties_on(p)) stage_penalties(penalty_ids, &n_pen);
    // Only u matters to the sampler; token and position are not read by it.
    stage_step(0, 0, u);
    return sample_and_read(p, n_pen);
}

Expected<int32_t> CudaForward::decode_sample(int32_t token, int64_t pos, const GpuSampleParams& p,
                                             std::span<const int32_t> penalty_ids, float u) {
    PELICAN_TRY(check_step(token, pos));
    PELICAN_TRY(check_sampling(p, penalty_ids, u));
    host_logits_valid_ = false;
    int n_pen = 0;
    if (penalties_on(p)) stage_penalties(penalty_ids, &n_pen);
    stage_step(token, pos, u);
    launch_step();
    have_logits_ = true;
    return sample_and_read(p, n_pen);
}

}  // namespace pelican::cuda

namespace pelican::cuda {

bool CudaForward::samples_on_device(const StepSampling& p) const {
    return gpu_sampling_exact(gpu_sample_params(p));
}

Expected<int32_t> CudaForward::sample_last(const StepSampling& p, std::span<const int32_t> window, float u) {
    return sample_last(gpu_sample_params(p), window, u);
}

Expected<int32_t> CudaForward::decode_sample(int32_t token, int64_t pos, const StepSampling& p,
                                             std::span<const int32_t> window, float u) {
    return decode_sample(token, pos, gpu_sample_params(p), window, u);
}

}  // namespace pelican::cuda
