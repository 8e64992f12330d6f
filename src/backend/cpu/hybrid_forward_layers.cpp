// The per-layer steps of the hybrid Qwen3.5 MTP pass (backend/cpu/hybrid_forward.h) over one sequence's
// contiguous caches; the blocks themselves are backend/cpu/hybrid_blocks.h. Each reads the normed
// input xn_ [n, n_embd] and writes proj_ [n, n_embd].
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/hybrid_forward.h"

namespace pelican {

void HybridForward::deltanet(int il, int64_t n, ThreadPool& pool) {
    const DeltaNetWeights& W = w_.layers[static_cast<size_t>(il)].linear;
    const int slot = rec_index_[static_cast<size_t>(il)];
    blocks_->deltanet_project(W, xn_.data(), n, pool);
    blocks_->deltanet_core(W, 0, n, state_.conv(slot), state_.ssm(slot), /*chunked=*/n > 1, pool);
    blocks_->deltanet_finish(W, n, proj_.data(), pool);
}

void HybridForward::attention_layer(const LayerWeights& L, float* kc, float* vc, int64_t n, int64_t pos0,
                                    ThreadPool& pool) {
    const int64_t e = hp_.n_embd;
    cpu::rms_norm(x_.data(), L.attn_norm, xn_.data(), n, e, hp_.rms_eps, NormWeight::kOnePlus, &pool);
    attention(L.attn, kc, vc, n, pos0, pool);
    cpu::add(x_.data(), proj_.data(), x_.data(), n * e);
    cpu::rms_norm(x_.data(), L.ffn_norm, xn_.data(), n, e, hp_.rms_eps, NormWeight::kOnePlus, &pool);
    ffn(L, n, pool);
    cpu::add(x_.data(), proj_.data(), x_.data(), n * e);
}

void HybridForward::attention(const AttentionWeights& W, float* kc, float* vc, int64_t n, int64_t pos0,
                              ThreadPool& pool) {
    const int64_t kvd = hp_.kv_dim();
    // This chunk's K/V rows go straight into the cache.
    blocks_->attention_project(W, xn_.data(), n, cos_.data(), sin_.data(), kc + pos0 * kvd, vc + pos0 * kvd,
                               pool);
    AttentionParams ap;
    ap.n_head = static_cast<int>(hp_.n_head);
    ap.n_kv_head = static_cast<int>(hp_.n_head_kv);
    ap.head_dim = static_cast<int>(hp_.head_dim);
    ap.scale = hp_.attn_scale;
    ap.kv_type = DType::F32;
    cpu::attention(blocks_->q(), kc, vc, pos0, n, ap, blocks_->attn(), pool);
    blocks_->attention_finish(W, n, proj_.data(), pool);
}

void HybridForward::ffn(const LayerWeights& L, int64_t n, ThreadPool& pool) {
    if (L.kind.ffn == Ffn::kMoe)
        blocks_->moe(L.moe, xn_.data(), n, proj_.data(), pool);
    else
        blocks_->mlp(L.mlp, xn_.data(), n, proj_.data(), pool);
}

}  // namespace pelican
