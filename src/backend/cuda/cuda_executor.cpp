// CudaExecutor: creation, memory, staging and the step (cuda_executor.h). The layers and the
// output head are in cuda_executor_layers.cpp.
#include "backend/cuda/cuda_executor.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <type_traits>

#include <cuda_runtime.h>

#include "backend/cuda/attention_paged.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/deltanet.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_upload.h"
#include "backend/cuda/layer_args.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/qmatmul.h"
#include "backend/cuda/sampling_batch.h"
#include "core/format_bytes.h"
#include "model/model.h"

namespace pelican::cuda {

CudaExecutor::CudaExecutor(std::shared_ptr<const GpuModel> gm, const CudaExecutorOptions& opt, DType kv_type)
    : gm_(std::move(gm)),
      model_(gm_->model()),
      hp_(model_.hparams()),
      max_tokens_(opt.max_batch_tokens),
      max_seqs_(opt.max_seqs),
      max_seq_tokens_(opt.max_seq_tokens),
      kv_type_(kv_type),
      use_graphs_(opt.use_graphs) {}

CudaExecutor::~CudaExecutor() {
    if (stream_) PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (auto& [key, g] : graphs_) PELICAN_CUDA_CHECK(cudaGraphExecDestroy(g));
    for (cudaEvent_t& e : stage_ev_)
        if (e) PELICAN_CUDA_CHECK(cudaEventDestroy(e));
    if (sample_ev_) PELICAN_CUDA_CHECK(cudaEventDestroy(sample_ev_));
    if (stream_) PELICAN_CUDA_CHECK(cudaStreamDestroy(stream_));
}

Expected<std::unique_ptr<CudaExecutor>> CudaExecutor::create(std::shared_ptr<const GpuModel> weights,
                                                             const CudaExecutorOptions& opt) {
    if (!weights) return make_error("CUDA executor: no GPU weights given");
    if (opt.max_batch_tokens <= 0 || opt.max_batch_tokens > INT32_MAX)
        return make_error("batch size must be in 1 .. {}, got {}", INT32_MAX, opt.max_batch_tokens);
    if (opt.max_seqs <= 0) return make_error("CUDA executor: {} sequences", opt.max_seqs);
    // The DeltaNet kernels take a step's rows and sequences as a grid dimension (at most 65535).
    if (weights->model().hparams().has(Mixer::kDeltaNet) &&
        (opt.max_batch_tokens > 65535 || opt.max_seqs > 65535))
        return make_error(
            "CUDA executor: a model with Gated DeltaNet layers takes at most 65535 rows and sequences per "
            "step (asked for {} rows, {} sequences)",
            opt.max_batch_tokens, opt.max_seqs);
    if (opt.max_seq_tokens <= 0 || opt.max_seq_tokens > INT32_MAX)
        return make_error("context size must be in 1 .. {}, got {}", INT32_MAX, opt.max_seq_tokens);
    const DType kv = opt.kv_type.value_or(weights->all_f32() ? DType::F32 : DType::F16);
    if (kv != DType::F16 && kv != DType::F32)
        return make_error("GPU KV cache type must be f16 or f32, got {}", dtype_name(kv));
    std::unique_ptr<CudaExecutor> e(new CudaExecutor(std::move(weights), opt, kv));
    PELICAN_TRY(e->init());
    return e;
}

Status CudaExecutor::init() {
    const int64_t E = hp_.n_embd, Q = hp_.q_dim(), KV = hp_.kv_dim(), V = hp_.n_vocab;
    const auto T = static_cast<size_t>(max_tokens_);
    const size_t f = sizeof(float);
    max_blocks_ = max_seq_tokens_;  // blocks of 1 position at the smallest
    runs_.reserve(T);
    chunk_in_.reserve(T), chunk_out_.reserve(T), n_states_.reserve(T);
    PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    for (cudaEvent_t& ev : stage_ev_)
        PELICAN_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));

    // The fused GEMVs take as many rows as every matrix of the model allows.
    gemv_rows_ = kMaxGemvTokens;
    const auto fit = [&](const GpuMatrix& m) { gemv_rows_ = std::min(gemv_rows_, gemv_max_tokens(m)); };
    int64_t split_w = 0;  // widest part of a split projection (tmp_ holds its cuBLAS output)
    const auto fit_parts = [&](const std::vector<GpuPart>& parts) {
        for (const GpuPart& p : parts) fit(p.m);
        if (parts.size() > 1)
            for (const GpuPart& p : parts) split_w = std::max(split_w, p.m.n_out);
    };
    int64_t max_in = std::max(E, Q), max_out = std::max(E, V);
    // A layer matrix: quantized models take qmatmul above kQuantGemvRows. The last layer's SwiGLU down, or
    // its mixer's output projection when its FFN is MoE (the routed experts take their own kernels).
    const GpuMatrix* probe = nullptr;
    recurrent_ = hp_.has(Mixer::kDeltaNet);
    norm_one_plus_ = hp_.norm_weight == NormWeight::kOnePlus;
    const bool moe = hp_.has(Ffn::kMoe);
    const DeltaNetShape& ls = hp_.deltanet.linear;
    w_dn_ = recurrent_ ? ls.conv_dim() + ls.value_dim() + 2 * int64_t{ls.n_v_heads} : 0;
    ff_ = std::max<int64_t>(hp_.n_ff, moe ? hp_.moe.n_ff_shared : 0);
    int n_kv = 0, n_rec = 0;
    for (int il = 0; il < hp_.n_layer; ++il) {
        const GpuLayer& l = gm_->layer(il);
        const LayerKind& k = hp_.layer[static_cast<size_t>(il)];
        kv_slot_.push_back(uses_kv(k.mixer) ? n_kv++ : -1);
        rec_slot_.push_back(k.mixer == Mixer::kDeltaNet ? n_rec++ : -1);
        switch (k.mixer) {
            case Mixer::kAttention:
            case Mixer::kGatedAttention:
                qkv_w_ = std::max(qkv_w_, Q + 2 * KV + (k.mixer == Mixer::kGatedAttention ? Q : 0));
                fit_parts(l.attn.qkv);
                fit(l.attn.wo);
                probe = &l.attn.wo;
                break;
            case Mixer::kDeltaNet:
                qkv_w_ = std::max(qkv_w_, w_dn_);
                fit_parts(l.linear.in_proj);
                fit(l.linear.out);
                probe = &l.linear.out;
                break;
        }
        switch (k.ffn) {
            case Ffn::kSwiglu:
                fit_parts(l.mlp.gate_up);
                fit(l.mlp.down);
                probe = &l.mlp.down;
                break;
            case Ffn::kMoe:
                fit_parts(l.moe.router);
                fit_parts(l.moe.shared_gate_up);
                if (!l.moe.shared_in_experts) fit(l.moe.shared_down);
                break;
        }
    }
    max_in = std::max(max_in, ff_);
    max_out = std::max({max_out, qkv_w_, 2 * ff_});
    if (recurrent_) max_in = std::max(max_in, ls.value_dim());
    if (moe) {
        max_in = std::max(max_in, hp_.moe.n_ff_expert);
        max_out = std::max(max_out, int64_t{hp_.moe.n_expert} + 1);
    }
    fit(gm_->output());
    gemv_rows_ = std::max(gemv_rows_, 1);
    // The per-layer part of every memory's shape (create_memory adds the pool and the entries).
    layer_shape_.n_attn_layers =
        std::count_if(kv_slot_.begin(), kv_slot_.end(), [](int k) { return k >= 0; });
    layer_shape_.kv_dim = KV;
    layer_shape_.kv_type = kv_type_;
    layer_shape_.n_rec_layers =
        std::count_if(rec_slot_.begin(), rec_slot_.end(), [](int r) { return r >= 0; });
    if (layer_shape_.n_rec_layers > 0) {
        layer_shape_.conv_floats = int64_t{hp_.deltanet.conv_kernel - 1} * ls.conv_dim();
        layer_shape_.ssm_floats = ls.state_floats();
    }
    // Quantized layers: the GEMV's time grows with its rows (8B Q4_0 decode steps on the H200: 2.2, 3.0,
    // 4.3, 8.0 ms at 1, 2, 4, 8 rows) while qmatmul's stays ~5.1 ms from 1 to 16 rows: above 4 rows the
    // tensor-core kernel wins (docs/performance.md, issue 17).
    if (probe && qmatmul_supported(*probe)) gemv_rows_ = std::min(gemv_rows_, kQuantGemvRows);

    attn_ws_bytes_ = paged_attention_workspace_bytes(
        static_cast<int>(max_tokens_), static_cast<int>(hp_.n_head), static_cast<int>(hp_.n_head_kv),
        static_cast<int>(hp_.head_dim), max_seq_tokens_);
    qmm_ws_bytes_ = qmatmul_workspace_bytes(max_in, max_out, static_cast<int>(max_tokens_));
    // Every scratch buffer is carved from one allocation: (where its pointer goes, its offset).
    Carver c;
    std::vector<std::pair<std::function<void(std::byte*)>, size_t>> take;
    const auto want = [&](auto*& ptr, size_t bytes) {
        using P = std::remove_reference_t<decltype(ptr)>;
        take.emplace_back([&ptr](std::byte* at) { ptr = reinterpret_cast<P>(at); }, c.add(bytes));
    };
    want(x_, T * E * f), want(xn_, T * E * f), want(qkv_, T * qkv_w_ * f), want(attn_, T * Q * f);
    want(proj_, T * E * f), want(gu_, T * 2 * ff_ * f), want(act_, T * ff_ * f), want(logits_, T * V * f);
    if (split_w > 0) want(tmp_, T * split_w * f);
    want(attn_ws_, attn_ws_bytes_), want(qmm_ws_, qmm_ws_bytes_);
    if (hp_.rope_dim > 0 && gm_->inv_freq())
        want(rope_table_, static_cast<size_t>(max_seq_tokens_) * static_cast<size_t>(hp_.rope_dim) * f);
    if (recurrent_) want(conv_, T * ls.conv_dim() * f), want(core_, T * ls.value_dim() * f);
    if (moe) {
        const MoeHParams& mh = hp_.moe;
        bool stacked = false;  // some layer runs its shared expert as slot k
        for (int il = 0; il < hp_.n_layer; ++il)
            stacked = stacked || (hp_.layer[static_cast<size_t>(il)].ffn == Ffn::kMoe &&
                                  gm_->layer(il).moe.shared_in_experts);
        const auto ko = static_cast<size_t>(mh.n_expert_used + (stacked ? 1 : 0));
        const auto ffe = static_cast<size_t>(mh.n_ff_expert);
        const int groups = moe_group_max_groups(static_cast<int>(T * ko), mh.n_expert + 1);
        const auto gr = static_cast<size_t>(groups) * kMoeGroupRows;
        want(router_, T * static_cast<size_t>(mh.n_expert + 1) * f);
        want(eids_, T * ko * 4), want(ewts_, T * ko * f);
        want(eact_, T * ko * ffe * f), want(eout_, T * ko * E * f), want(sout_, T * E * f);
        want(group_expert_, static_cast<size_t>(groups) * 4), want(slot_row_, T * ko * 4);
        want(row_slot_, gr * 4), want(xg_, gr * E * f), want(eactg_, gr * ffe * f), want(eoutg_, gr * E * f);
    }
    if (recurrent_) want(dn_ws_, deltanet_chunk_scratch_bytes(max_tokens_, ls.n_v_heads, ls.d_k));
    scratch_ = DeviceBuffer(c.total());
    if (!scratch_.ok())
        return make_error("GPU scratch for {} tokens per step ({}) does not fit in GPU memory ({})",
                          max_tokens_, human_bytes(c.total()), gpu_memory_note());
    for (auto& [set, off] : take) set(scratch_.as<std::byte>() + off);
    // Zeroed: the attention workspace must start so, and no step reads uninitialised memory.
    PELICAN_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), 0, scratch_.size(), stream_));
    if (rope_table_)
        rope_table_build(gm_->inv_freq(), static_cast<int>(hp_.rope_dim), max_seq_tokens_,
                         hp_.rope_attn_factor, rope_table_, stream_);

    // Step inputs: kIoArrays [T] int32 arrays (+1 for run_row0), then the block tables [one per sequence
    // of a step, max_blocks_].
    const auto max_tables = static_cast<size_t>(std::min<int64_t>(max_tokens_, max_seqs_));
    io_bytes_ = (kIoArrays * T + 1 + max_tables * static_cast<size_t>(max_blocks_)) * sizeof(int32_t);
    io_ = DeviceBuffer(io_bytes_);
    if (!io_.ok())
        return make_error("GPU step inputs ({}): out of memory ({})", human_bytes(io_bytes_),
                          gpu_memory_note());
    auto* io = io_.as<int32_t>();
    ids_ = io;
    pos_ = io + T;
    slot_ = io + 2 * T;
    row_table_ = io + 3 * T;
    out_rows_ = io + 4 * T;
    run_conv_in_ = io + 5 * T;
    run_rec_in_ = io + 6 * T;
    row_state_out_ = io + 7 * T;
    run_row0_ = io + 8 * T;  // [T + 1]
    tables_ = io + kIoArrays * T + 1;
    PELICAN_CUDA_CHECK(cudaMemsetAsync(io_.get(), 0, io_bytes_, stream_));
    PELICAN_TRY(pin_.alloc(2 * io_bytes_, "step inputs"));

    // Sampling stage: rows [T] SampleRow, window offsets [T + 1], window ids [T * kWindowIdsPerRow] laid out
    // alike in the pins and on the device (one copy), then the tokens and the sampler's workspace.
    sample_limits_ =
        SampleBatchLimits{static_cast<int>(max_tokens_), V, static_cast<int64_t>(T) * kWindowIdsPerRow};
    const size_t staged = T * sizeof(SampleRow) + (T + 1) * 4 + T * kWindowIdsPerRow * 4;
    Carver sc;
    const size_t o_in = sc.add(staged), o_tok = sc.add(T * 4),
                 o_sws = sc.add(sample_batch_workspace_bytes(sample_limits_));
    sample_io_ = DeviceBuffer(sc.total());
    if (!sample_io_.ok())
        return make_error("GPU sampling buffers ({}): out of memory ({})", human_bytes(sc.total()),
                          gpu_memory_note());
    auto* sio = sample_io_.as<std::byte>();
    rows_dev_ = reinterpret_cast<SampleRow*>(sio + o_in);
    off_dev_ = reinterpret_cast<int32_t*>(rows_dev_ + T);
    win_dev_ = off_dev_ + T + 1;
    tokens_dev_ = reinterpret_cast<int32_t*>(sio + o_tok);
    sample_ws_ = sio + o_sws;
    PELICAN_CUDA_CHECK(cudaMemsetAsync(sample_io_.get(), 0, sample_io_.size(), stream_));
    PELICAN_TRY(sample_pin_.alloc(staged, "sampling inputs"));
    PELICAN_TRY(tokens_pin_.alloc(T * 4, "sampled tokens"));
    PELICAN_CUDA_CHECK(cudaEventCreateWithFlags(&sample_ev_, cudaEventDisableTiming));

    const char* err = nullptr;
    if (!mm_.init(max_in, max_out, max_tokens_, stream_, &err))
        return make_error("GPU matmul setup failed: {} ({})", err ? err : "unknown error", gpu_memory_note());
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};
}

Expected<std::unique_ptr<SequenceMemory>> CudaExecutor::create_memory(const MemoryOptions& opt) {
    if (opt.max_seqs <= 0 || opt.max_seq_tokens <= 0 || opt.block_tokens <= 0)
        return make_error("sequence memory: {} sequences of {} tokens in blocks of {}", opt.max_seqs,
                          opt.max_seq_tokens, opt.block_tokens);
    if (opt.max_seqs > max_seqs_)
        return make_error("sequence memory: {} sequences, but this GPU executor was made for at most {}",
                          opt.max_seqs, max_seqs_);
    if (opt.max_seq_tokens > max_seq_tokens_)
        return make_error(
            "sequence memory: a context of {} tokens, but this GPU executor was made for at most {}",
            opt.max_seq_tokens, max_seq_tokens_);
    const int64_t per_seq_blocks = (opt.max_seq_tokens + opt.block_tokens - 1) / opt.block_tokens;
    const int64_t kv_tokens =
        opt.kv_tokens > 0 ? opt.kv_tokens : int64_t{opt.max_seqs} * per_seq_blocks * opt.block_tokens;
    const int64_t n_blocks = (kv_tokens + opt.block_tokens - 1) / opt.block_tokens;
    if (n_blocks * opt.block_tokens > INT32_MAX)
        return make_error("sequence memory: {} KV positions is too many for one pool",
                          n_blocks * opt.block_tokens);
    CudaMemoryShape s = layer_shape_;
    s.n_blocks = static_cast<int32_t>(n_blocks);
    s.block_tokens = opt.block_tokens;
    if (s.n_rec_layers > 0) {
        if (opt.checkpoints < 1 || opt.checkpoints > 64)
            return make_error("sequence memory: {} recurrent checkpoints (1 to 64)", opt.checkpoints);
        s.n_entries = opt.max_seqs * (opt.checkpoints + 1);
    }
    PELICAN_ASSIGN(std::unique_ptr<CudaMemoryStorage> st, CudaMemoryStorage::create(s, stream_));
    SequenceMemoryOptions mo;
    mo.n_blocks = s.n_blocks;
    mo.block_tokens = opt.block_tokens;
    mo.max_seqs = opt.max_seqs;
    mo.max_seq_tokens = opt.max_seq_tokens;
    mo.recurrent = s.n_rec_layers > 0;
    mo.checkpoints = opt.checkpoints;
    return SequenceMemory::create(mo, std::move(st));
}

Status CudaExecutor::synchronize() {
    PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};
}

void CudaExecutor::stage(const Batch& b, const SequenceMemory& mem, int64_t table_stride) {
    const auto T = static_cast<size_t>(max_tokens_);
    half_ ^= 1;
    // This half's previous copy must have left the pinned memory (a never-recorded event is done).
    PELICAN_CUDA_CHECK(cudaEventSynchronize(stage_ev_[half_]));
    auto* h = static_cast<int32_t*>(pin_.p) + static_cast<size_t>(half_) * (io_bytes_ / sizeof(int32_t));
    int32_t *ids = h, *pos = h + T, *slot = h + 2 * T, *row_table = h + 3 * T, *out_rows = h + 4 * T,
            *tables = h + kIoArrays * T + 1;
    const int32_t bt = mem.block_tokens();
    for (size_t r = 0; r < runs_.size(); ++r) {
        const SeqRun& run = runs_[r];
        const std::span<const int32_t> table = mem.block_table(run.seq);
        const int64_t need = (run.pos0 + run.n + bt - 1) / bt;
        std::copy(table.begin(), table.begin() + need, tables + static_cast<int64_t>(r) * table_stride);
        for (int64_t i = 0; i < run.n; ++i) {
            const int64_t row = run.row0 + i, p = run.pos0 + i;
            ids[row] = b.token[static_cast<size_t>(row)];
            pos[row] = static_cast<int32_t>(p);
            slot[row] = table[static_cast<size_t>(p / bt)] * bt + static_cast<int32_t>(p % bt);
            row_table[row] = static_cast<int32_t>(r);
        }
    }
    std::copy(b.out_rows.begin(), b.out_rows.end(), out_rows);
    if (recurrent_) plan_states(mem, h + 8 * T, h + 5 * T, h + 6 * T, h + 7 * T);
    // One copy: the [T] arrays, then the tables the step uses.
    const size_t bytes =
        (kIoArrays * T + 1 + runs_.size() * static_cast<size_t>(table_stride)) * sizeof(int32_t);
    PELICAN_CUDA_CHECK(cudaMemcpyAsync(io_.get(), h, bytes, cudaMemcpyHostToDevice, stream_));
    PELICAN_CUDA_CHECK(cudaEventRecord(stage_ev_[half_], stream_));
}

Status CudaExecutor::step(const Batch& b, SequenceMemory& mem, const StepOutputs& out, ThreadPool&) {
    auto* st = dynamic_cast<CudaMemoryStorage*>(&mem.storage());
    if (!st) return make_error("step: this sequence memory was not made by the CUDA executor");
    {  // a memory of another model's shapes would be read out of bounds
        const CudaMemoryShape& s = st->shape();
        const CudaMemoryShape& w = layer_shape_;
        if (s.n_attn_layers != w.n_attn_layers || s.kv_dim != w.kv_dim || s.kv_type != w.kv_type ||
            s.n_rec_layers != w.n_rec_layers || s.conv_floats != w.conv_floats ||
            s.ssm_floats != w.ssm_floats)
            return make_error("step: this sequence memory was made for a model of other shapes");
    }
    PELICAN_TRY(split_batch(b, mem, hp_.n_vocab, hp_.n_embd, max_tokens_, out, runs_));
    if (static_cast<int64_t>(runs_.size()) > max_seqs_)
        return make_error("step: {} sequences, but this GPU executor takes at most {} per step", runs_.size(),
                          max_seqs_);
    PELICAN_TRY(check_sample_rows(out));
    for (const SeqRun& r : runs_) PELICAN_TRY(mem.prepare_write(r.seq, r.pos0, r.n));
    // Block-table stride of this step: the most blocks any of its sequences needs (a graphed step:
    // the blocks of its KV bucket).
    const int32_t bt = mem.block_tokens();
    block_tokens_ = bt;
    int64_t max_kv = 1;
    max_seq_rows_ = 1;
    for (const SeqRun& r : runs_) {
        max_kv = std::max(max_kv, r.pos0 + r.n);
        max_seq_rows_ = std::max(max_seq_rows_, r.n);
    }
    const auto n = static_cast<int64_t>(b.size()), n_out = static_cast<int64_t>(b.out_rows.size());
    const bool graphed = use_graphs_ && n <= gemv_rows_;
    if (graphed) {
        int64_t bucket = 256;
        while (bucket < max_kv) bucket *= 2;
        max_kv = std::min(bucket, mem.max_seq_tokens());
    }
    const int64_t table_stride = (max_kv + bt - 1) / bt;
    fused_head_ = n_out == n && n_out <= gemv_rows_ && out.hidden.empty();
    for (int64_t i = 0; fused_head_ && i < n_out; ++i) fused_head_ = b.out_rows[static_cast<size_t>(i)] == i;
    stage(b, mem, table_stride);
    if (graphed)
        launch_graphed(GraphKey{st->id(), n, n_out, max_kv, fused_head_,
                                recurrent_ ? static_cast<int64_t>(runs_.size()) : 0},
                       *st, table_stride);
    else
        forward(n, n_out, *st, table_stride, max_kv);
    const int64_t V = hp_.n_vocab, E = hp_.n_embd;
    if (!out.hidden.empty())
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(out.hidden.data(), xn_,
                                           static_cast<size_t>(n_out * E) * sizeof(float),
                                           cudaMemcpyDeviceToHost, stream_));
    if (!out.logits.empty())
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(out.logits.data(), logits_,
                                           static_cast<size_t>(n_out * V) * sizeof(float),
                                           cudaMemcpyDeviceToHost, stream_));
    if (!out.sample.empty()) sample_rows(out);  // after the logits copy: it rewrites them
    if (!out.hidden.empty() || !out.logits.empty() || !out.sample.empty())
        PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (!out.sample.empty())
        std::copy_n(static_cast<const int32_t*>(tokens_pin_.p), out.tokens.size(), out.tokens.begin());
    for (size_t i = 0; i < runs_.size(); ++i)
        mem.commit(runs_[i].seq, runs_[i].pos0 + runs_[i].n, recurrent_ ? n_states_[i] : 1);
    return {};
}

void CudaExecutor::launch_graphed(const GraphKey& key, const CudaMemoryStorage& st, int64_t table_stride) {
    for (const auto& [k, g] : graphs_)
        if (k == key) {
            PELICAN_CUDA_CHECK(cudaGraphLaunch(g, stream_));
            return;
        }
    // First step of this shape: run it eagerly (one-time kernel setup stays outside the capture),
    // then capture it for the next ones.
    forward(key.n, key.n_out, st, table_stride, key.max_kv);
    if (graphs_.size() >= kMaxGraphs) return;
    cudaGraphExec_t g =
        capture_graph(stream_, [&] { forward(key.n, key.n_out, st, table_stride, key.max_kv); });
    graphs_.emplace_back(key, g);
}

bool CudaExecutor::samples_on_device(const StepSampling& p) const {
    return gpu_sampling_exact(gpu_sample_params(p));
}

Status CudaExecutor::check_sample_rows(const StepOutputs& out) const {
    for (size_t i = 0; i < out.sample.size(); ++i) {
        const RowSample& r = out.sample[i];
        if (!samples_on_device(r.params))
            return make_error(
                "step: row {} asks for temperature {} with top_k {}, which the GPU does not sample "
                "exactly (greedy or 1 <= top_k <= {})",
                i, r.params.temperature, r.params.top_k, kMaxGpuTopK);
        if (static_cast<int64_t>(r.window.size()) > kWindowIdsPerRow)
            return make_error("step: row {}: a penalty window of {} tokens (the GPU takes at most {})", i,
                              r.window.size(), kWindowIdsPerRow);
    }
    return {};
}

// One staging copy (rows, window offsets, window ids), one batched sampling call, one copy back.
void CudaExecutor::sample_rows(const StepOutputs& out) {
    const auto n_out = static_cast<int64_t>(out.sample.size());
    const int64_t V = hp_.n_vocab;
    PELICAN_CUDA_CHECK(cudaEventSynchronize(sample_ev_));  // the previous step's copy has left the pins
    auto* rows = static_cast<SampleRow*>(sample_pin_.p);
    auto* off = reinterpret_cast<int32_t*>(rows + max_tokens_);
    int32_t* ids = off + max_tokens_ + 1;
    int32_t n_ids = 0;
    for (int64_t i = 0; i < n_out; ++i) {
        const RowSample& r = out.sample[static_cast<size_t>(i)];
        rows[i] = sample_row(gpu_sample_params(r.params), r.seed, r.counter);
        off[i] = n_ids;
        for (int32_t id : r.window) ids[n_ids++] = id;  // ids outside the vocabulary are ignored there
    }
    off[n_out] = n_ids;
    // rows_dev_, off_dev_ and ids_dev_ lie in one allocation as rows, off and ids do in the pins.
    const size_t bytes = reinterpret_cast<std::byte*>(ids + n_ids) - static_cast<std::byte*>(sample_pin_.p);
    PELICAN_CUDA_CHECK(
        cudaMemcpyAsync(sample_io_.get(), sample_pin_.p, bytes, cudaMemcpyHostToDevice, stream_));
    PELICAN_CUDA_CHECK(cudaEventRecord(sample_ev_, stream_));
    SampleBatchArgs a;
    a.logits = logits_;
    a.row_stride = V;
    a.n_rows = static_cast<int>(n_out);
    a.rows = rows_dev_;
    a.penalty_offsets = off_dev_;
    a.penalty_ids = win_dev_;
    a.out_tokens = tokens_dev_;
    a.workspace = sample_ws_;
    sample_batch_on_gpu(sample_limits_, a, stream_);
    PELICAN_CUDA_CHECK(cudaMemcpyAsync(tokens_pin_.p, tokens_dev_,
                                       static_cast<size_t>(n_out) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                       stream_));
}

}  // namespace pelican::cuda
