// The forward pass of the shared dense block over a KV cache, on the CPU:
//
//   x = embd[tokens] * embd_scale
//   per layer:  h = rms_norm(x) -> q, k, v (+bias) -> [q/k rms_norm per head] -> rope(q, k)
//               x += residual_scale * o_proj(attention(q, K, V))
//               x += residual_scale * down(silu(gate(rms_norm(x))) * up(rms_norm(x)))
//   logits = output(rms_norm(x)) * logit_scale
//
// A Forward owns one sequence's KV cache and every scratch buffer, all sized at create() for
// n_ctx positions and n_batch tokens per step: eval() never allocates. Prompts longer than n_batch
// are evaluated in n_batch chunks.
//
// Intermediates have names; a tap callback (debugging, eval) sees each one as it is produced:
//   "embd" [n, n_embd]; per layer "attn_norm" [n, n_embd], "q" [n, q_dim] and "k", "v" [n, kv_dim]
//   (after bias, q/k norm and rope), "attn" [n, q_dim] (attention output before o_proj),
//   "attn_out" [n, n_embd] (o_proj, before the residual scale), "ffn_inp" [n, n_embd] (residual after
//   attention), "ffn_norm", "ffn_act" [n, n_ff] (silu(gate) * up), "ffn_out" [n, n_embd],
//   "l_out" [n, n_embd]; then "output_norm" and "logits" [rows, n_vocab] (layer -1).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "core/buffer.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/forward_pass.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace pelican {

struct TapInfo {
    std::string_view name;  // see the list above
    int layer;              // -1 outside the layers
    int64_t pos0;           // absolute position of row 0
    int64_t n_rows;         // tokens in this chunk
    int64_t width;          // floats per row
    const float* data;      // [n_rows, width]
};
using TapFn = std::function<void(const TapInfo&)>;

struct ForwardOptions {
    int64_t n_ctx = 0;      // KV cache positions (required, > 0)
    int64_t n_batch = 512;  // most tokens per internal step (clamped to n_ctx)
};

class Forward final : public ForwardPass {
public:
    // Errors: bad sizes, allocation failures. The model must outlive the Forward.
    static Expected<std::unique_ptr<Forward>> create(const Model& model, const ForwardOptions& opt);

    // Runs `tokens` at positions pos0 .. pos0 + n - 1, writing their K/V rows (positions >= pos0
    // are overwritten, so pos0 may rewind). Logits of the last token go to last_logits(); with
    // all_logits non-empty (n * n_vocab floats) every token's logits are written there too.
    // Errors: empty input, token ids outside the vocabulary, pos0 + n > n_ctx, wrong all_logits size.
    Status eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                std::span<float> all_logits = {}) override;

    std::span<const float> last_logits() const override {
        return {last_logits_, static_cast<size_t>(hp_.n_vocab)};
    }
    int64_t n_ctx() const override { return kv_.n_ctx(); }
    int64_t n_batch() const override { return n_batch_; }
    const Model& model() const override { return model_; }
    size_t kv_bytes() const override { return kv_.bytes(); }
    void set_tap(TapFn tap) { tap_ = std::move(tap); }

private:
    Forward(const Model& m, KvCache kv, int64_t n_batch);
    Status alloc_scratch();
    void eval_chunk(const int32_t* tokens, int64_t n, int64_t pos0, ThreadPool& pool, float* all_logits);
    void layer(int il, int64_t n, int64_t pos0, ThreadPool& pool);
    void tap(std::string_view name, int layer, int64_t pos0, int64_t n, int64_t width,
             const float* data) const {
        if (tap_) tap_(TapInfo{name, layer, pos0, n, width, data});
    }

    const Model& model_;
    const ModelHParams& hp_;
    KvCache kv_;
    int64_t n_batch_;
    TapFn tap_;

    // Scratch, all [n_batch, width] fp32 unless noted (carved from one buffer).
    Buffer scratch_;
    float* x_ = nullptr;               // [n_batch, n_embd] residual stream
    float* xn_ = nullptr;              // [n_batch, n_embd] normed input of a sub-block
    float* q_ = nullptr;               // [n_batch, q_dim]
    float* attn_ = nullptr;            // [n_batch, q_dim]
    float* proj_ = nullptr;            // [n_batch, n_embd] o_proj / down_proj output
    float* gate_ = nullptr;            // [n_batch, n_ff]
    float* up_ = nullptr;              // [n_batch, n_ff]
    float* cos_ = nullptr;             // [n_batch, rope_dim/2]
    float* sin_ = nullptr;             // [n_batch, rope_dim/2]
    int64_t* pos_ = nullptr;           // [n_batch] absolute positions
    float* last_logits_ = nullptr;     // [n_vocab]
    std::span<std::byte> mm_scratch_;  // cpu::matmul activation scratch
};

}  // namespace pelican
