// CpuExecutor::mtp_step (runtime/executor.h): the model's multi-token-prediction block over a batch of
// rows from many sequences. Per row: fc over [norm_embd(embd[x_{p+1}]) | norm_hidden(h_p)], the MTP
// decoder layers (gated attention + the stack's FFN, K/V in the memory's MTP pools at position p, rope at
// p + 1), the MTP norm and the shared LM head.
#include <algorithm>

#include "backend/cpu/cpu_executor.h"
#include "backend/cpu/cpu_ops.h"

namespace pelican::cpu {

Status CpuExecutor::mtp_step(const Batch& b, std::span<const float> hidden, SequenceMemory& mem,
                             const StepOutputs& out, ThreadPool& pool) {
    const ModelWeights& w = model_.weights();
    const MtpWeights& M = w.mtp;
    if (!M.present) return make_error("{}: the model has no MTP block", model_.path());
    auto* kv = dynamic_cast<CpuMemoryStorage*>(&mem.storage());
    if (!kv) return make_error("mtp step: this sequence memory was not made by the CPU executor");
    if (kv->shape().n_attn_layers < n_kv_layers_ + static_cast<int64_t>(M.layers.size()))
        return make_error("mtp step: the sequence memory was made without MemoryOptions::mtp");
    PELICAN_TRY(split_batch(b, mem, hp_.n_vocab, hp_.n_embd, max_tokens_, out, runs_, RowsFrom::kMtp));
    if (!out.sample.empty())
        return make_error(
            "mtp step: the CPU executor does not sample; sample its logits with the host Sampler");
    const auto n = static_cast<int64_t>(b.size());
    const int64_t e = hp_.n_embd;
    if (static_cast<int64_t>(hidden.size()) != n * e)
        return make_error("mtp step: hidden holds {} floats, expected {} rows x {}", hidden.size(), n, e);
    // The rows' positions hold blocks already (they are below the length); shared ones are copied.
    for (const SeqRun& r : runs_) PELICAN_TRY(mem.prepare_mtp_write(r.seq, r.pos0, r.n));

    tap_pos0_ = b.pos[0];
    const ToFloatFn to_float = dtype_info(w.tok_embd.dtype).to_float;
    for (int64_t t = 0; t < n; ++t)
        to_float(w.tok_embd.row_ptr(b.token[static_cast<size_t>(t)]), x_ + t * e, e);
    if (hp_.embd_scale != 1.0f) scale(x_, hp_.embd_scale, x_, n * e);
    rms_norm(x_, M.norm_embd, xn_, n, e, hp_.rms_eps, hp_.norm_weight, &pool);
    rms_norm(hidden.data(), M.norm_hidden, proj_, n, e, hp_.rms_eps, hp_.norm_weight, &pool);
    float* in = mtp_in_.data();  // [n, 2 n_embd]
    for (int64_t t = 0; t < n; ++t) {
        std::copy(xn_ + t * e, xn_ + (t + 1) * e, in + 2 * t * e);
        std::copy(proj_ + t * e, proj_ + (t + 1) * e, in + (2 * t + 1) * e);
    }
    matmul(M.fc, in, n, x_, mm_scratch_, pool);

    // x_{p+1} sits at p + 1 for rope; its K/V row goes to position p of the MTP pools.
    for (int64_t t = 0; t < n; ++t) pos_[t] = b.pos[static_cast<size_t>(t)] + 1;
    rope_table(hp_.inv_freq.data(), static_cast<int>(hp_.rope_dim), pos_, n, hp_.rope_attn_factor, cos_,
               sin_);
    attn_seqs_.clear();
    for (const SeqRun& r : runs_)
        attn_seqs_.push_back(PagedSeq{r.row0, r.n, r.pos0, mem.block_table(r.seq).data()});
    for (size_t i = 0; i < M.layers.size(); ++i)
        layer(M.layers[i], static_cast<int>(hp_.n_layer + static_cast<int64_t>(i)),
              n_kv_layers_ + static_cast<int>(i), n, *kv, mem, pool);
    head(b, M.norm, out, pool);
    for (const SeqRun& r : runs_) mem.commit_mtp(r.seq, r.pos0 + r.n);
    return {};
}

}  // namespace pelican::cpu
