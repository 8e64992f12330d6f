// One layer over a batch of rows from many sequences, by its kinds (model/layer_kind.h): RMSNorm ->
// mixer (attention with rope over each sequence's KV pages, gated attention, or Gated DeltaNet over
// each sequence's recurrent state) -> residual -> RMSNorm -> FFN (SwiGLU or MoE) -> residual. Variants
// come from the weights present (biases, q/k norms) and the hyper-parameters (norm style, rope layout
// and frequencies, sliding window, granite multipliers).
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_executor.h"
#include "backend/cpu/cpu_ops.h"

namespace pelican::cpu {
namespace {

// Element-wise work on [n_rows, width] split into row chunks over the pool when it is large
// (prefill); small inputs (decode) run on the calling thread. fn(row0, n_rows).
template <typename F>
void over_rows(ThreadPool& pool, int64_t n_rows, int64_t width, F&& fn) {
    constexpr int64_t kMinChunk = 1 << 15;  // floats per task
    const int64_t rows_per = std::max<int64_t>(1, kMinChunk / std::max<int64_t>(width, 1));
    const int64_t n_tasks = (n_rows + rows_per - 1) / rows_per;
    if (n_tasks <= 1 || pool.size() == 1) return fn(int64_t{0}, n_rows);
    pool.parallel_for(n_tasks, [&](int64_t task, int) {
        const int64_t r0 = task * rows_per;
        fn(r0, std::min(rows_per, n_rows - r0));
    });
}

// x += s * y over [n_rows, width] (y is scaled in place when s != 1).
void residual_add(ThreadPool& pool, float* x, float* y, float s, int64_t n_rows, int64_t width) {
    over_rows(pool, n_rows, width, [&](int64_t r0, int64_t nr) {
        float* xr = x + r0 * width;
        float* yr = y + r0 * width;
        if (s != 1.0f) scale(yr, s, yr, nr * width);
        add(xr, yr, xr, nr * width);
    });
}

}  // namespace

void CpuExecutor::paged_attention(int slot, const float* q, float* out, CpuMemoryStorage& kv,
                                  const SequenceMemory& mem, ThreadPool& pool) {
    const int64_t kvd = hp_.kv_dim();
    // This step's K/V rows into their sequences' pages (prepare_write made them writable).
    const int32_t bt = mem.block_tokens();
    const size_t row_bytes = static_cast<size_t>(kvd) * sizeof(float);
    float* kp = kv.k(slot);
    float* vp = kv.v(slot);
    for (const SeqRun& r : runs_) {
        const std::span<const int32_t> table = mem.block_table(r.seq);
        for (int64_t i = 0; i < r.n; ++i) {
            const int64_t p = r.pos0 + i;
            const int64_t at = table[static_cast<size_t>(p / bt)] * kv.block_floats() + (p % bt) * kvd;
            std::memcpy(kp + at, k_ + (r.row0 + i) * kvd, row_bytes);
            std::memcpy(vp + at, v_ + (r.row0 + i) * kvd, row_bytes);
        }
    }
    AttentionParams ap;
    ap.n_head = static_cast<int>(hp_.n_head);
    ap.n_kv_head = static_cast<int>(hp_.n_head_kv);
    ap.head_dim = static_cast<int>(hp_.head_dim);
    ap.scale = hp_.attn_scale;
    ap.kv_type = DType::F32;
    ap.window = hp_.sliding_window;
    attention_paged(q, KvPoolView{kp, kv.block_floats()}, KvPoolView{vp, kv.block_floats()}, bt, attn_seqs_,
                    ap, out, pool);
}

void CpuExecutor::deltanet_runs(int il, CpuMemoryStorage& st, const SequenceMemory& mem, ThreadPool& pool) {
    const DeltaNetWeights& W = model_.weights().layers[static_cast<size_t>(il)].linear;
    const int r = rec_slot_[static_cast<size_t>(il)];
    const CpuMemoryShape& sh = st.shape();
    const size_t entry_bytes = static_cast<size_t>(sh.conv_floats + sh.ssm_floats) * sizeof(float);
    const size_t conv_bytes = static_cast<size_t>(sh.conv_floats) * sizeof(float);
    for (size_t i = 0; i < runs_.size(); ++i) {
        const SeqRun& run = runs_[i];
        const int32_t read = mem.state_read_entry(run.seq);
        if (n_states_[i] == 1 && run.n > 1) {  // a prefill chunk: chunked form, the last state kept
            const int32_t dst = mem.state_write_entry(run.seq, 0);
            std::memcpy(st.conv(r, dst), st.conv(r, read), entry_bytes);
            blocks_->deltanet_core(W, run.row0, run.n, st.conv(r, dst), st.ssm(r, dst), /*chunked=*/true,
                                   pool);
            continue;
        }
        for (int64_t t = 0; t < run.n; ++t) {  // token by token, a state per token
            const int32_t src = t == 0 ? read : mem.state_write_entry(run.seq, static_cast<int32_t>(t - 1));
            const int32_t dst = mem.state_write_entry(run.seq, static_cast<int32_t>(t));
            // The conv window is copied and updated in place; the delta rule reads src's state and writes
            // dst's (no copy of the large state first).
            std::memcpy(st.conv(r, dst), st.conv(r, src), conv_bytes);
            blocks_->deltanet_core(W, run.row0 + t, 1, st.conv(r, dst), st.ssm(r, dst), /*chunked=*/false,
                                   pool, st.ssm(r, src));
        }
    }
}

void CpuExecutor::layer(const LayerWeights& L, int il, int kv_slot, int64_t n, CpuMemoryStorage& st,
                        const SequenceMemory& mem, ThreadPool& pool) {
    const int64_t e = hp_.n_embd;
    rms_norm(x_, L.attn_norm, xn_, n, e, hp_.rms_eps, hp_.norm_weight, &pool);
    tap("attn_norm", il, n, e, xn_);
    switch (L.kind.mixer) {
        case Mixer::kAttention:
            attention(il, kv_slot, L.attn, n, st, mem, pool);
            break;
        case Mixer::kGatedAttention:
            blocks_->attention_project(L.attn, xn_, n, cos_, sin_, k_, v_, pool);
            paged_attention(kv_slot, blocks_->q(), blocks_->attn(), st, mem, pool);
            blocks_->attention_finish(L.attn, n, proj_, pool);
            break;
        case Mixer::kDeltaNet:
            blocks_->deltanet_project(L.linear, xn_, n, pool);
            deltanet_runs(il, st, mem, pool);
            blocks_->deltanet_finish(L.linear, n, proj_, pool);
            break;
    }
    tap("attn_out", il, n, e, proj_);
    residual_add(pool, x_, proj_, hp_.residual_scale, n, e);
    tap("ffn_inp", il, n, e, x_);

    rms_norm(x_, L.ffn_norm, xn_, n, e, hp_.rms_eps, hp_.norm_weight, &pool);
    tap("ffn_norm", il, n, e, xn_);
    if (L.kind.ffn == Ffn::kMoe)
        blocks_->moe(L.moe, xn_, n, proj_, pool);
    else
        swiglu_ffn(il, L.mlp, n, pool);
    tap("ffn_out", il, n, e, proj_);
    residual_add(pool, x_, proj_, hp_.residual_scale, n, e);
    tap("l_out", il, n, e, x_);
}

void CpuExecutor::attention(int il, int kv_slot, const AttentionWeights& W, int64_t n, CpuMemoryStorage& kv,
                            const SequenceMemory& mem, ThreadPool& pool) {
    const int64_t e = hp_.n_embd, qd = hp_.q_dim(), kvd = hp_.kv_dim();
    const int hd = static_cast<int>(hp_.head_dim), nh = static_cast<int>(hp_.n_head);
    const int nkv = static_cast<int>(hp_.n_head_kv), n_rot = static_cast<int>(hp_.rope_dim);
    {  // one pass: the activations are quantized once, one thread barrier instead of three
        const Weight* ws[3] = {&W.wq, &W.wk, &W.wv};
        float* ys[3] = {q_, k_, v_};
        matmul_multi(ws, xn_, n, ys, mm_scratch_, pool);
    }
    if (W.bq) add_bias(q_, W.bq, n, qd);
    if (W.bk) add_bias(k_, W.bk, n, kvd);
    if (W.bv) add_bias(v_, W.bv, n, kvd);
    if (W.q_norm) {  // per-head RMSNorm over head_dim (qwen3)
        rms_norm(q_, W.q_norm, q_, n * nh, hd, hp_.rms_eps, NormWeight::kPlain, &pool);
        rms_norm(k_, W.k_norm, k_, n * nkv, hd, hp_.rms_eps, NormWeight::kPlain, &pool);
    }
    const int64_t half = n_rot / 2;
    over_rows(pool, n, qd + kvd, [&](int64_t t0, int64_t nt) {
        const float* c = cos_ + t0 * half;
        const float* sn = sin_ + t0 * half;
        rope(q_ + t0 * qd, nt, nh, hd, qd, n_rot, c, sn, hp_.rope_layout);
        rope(k_ + t0 * kvd, nt, nkv, hd, kvd, n_rot, c, sn, hp_.rope_layout);
    });
    tap("q", il, n, qd, q_);
    tap("k", il, n, kvd, k_);
    tap("v", il, n, kvd, v_);

    paged_attention(kv_slot, q_, attn_, kv, mem, pool);
    tap("attn", il, n, qd, attn_);

    matmul(W.wo, attn_, n, proj_, mm_scratch_, pool);
    if (W.bo) add_bias(proj_, W.bo, n, e);
}

void CpuExecutor::swiglu_ffn(int il, const SwigluWeights& W, int64_t n, ThreadPool& pool) {
    const int64_t e = hp_.n_embd, ff = hp_.n_ff;
    {
        const Weight* ws[2] = {&W.gate, &W.up};
        float* ys[2] = {gate_, up_};
        matmul_multi(ws, xn_, n, ys, mm_scratch_, pool);
    }
    if (W.b_gate) add_bias(gate_, W.b_gate, n, ff);
    if (W.b_up) add_bias(up_, W.b_up, n, ff);
    over_rows(pool, n, ff, [&](int64_t r0, int64_t nr) {
        swiglu(gate_ + r0 * ff, up_ + r0 * ff, gate_ + r0 * ff, nr * ff);
    });
    tap("ffn_act", il, n, ff, gate_);
    matmul(W.down, gate_, n, proj_, mm_scratch_, pool);
    if (W.b_down) add_bias(proj_, W.b_down, n, e);
}

}  // namespace pelican::cpu
