// CpuExecutor: creation, memory, scratch, the step and the output head (cpu_executor.h). The
// transformer block is in cpu_executor_layer.cpp.
#include "backend/cpu/cpu_executor.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace pelican::cpu {
namespace {

constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

CpuExecutor::CpuExecutor(const Model& m, int64_t max_tokens)
    : model_(m), hp_(m.hparams()), max_tokens_(max_tokens) {}

Expected<std::unique_ptr<CpuExecutor>> CpuExecutor::create(const Model& model,
                                                           const CpuExecutorOptions& opt) {
    if (model.weights().layers.size() != model.hparams().layer.size())
        return make_error("{}: {} layers of weights for {} layer kinds", model.path(),
                          model.weights().layers.size(), model.hparams().layer.size());
    if (opt.max_batch_tokens <= 0)
        return make_error("batch size must be positive, got {}", opt.max_batch_tokens);
    std::unique_ptr<CpuExecutor> e(new CpuExecutor(model, opt.max_batch_tokens));
    e->tap_ = opt.tap;
    const ModelHParams& hp = model.hparams();
    int n_kv = 0, n_rec = 0;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const bool attn = uses_kv(hp.layer[static_cast<size_t>(il)].mixer);
        e->kv_slot_.push_back(attn ? n_kv++ : -1);
        e->rec_slot_.push_back(attn ? -1 : n_rec++);
    }
    e->n_kv_layers_ = n_kv;
    e->n_states_.reserve(static_cast<size_t>(opt.max_batch_tokens));
    if (model.weights().mtp.present) {
        try {
            e->mtp_in_.resize(static_cast<size_t>(2 * opt.max_batch_tokens * hp.n_embd));
        } catch (const std::bad_alloc&) {
            return make_error("MTP: out of memory for the scratch of {} rows", opt.max_batch_tokens);
        }
    }
    if (hp.has(Mixer::kGatedAttention) || hp.has(Mixer::kDeltaNet) || hp.has(Ffn::kMoe)) {
        try {
            e->blocks_ = std::make_unique<HybridBlocks>(hp, opt.max_batch_tokens);
        } catch (const std::bad_alloc&) {
            return make_error("hybrid blocks: out of memory for the scratch of {} rows",
                              opt.max_batch_tokens);
        }
    }
    e->runs_.reserve(static_cast<size_t>(opt.max_batch_tokens));
    e->attn_seqs_.reserve(static_cast<size_t>(opt.max_batch_tokens));
    PELICAN_TRY(e->alloc_scratch());
    return e;
}

Expected<std::unique_ptr<SequenceMemory>> CpuExecutor::create_memory(const MemoryOptions& opt) {
    if (opt.max_seqs <= 0 || opt.max_seq_tokens <= 0 || opt.block_tokens <= 0)
        return make_error("sequence memory: {} sequences of {} tokens in blocks of {}", opt.max_seqs,
                          opt.max_seq_tokens, opt.block_tokens);
    const int64_t per_seq_blocks = (opt.max_seq_tokens + opt.block_tokens - 1) / opt.block_tokens;
    const int64_t kv_tokens =
        opt.kv_tokens > 0 ? opt.kv_tokens : int64_t{opt.max_seqs} * per_seq_blocks * opt.block_tokens;
    const int64_t n_blocks = (kv_tokens + opt.block_tokens - 1) / opt.block_tokens;
    if (n_blocks > INT32_MAX) return make_error("sequence memory: {} KV blocks is too many", n_blocks);
    CpuMemoryShape s;
    s.n_attn_layers = n_kv_layers_;
    if (opt.mtp) {
        if (!model_.weights().mtp.present)
            return make_error("sequence memory: {} has no MTP block for MemoryOptions::mtp", model_.path());
        s.n_attn_layers += static_cast<int64_t>(model_.weights().mtp.layers.size());
    }
    s.kv_dim = hp_.kv_dim();
    s.n_blocks = static_cast<int32_t>(n_blocks);
    s.block_tokens = opt.block_tokens;
    const bool recurrent = std::any_of(rec_slot_.begin(), rec_slot_.end(), [](int r) { return r >= 0; });
    if (recurrent) {
        if (opt.checkpoints < 1 || opt.checkpoints > 64)
            return make_error("sequence memory: {} recurrent checkpoints (1 to 64)", opt.checkpoints);
        const DeltaNetShape& ls = hp_.deltanet.linear;
        s.n_rec_layers = std::count_if(rec_slot_.begin(), rec_slot_.end(), [](int r) { return r >= 0; });
        s.conv_floats = int64_t{hp_.deltanet.conv_kernel - 1} * ls.conv_dim();
        s.ssm_floats = ls.state_floats();
        s.n_entries = opt.max_seqs * (opt.checkpoints + 1);
    }
    PELICAN_ASSIGN(std::unique_ptr<CpuMemoryStorage> st, CpuMemoryStorage::create(s));
    SequenceMemoryOptions mo;
    mo.n_blocks = s.n_blocks;
    mo.block_tokens = opt.block_tokens;
    mo.max_seqs = opt.max_seqs;
    mo.max_seq_tokens = opt.max_seq_tokens;
    mo.recurrent = recurrent;
    mo.checkpoints = opt.checkpoints;
    return SequenceMemory::create(mo, std::move(st));
}

Status CpuExecutor::alloc_scratch() {
    const auto T = static_cast<size_t>(max_tokens_);
    const auto f = sizeof(float);
    const size_t e = static_cast<size_t>(hp_.n_embd), q = static_cast<size_t>(hp_.q_dim());
    const size_t kv = static_cast<size_t>(hp_.kv_dim());
    const size_t ff = static_cast<size_t>(hp_.n_ff), half = static_cast<size_t>(hp_.rope_dim / 2);
    const int64_t max_in =
        std::max({hp_.n_embd, hp_.q_dim(), hp_.n_ff, mtp_in_.empty() ? 0 : 2 * hp_.n_embd});
    const size_t mm = round_up(matmul_scratch_bytes(max_in, max_tokens_));
    const size_t sizes[] = {T * e * f,    T * e * f,           T * q * f,  T * kv * f, T * kv * f,
                            T * q * f,    T * e * f,           T * ff * f, T * ff * f, T * half * f,
                            T * half * f, T * sizeof(int64_t), mm};
    size_t total = 0;
    for (size_t s : sizes) total += round_up(s);
    auto buf = Buffer::allocate(total);
    if (!buf) return make_error("scratch for {} tokens per step: {}", max_tokens_, buf.error().message);
    scratch_ = std::move(buf).value();
    auto* p = static_cast<std::byte*>(scratch_.data());
    size_t i = 0;
    const auto take = [&]() {
        std::byte* r = p;
        p += round_up(sizes[i++]);
        return r;
    };
    x_ = reinterpret_cast<float*>(take());
    xn_ = reinterpret_cast<float*>(take());
    q_ = reinterpret_cast<float*>(take());
    k_ = reinterpret_cast<float*>(take());
    v_ = reinterpret_cast<float*>(take());
    attn_ = reinterpret_cast<float*>(take());
    proj_ = reinterpret_cast<float*>(take());
    gate_ = reinterpret_cast<float*>(take());
    up_ = reinterpret_cast<float*>(take());
    cos_ = reinterpret_cast<float*>(take());
    sin_ = reinterpret_cast<float*>(take());
    pos_ = reinterpret_cast<int64_t*>(take());
    mm_scratch_ = std::span<std::byte>(take(), mm);
    return {};
}

Status CpuExecutor::step(const Batch& b, SequenceMemory& mem, const StepOutputs& out, ThreadPool& pool) {
    auto* kv = dynamic_cast<CpuMemoryStorage*>(&mem.storage());
    if (!kv) return make_error("step: this sequence memory was not made by the CPU executor");
    PELICAN_TRY(split_batch(b, mem, hp_.n_vocab, hp_.n_embd, max_tokens_, out, runs_));
    if (!out.sample.empty())
        return make_error("step: the CPU executor does not sample; sample its logits with the host Sampler");
    for (const SeqRun& r : runs_) PELICAN_TRY(mem.prepare_write(r.seq, r.pos0, r.n));

    const ModelWeights& w = model_.weights();
    const auto n = static_cast<int64_t>(b.size());
    const int64_t e = hp_.n_embd;
    tap_pos0_ = b.pos[0];
    // Embedding rows: any stored dtype, converted with the dtype table's row conversion.
    const ToFloatFn to_float = dtype_info(w.tok_embd.dtype).to_float;
    for (int64_t t = 0; t < n; ++t)
        to_float(w.tok_embd.row_ptr(b.token[static_cast<size_t>(t)]), x_ + t * e, e);
    if (hp_.embd_scale != 1.0f) scale(x_, hp_.embd_scale, x_, n * e);
    tap("embd", -1, n, e, x_);

    std::copy(b.pos.begin(), b.pos.end(), pos_);
    rope_table(hp_.inv_freq.data(), static_cast<int>(hp_.rope_dim), pos_, n, hp_.rope_attn_factor, cos_,
               sin_);

    attn_seqs_.clear();
    for (const SeqRun& r : runs_)
        attn_seqs_.push_back(PagedSeq{r.row0, r.n, r.pos0, mem.block_table(r.seq).data()});
    n_states_.clear();
    for (const SeqRun& r : runs_)
        n_states_.push_back(static_cast<int32_t>(r.n <= mem.checkpoints() ? r.n : 1));
    for (int il = 0; il < hp_.n_layer; ++il)
        layer(model_.weights().layers[static_cast<size_t>(il)], il, kv_slot_[static_cast<size_t>(il)], n, *kv,
              mem, pool);
    head(b, w.output_norm, out, pool);
    for (size_t i = 0; i < runs_.size(); ++i)
        mem.commit(runs_[i].seq, runs_[i].pos0 + runs_[i].n, n_states_[i]);
    return {};
}

void CpuExecutor::head(const Batch& b, const float* norm, const StepOutputs& out, ThreadPool& pool) {
    const auto n_out = static_cast<int64_t>(b.out_rows.size());
    if (n_out == 0 || (out.logits.empty() && out.hidden.empty())) return;
    const ModelWeights& w = model_.weights();
    const int64_t e = hp_.n_embd, V = hp_.n_vocab;
    // Gather the wanted rows (ascending, so in place is safe), then norm and project them.
    for (int64_t i = 0; i < n_out; ++i) {
        const int64_t r = b.out_rows[static_cast<size_t>(i)];
        if (r != i) std::memcpy(x_ + i * e, x_ + r * e, static_cast<size_t>(e) * sizeof(float));
    }
    rms_norm(x_, norm, xn_, n_out, e, hp_.rms_eps, hp_.norm_weight, &pool);
    tap("output_norm", -1, n_out, e, xn_);
    if (!out.hidden.empty()) std::copy(xn_, xn_ + n_out * e, out.hidden.data());
    if (out.logits.empty()) return;
    float* logits = out.logits.data();
    matmul(w.output, xn_, n_out, logits, mm_scratch_, pool);
    if (hp_.logit_scale != 1.0f) scale(logits, hp_.logit_scale, logits, n_out * V);
    tap("logits", -1, n_out, V, logits);
}

}  // namespace pelican::cpu
