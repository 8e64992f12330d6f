// CudaHybridForward: creation, buffers, eval, graphs (see cuda_hybrid_forward.h). The per-layer
// blocks are in cuda_hybrid_layers.cpp.
#include "backend/cuda/cuda_hybrid_forward.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_upload.h"
#include "backend/cuda/host_staging.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/tuning.h"
#include "core/format_bytes.h"
#include "model/model.h"

namespace pelican::cuda {
CudaHybridForward::CudaHybridForward(std::shared_ptr<const GpuModel> gm, int64_t n_ctx, int64_t n_batch,
                                     bool use_graph)
    : gm_(std::move(gm)),
      model_(gm_->model()),
      hp_(model_.hparams()),
      n_ctx_(n_ctx),
      n_batch_(n_batch),
      want_graph_(use_graph) {}

CudaHybridForward::~CudaHybridForward() {
    if (stream_) PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (step_exec_) PELICAN_CUDA_CHECK(cudaGraphExecDestroy(step_exec_));
    for (cudaEvent_t& e : step_ev_)
        if (e) PELICAN_CUDA_CHECK(cudaEventDestroy(e));
    if (prompt_ev_) PELICAN_CUDA_CHECK(cudaEventDestroy(prompt_ev_));
    if (stream_) PELICAN_CUDA_CHECK(cudaStreamDestroy(stream_));
}

Expected<std::unique_ptr<CudaHybridForward>> CudaHybridForward::create(
    std::shared_ptr<const GpuModel> weights, const ForwardOptions& opt, bool use_graph) {
    if (!weights) return make_error("CUDA hybrid forward pass: no GPU weights given");
    const ModelHParams& hp = weights->model().hparams();
    if (hp.has(Mixer::kAttention) || hp.norm_weight != NormWeight::kOnePlus)
        return make_error(
            "CUDA hybrid forward pass: runs gated attention and Gated DeltaNet layers with zero-centred "
            "norms, which this model's layers are not");
    if (opt.n_ctx <= 0) return make_error("context size must be positive, got {}", opt.n_ctx);
    if (opt.n_ctx > INT32_MAX)
        return make_error("context size {} is too large for the GPU pass (at most {})", opt.n_ctx, INT32_MAX);
    if (opt.n_batch <= 0) return make_error("batch size must be positive, got {}", opt.n_batch);
    std::unique_ptr<CudaHybridForward> f(
        new CudaHybridForward(std::move(weights), opt.n_ctx, std::min(opt.n_batch, opt.n_ctx), use_graph));
    PELICAN_TRY(f->init());
    return f;
}

Status CudaHybridForward::init() {
    const DeltaNetShape& s = hp_.deltanet.linear;
    const int64_t E = hp_.n_embd, Q = hp_.q_dim(), KV = hp_.kv_dim(), V = hp_.n_vocab;
    const size_t f = sizeof(float);
    // Prompt chunks: every layer over up to chunk_ tokens at once (GEMMs); tuning hybrid_chunk off
    // keeps prompts in micro-batches of kMicro tokens.
    const CudaTuning& tune = cuda_tuning();
    if (tune.hybrid_chunk && n_batch_ > kMicro) chunk_ = std::min<int64_t>(n_batch_, kMaxChunk);
    const size_t M = static_cast<size_t>(std::max<int64_t>(kMicro, chunk_)), ML = kMicro;
    PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t& e : step_ev_) PELICAN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    PELICAN_CUDA_CHECK(cudaEventCreateWithFlags(&prompt_ev_, cudaEventDisableTiming));

    kv_slot_.assign(static_cast<size_t>(hp_.n_layer), -1);
    rec_slot_.assign(static_cast<size_t>(hp_.n_layer), -1);
    for (int il = 0; il < hp_.n_layer; ++il) {
        if (gm_->layer(il).kind.mixer == Mixer::kGatedAttention)
            kv_slot_[static_cast<size_t>(il)] = n_full_++;
        else
            rec_slot_[static_cast<size_t>(il)] = n_linear_++;
    }
    w_dn_ = s.conv_dim() + s.value_dim() + 2 * s.n_v_heads;
    w_at_ = 2 * Q + 2 * KV;

    // KV cache of the full-attention layers (F32 when every matrix is F32, as CudaForward) and the
    // recurrent state of the DeltaNet layers (conv inputs + fp32 S).
    const size_t elem = gm_->all_f32() ? 4 : 2;
    const int kv_slots = n_full_ + (has_mtp() ? 1 : 0);  // the MTP layer's cache is slot n_full_
    const size_t kv_half = static_cast<size_t>(std::max(kv_slots, 1)) * static_cast<size_t>(n_ctx_) *
                           static_cast<size_t>(KV) * elem;
    kv_k_ = DeviceBuffer(kv_half);
    kv_v_ = DeviceBuffer(kv_half);
    conv_floats_ = static_cast<size_t>(hp_.deltanet.conv_kernel - 1) * static_cast<size_t>(s.conv_dim());
    ssm_floats_ = static_cast<size_t>(s.state_floats());
    state_ = DeviceBuffer(static_cast<size_t>(std::max(n_linear_, 1)) * (conv_floats_ + ssm_floats_) * f);
    if (!kv_k_.ok() || !kv_v_.ok() || !state_.ok())
        return make_error(
            "the KV cache for {} positions ({}) and the recurrent state ({}) do not fit in GPU "
            "memory ({}); use a smaller context",
            n_ctx_, human_bytes(2 * kv_half), human_bytes(state_.size()), gpu_memory_note());

    int64_t ff = 0, ff_sh = 0;
    for (int il = 0; il < hp_.n_layer; ++il) {
        const GpuLayer& L = gm_->layer(il);
        for (const auto* parts : {&L.mlp.gate_up, &L.moe.shared_gate_up}) {
            int64_t rows = 0;
            for (const GpuPart& p : *parts) rows += p.m.n_out;
            ff = std::max(ff, rows / 2);
        }
    }
    ff_sh = ff;
    // Widest GEMM output of a prompt chunk (tmp_) and the GEMM bounds.
    const int64_t tmp_w =
        std::max({w_dn_, w_at_, E, hp_.moe.n_expert + int64_t{1}, 2 * std::max<int64_t>(ff, 1)});
    // Slots per token (+1: the shared expert as a slot).
    const int k = std::max(hp_.moe.n_expert_used, 1) + 1;
    const int64_t ff_e = std::max<int64_t>(hp_.moe.n_ff_expert, 1);
    const size_t attn_ws_bytes = attention_workspace_bytes(n_ctx_, static_cast<int>(hp_.n_head),
                                                           static_cast<int>(hp_.head_dim), kMicro);
    // Grouped experts (prompt chunks of a MoE model): tuning moe_grouped off keeps slot-wise GEMVs.
    grouped_ = chunk_ > 0 && hp_.has(Ffn::kMoe) && tune.moe_grouped;
    for (int il = 0; grouped_ && il < hp_.n_layer; ++il) {  // 8 token rows must fit the GEMV's shared memory
        const GpuMoe& mo = gm_->layer(il).moe;
        if (mo.experts_gate_up.data && (gemv_max_tokens(mo.experts_gate_up) < kMoeGroupRows ||
                                        gemv_max_tokens(mo.experts_down) < kMoeGroupRows))
            grouped_ = false;
    }
    // Slot-wise expert rows: with grouped experts only decode and micro-batches (<= kMicro tokens) use them.
    const size_t MS = grouped_ ? ML : M;
    Carver c;
    const size_t o_x = c.add(M * E * f), o_proj = c.add(M * std::max(w_dn_, w_at_) * f),
                 o_conv = c.add(M * s.conv_dim() * f),
                 o_core = c.add(M * std::max({s.value_dim(), Q, E}) * f),
                 o_gu = c.add(M * 2 * std::max<int64_t>(ff, 1) * f),
                 o_act = c.add(M * std::max<int64_t>(ff_sh, 1) * f),
                 o_router = c.add(M * (hp_.moe.n_expert + 1) * f), o_ids = c.add(M * k * 4),
                 o_wts = c.add(M * k * f), o_eact = c.add(MS * k * ff_e * f), o_eout = c.add(MS * k * E * f),
                 o_sout = c.add(M * E * f), o_logits = c.add(ML * V * f), o_aws = c.add(attn_ws_bytes),
                 o_mcat = c.add(has_mtp() ? ML * 2 * E * f : 0), o_mhid = c.add(has_mtp() ? ML * E * f : 0),
                 o_mlog = c.add(has_mtp() ? ML * V * f : 0), o_ctr = c.add(sizeof(unsigned)),
                 o_mbar = c.add(sizeof(unsigned long long)),
                 o_cctr = c.add(static_cast<size_t>(E) * sizeof(unsigned)),
                 o_xn = c.add(chunk_ > 0 ? M * E * f : 0), o_tmp = c.add(chunk_ > 0 ? M * tmp_w * f : 0);
    const size_t groups =
        grouped_ ? static_cast<size_t>(moe_group_max_groups(static_cast<int>(M) * k, hp_.moe.n_expert + 1))
                 : 0;
    const size_t g_rows = groups * kMoeGroupRows;
    const size_t o_gexp = c.add(groups * 4), o_srow = c.add(grouped_ ? M * k * 4 : 0),
                 o_rslot = c.add(g_rows * 4), o_xg = c.add(g_rows * E * f),
                 o_eactg = c.add(g_rows * ff_e * f), o_eoutg = c.add(g_rows * E * f);
    const bool dn_chunked = chunk_ > 0 && s.n_v_heads > 0 && tune.dn_chunked;
    const size_t o_dn = c.add(dn_chunked ? deltanet_chunk_scratch_bytes(M, s.n_v_heads, s.d_k) : 0);
    scratch_ = DeviceBuffer(c.total());
    if (!scratch_.ok())
        return make_error("GPU scratch ({}) does not fit in GPU memory ({})", human_bytes(c.total()),
                          gpu_memory_note());
    auto* base = scratch_.as<std::byte>();
    const auto at = [&](size_t off) { return reinterpret_cast<float*>(base + off); };
    x_ = at(o_x);
    proj_ = at(o_proj);
    conv_ = at(o_conv);
    core_ = at(o_core);
    gu_ = at(o_gu);
    act_ = at(o_act);
    router_ = at(o_router);
    ids_ = reinterpret_cast<int32_t*>(base + o_ids);
    wts_ = at(o_wts);
    eact_ = at(o_eact);
    eout_ = at(o_eout);
    sout_ = at(o_sout);
    logits_ = at(o_logits);
    attn_ws_ = base + o_aws;
    router_ctr_ = reinterpret_cast<unsigned*>(base + o_ctr);
    moe_bar_ = reinterpret_cast<unsigned long long*>(base + o_mbar);
    comb_ctr_ = reinterpret_cast<unsigned*>(base + o_cctr);
    if (chunk_ > 0) {
        xn_ = at(o_xn);
        tmp_ = at(o_tmp);
    }
    if (grouped_) {
        group_expert_ = reinterpret_cast<int32_t*>(base + o_gexp);
        slot_row_ = reinterpret_cast<int32_t*>(base + o_srow);
        row_slot_ = reinterpret_cast<int32_t*>(base + o_rslot);
        xg_ = at(o_xg);
        eactg_ = at(o_eactg);
        eoutg_ = at(o_eoutg);
    }
    if (dn_chunked) dn_scratch_ = base + o_dn;
    if (has_mtp()) {
        mtp_cat_ = at(o_mcat);
        mtp_hidden_ = at(o_mhid);
        mtp_logits_ = at(o_mlog);
    }
    if (chunk_ > 0) {
        const int64_t max_in = std::max({E, s.value_dim(), Q, std::max<int64_t>(ff, 1)});
        const char* err = nullptr;
        if (!mm_.init(max_in, tmp_w, chunk_, stream_, &err))
            return make_error("GPU prompt matmul setup failed: {} ({})", err ? err : "unknown error",
                              gpu_memory_note());
    }
    // The conv folded into deltanet_step for micro-batches (tuning dn_conv_fold off: two kernels), decided
    // once.
    conv_fold_ = s.n_v_heads > 0 && tune.dn_conv_fold &&
                 deltanet_conv_fold_supported(hp_.deltanet.conv_kernel, s.n_k_heads, s.n_v_heads, s.d_k);
    // The one-kernel decode MoE blocks, decided once (this also sets the kernels' attributes, outside any
    // graph capture).
    if (hp_.has(Ffn::kMoe)) {
        for (int il = 0; il < hp_.n_layer; ++il)
            if (fused_moe_check(gm_->layer(il))) fused_moe_layers_.push_back(&gm_->layer(il));
        if (has_mtp() && fused_moe_check(gm_->mtp().layer)) fused_moe_layers_.push_back(&gm_->mtp().layer);
    }
    PELICAN_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), 0, scratch_.size(), stream_));  // the attention
    // workspace must start zeroed; the rest so that no kernel ever reads uninitialised memory
    reset_state();

    Carver d;
    const int64_t n_micro = (n_batch_ + kMicro - 1) / kMicro;
    const size_t o_step = d.add(sizeof(StepInput)), o_ids_dev = d.add(static_cast<size_t>(n_batch_) * 4),
                 o_pos = d.add(static_cast<size_t>(n_micro) * 4),
                 o_rope = d.add(static_cast<size_t>(n_ctx_) *
                                static_cast<size_t>(std::max<int64_t>(hp_.rope_dim, 1)) * f);
    io_ = DeviceBuffer(d.total());
    if (!io_.ok())
        return make_error("GPU input buffers ({}): out of memory ({})", human_bytes(d.total()),
                          gpu_memory_note());
    auto* io = io_.as<std::byte>();
    step_in_ = reinterpret_cast<StepInput*>(io + o_step);
    ids_dev_ = reinterpret_cast<int32_t*>(io + o_ids_dev);
    pos_dev_ = reinterpret_cast<int32_t*>(io + o_pos);
    PELICAN_CUDA_CHECK(cudaMemsetAsync(io_.get(), 0, io_.size(), stream_));
    if (hp_.rope_dim > 0 && gm_->inv_freq()) {
        rope_table_ = reinterpret_cast<float*>(io + o_rope);
        rope_table_build(gm_->inv_freq(), static_cast<int>(hp_.rope_dim), n_ctx_, hp_.rope_attn_factor,
                         rope_table_, stream_);
    }

    PELICAN_TRY(step_pin_.alloc(sizeof(StepInput) * kRing, "decode inputs"));
    PELICAN_TRY(prompt_pin_.alloc(static_cast<size_t>(n_batch_ + n_micro) * 4, "prompt tokens"));
    if (has_mtp()) PELICAN_TRY(mtp_pin_.alloc(static_cast<size_t>(V) * f, "MTP logits"));
    PELICAN_TRY(logits_pin_.alloc(static_cast<size_t>(V) * f, "logits"));

    // The one-token step: an eager run first (one-time kernel setup outside the capture; it writes
    // state and K/V row 0, so the state is reset after), then the capture.
    enqueue_micro(1, &step_in_->token, &step_in_->pos, false);
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (want_graph_)
        step_exec_ =
            capture_graph(stream_, [this] { enqueue_micro(1, &step_in_->token, &step_in_->pos, false); });
    reset_state();
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};
}

KvView CudaHybridForward::kv(int slot) const {
    const size_t elem = gm_->all_f32() ? 4 : 2;
    const size_t layer_bytes = static_cast<size_t>(n_ctx_) * static_cast<size_t>(hp_.kv_dim()) * elem;
    KvView v;
    v.k = kv_k_.as<std::byte>() + static_cast<size_t>(slot) * layer_bytes;
    v.v = kv_v_.as<std::byte>() + static_cast<size_t>(slot) * layer_bytes;
    v.type = gm_->all_f32() ? DType::F32 : DType::F16;
    v.n_ctx = n_ctx_;
    return v;
}

float* CudaHybridForward::conv_state(int slot) const {
    return state_.as<float>() + static_cast<size_t>(slot) * (conv_floats_ + ssm_floats_);
}
float* CudaHybridForward::ssm_state(int slot) const { return conv_state(slot) + conv_floats_; }

void CudaHybridForward::reset_state() {
    PELICAN_CUDA_CHECK(cudaMemsetAsync(state_.get(), 0, state_.size(), stream_));
}

// ---- eval ---------------------------------------------------------------------------------------

Status CudaHybridForward::eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                               std::span<float> all_logits) {
    (void)pool;
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) return make_error("eval: no tokens");
    if (pos0 < 0 || pos0 + n > n_ctx_)
        return make_error("eval: positions {}..{} do not fit the context of {} tokens", pos0, pos0 + n - 1,
                          n_ctx_);
    if (pos0 > n_past())
        return make_error(
            "eval: position {} skips past the {} evaluated tokens (the recurrent state needs "
            "every position in order)",
            pos0, n_past());
    for (int64_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab)
            return make_error("eval: token id {} (at index {}) is outside the vocabulary of {}", tokens[i], i,
                              hp_.n_vocab);
    const int64_t V = hp_.n_vocab;
    if (!all_logits.empty() && static_cast<int64_t>(all_logits.size()) != n * V)
        return make_error("eval: all_logits holds {} floats, expected {} tokens x {} vocab",
                          all_logits.size(), n, V);
    host_logits_valid_ = false;
    if (pos0 < n_past()) {  // rewind: replay the kept prefix from a reset state
        std::vector<int32_t> keep(history_.begin(), history_.begin() + pos0);
        history_.clear();
        reset_state();
        if (!keep.empty()) PELICAN_TRY(run_tokens(keep, 0, {}));
    }
    PELICAN_TRY(run_tokens(tokens, pos0, all_logits));
    return {};
}

int64_t CudaHybridForward::stage_chunk(std::span<const int32_t> tokens, int64_t pos0) {
    const auto m = static_cast<int64_t>(tokens.size());
    const int64_t n_micro = (m + kMicro - 1) / kMicro;
    PELICAN_CUDA_CHECK(cudaEventSynchronize(prompt_ev_));  // the pinned buffer's last copy has left
    auto* host = static_cast<int32_t*>(prompt_pin_.p);
    for (int64_t u = 0; u < n_micro; ++u) host[u] = static_cast<int32_t>(pos0 + u * kMicro);
    std::memcpy(host + n_micro, tokens.data(), static_cast<size_t>(m) * 4);
    PELICAN_CUDA_CHECK(
        cudaMemcpyAsync(pos_dev_, host, static_cast<size_t>(n_micro) * 4, cudaMemcpyHostToDevice, stream_));
    PELICAN_CUDA_CHECK(cudaMemcpyAsync(ids_dev_, host + n_micro, static_cast<size_t>(m) * 4,
                                       cudaMemcpyHostToDevice, stream_));
    PELICAN_CUDA_CHECK(cudaEventRecord(prompt_ev_, stream_));
    return n_micro;
}

Status CudaHybridForward::run_tokens(std::span<const int32_t> tokens, int64_t pos0,
                                     std::span<float> all_logits) {
    const auto n = static_cast<int64_t>(tokens.size());
    const int64_t V = hp_.n_vocab;
    if (n == 1 && all_logits.empty()) {
        const int slot = ring_next_;
        ring_next_ = (ring_next_ + 1) % kRing;
        PELICAN_CUDA_CHECK(cudaEventSynchronize(step_ev_[slot]));  // the slot's last copy has left
        auto* in = static_cast<StepInput*>(step_pin_.p) + slot;
        in->token = tokens[0];
        in->pos = static_cast<int32_t>(pos0);
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(step_in_, in, sizeof(StepInput), cudaMemcpyHostToDevice, stream_));
        PELICAN_CUDA_CHECK(cudaEventRecord(step_ev_[slot], stream_));
        if (step_exec_)
            PELICAN_CUDA_CHECK(cudaGraphLaunch(step_exec_, stream_));
        else
            enqueue_micro(1, &step_in_->token, &step_in_->pos, false);
    } else if (chunk_ > 0 && n > kMicro) {
        // Prompt chunks of up to chunk_ tokens, every layer over the whole chunk (cuda_hybrid_chunk.cpp);
        // a few tokens (e.g. a chat turn's suffix) stay in one GEMV micro-batch below.
        const int64_t E = hp_.n_embd;
        const bool rows = !all_logits.empty();
        for (int64_t c0 = 0; c0 < n; c0 += chunk_) {
            const int64_t m = std::min(chunk_, n - c0);
            stage_chunk(tokens.subspan(static_cast<size_t>(c0), static_cast<size_t>(m)), pos0 + c0);
            enqueue_chunk(static_cast<int>(m), ids_dev_, pos_dev_, pos0 + c0);  // pos_dev_[0] = pos0 + c0
            if (!rows) {
                if (c0 + m == n) lm_head(x_ + (m - 1) * E, 1);  // the last token's logits into row 0
                continue;
            }
            for (int64_t r0 = 0; r0 < m; r0 += kMicro) {  // every row, kMicro at a time through logits_
                const int b = static_cast<int>(std::min<int64_t>(kMicro, m - r0));
                lm_head(x_ + r0 * E, b);
                PELICAN_CUDA_CHECK(cudaMemcpyAsync(all_logits.data() + (c0 + r0) * V, logits_,
                                                   static_cast<size_t>(b * V) * sizeof(float),
                                                   cudaMemcpyDeviceToHost, stream_));
                if (c0 + r0 + b == n && b > 1)  // the last token's logits in row 0, as without all_logits
                    PELICAN_CUDA_CHECK(cudaMemcpyAsync(logits_, logits_ + (b - 1) * V,
                                                       static_cast<size_t>(V) * sizeof(float),
                                                       cudaMemcpyDeviceToDevice, stream_));
            }
        }
        if (rows) PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } else {
        // Chunks of n_batch tokens: positions of each micro-batch, then the tokens, staged together.
        for (int64_t c0 = 0; c0 < n; c0 += n_batch_) {
            const int64_t m = std::min(n_batch_, n - c0);
            const int64_t n_micro =
                stage_chunk(tokens.subspan(static_cast<size_t>(c0), static_cast<size_t>(m)), pos0 + c0);
            for (int64_t u = 0; u < n_micro; ++u) {
                const int b = static_cast<int>(std::min<int64_t>(kMicro, m - u * kMicro));
                const bool rows = !all_logits.empty();
                const bool last = c0 + m == n && u + 1 == n_micro;
                enqueue_micro(b, ids_dev_ + u * kMicro, pos_dev_ + u, rows, rows || last);
                if (rows) {
                    float* dst = all_logits.data() + (c0 + u * kMicro) * V;
                    PELICAN_CUDA_CHECK(cudaMemcpyAsync(dst, logits_,
                                                       static_cast<size_t>(b * V) * sizeof(float),
                                                       cudaMemcpyDeviceToHost, stream_));
                    if (b > 1)  // the last token's logits in row 0, as without all_logits
                        PELICAN_CUDA_CHECK(cudaMemcpyAsync(logits_, logits_ + (b - 1) * V,
                                                           static_cast<size_t>(V) * sizeof(float),
                                                           cudaMemcpyDeviceToDevice, stream_));
                }
            }
        }
        if (!all_logits.empty()) PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    have_logits_ = true;
    return {};
}

std::span<const float> CudaHybridForward::last_logits() const {
    if (!have_logits_) return {};
    const auto V = static_cast<size_t>(hp_.n_vocab);
    if (!host_logits_valid_) {
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(logits_pin_.p, logits_, V * 4, cudaMemcpyDeviceToHost, stream_));
        PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
        host_logits_valid_ = true;
    }
    return {static_cast<const float*>(logits_pin_.p), V};
}

// ---- multi-token prediction ----------------------------------------------------------------------

Status CudaHybridForward::mtp_eval(std::span<const int32_t> next_tokens, std::span<const float> hidden,
                                   int64_t pos0, std::span<float> all_logits) {
    if (!has_mtp()) return make_error("{}: the model has no MTP block (mtp.*)", model_.path());
    const auto n = static_cast<int64_t>(next_tokens.size());
    const int64_t E = hp_.n_embd, V = hp_.n_vocab;
    if (n == 0) return make_error("mtp_eval: no tokens");
    if (static_cast<int64_t>(hidden.size()) != n * E)
        return make_error("mtp_eval: hidden holds {} floats, expected {} rows x {}", hidden.size(), n, E);
    if (pos0 < 0 || pos0 + n > n_ctx_)
        return make_error("mtp_eval: positions {}..{} do not fit the context of {} tokens", pos0,
                          pos0 + n - 1, n_ctx_);
    if (pos0 > mtp_n_past_)
        return make_error("mtp_eval: position {} is past the {} MTP positions evaluated so far", pos0,
                          mtp_n_past_);
    for (int64_t i = 0; i < n; ++i)
        if (next_tokens[i] < 0 || next_tokens[i] >= V)
            return make_error("mtp_eval: token id {} (at index {}) is outside the vocabulary of {}",
                              next_tokens[i], i, V);
    if (!all_logits.empty() && static_cast<int64_t>(all_logits.size()) != n * V)
        return make_error("mtp_eval: all_logits holds {} floats, expected {} tokens x {} vocab",
                          all_logits.size(), n, V);
    const bool rows = !all_logits.empty();
    for (int64_t c0 = 0; c0 < n; c0 += n_batch_) {  // chunks staged like prompt chunks
        const int64_t m = std::min(n_batch_, n - c0);
        const int64_t n_micro =
            stage_chunk(next_tokens.subspan(static_cast<size_t>(c0), static_cast<size_t>(m)), pos0 + c0);
        for (int64_t u = 0; u < n_micro; ++u) {
            const int b = static_cast<int>(std::min<int64_t>(kMicro, m - u * kMicro));
            const int64_t row0 = c0 + u * kMicro;
            // Pageable host memory: staged by the driver, in stream order.
            PELICAN_CUDA_CHECK(cudaMemcpyAsync(mtp_hidden_, hidden.data() + row0 * E,
                                               static_cast<size_t>(b * E) * sizeof(float),
                                               cudaMemcpyHostToDevice, stream_));
            enqueue_mtp(b, ids_dev_ + u * kMicro, pos_dev_ + u, rows);
            if (rows)
                PELICAN_CUDA_CHECK(cudaMemcpyAsync(all_logits.data() + row0 * V, mtp_logits_,
                                                   static_cast<size_t>(b * V) * sizeof(float),
                                                   cudaMemcpyDeviceToHost, stream_));
            if (row0 + b == n) {  // the last row's logits for mtp_logits()
                const float* last = mtp_logits_ + (rows ? static_cast<int64_t>(b - 1) * V : 0);
                PELICAN_CUDA_CHECK(cudaMemcpyAsync(mtp_pin_.p, last, static_cast<size_t>(V) * sizeof(float),
                                                   cudaMemcpyDeviceToHost, stream_));
            }
        }
    }
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    mtp_n_past_ = pos0 + n;
    return {};
}

std::span<const float> CudaHybridForward::mtp_logits() const {
    if (mtp_n_past_ == 0 || !mtp_pin_.p) return {};
    return {static_cast<const float*>(mtp_pin_.p), static_cast<size_t>(hp_.n_vocab)};
}

Status CudaHybridForward::synchronize() {
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};
}

}  // namespace pelican::cuda
