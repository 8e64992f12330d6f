// Forward pass: creation, scratch layout, embedding lookup, chunking and the output head
// (see forward.h). The transformer block itself is in forward_layer.cpp.
#include "model/forward.h"

#include <algorithm>

#include "backend/cpu/cpu_ops.h"

namespace pelican {
namespace {

constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Forward::Forward(const Model& m, KvCache kv, int64_t n_batch)
    : model_(m), hp_(m.hparams()), kv_(std::move(kv)), n_batch_(n_batch) {}

Expected<std::unique_ptr<Forward>> Forward::create(const Model& model, const ForwardOptions& opt) {
    const ModelHParams& hp = model.hparams();
    if (opt.n_ctx <= 0) return make_error("context size must be positive, got {}", opt.n_ctx);
    if (opt.n_batch <= 0) return make_error("batch size must be positive, got {}", opt.n_batch);
    PELICAN_ASSIGN(KvCache kv, KvCache::create(hp.n_layer, opt.n_ctx, hp.kv_dim()));
    std::unique_ptr<Forward> f(new Forward(model, std::move(kv), std::min(opt.n_batch, opt.n_ctx)));
    PELICAN_TRY(f->alloc_scratch());
    return f;
}

Status Forward::alloc_scratch() {
    const auto B = static_cast<size_t>(n_batch_);
    const auto f = sizeof(float);
    const size_t e = static_cast<size_t>(hp_.n_embd), q = static_cast<size_t>(hp_.q_dim());
    const size_t ff = static_cast<size_t>(hp_.n_ff), half = static_cast<size_t>(hp_.rope_dim / 2);
    const int64_t max_in = std::max({hp_.n_embd, hp_.q_dim(), hp_.n_ff});
    const size_t mm = round_up(cpu::matmul_scratch_bytes(max_in, n_batch_));
    const size_t sizes[] = {B * e * f,
                            B * e * f,
                            B * q * f,
                            B * q * f,
                            B * e * f,
                            B * ff * f,
                            B * ff * f,
                            B * half * f,
                            B * half * f,
                            B * sizeof(int64_t),
                            static_cast<size_t>(hp_.n_vocab) * f,
                            mm};
    size_t total = 0;
    for (size_t s : sizes) total += round_up(s);
    auto buf = Buffer::allocate(total);
    if (!buf) return make_error("scratch for {} tokens per step: {}", n_batch_, buf.error().message);
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
    attn_ = reinterpret_cast<float*>(take());
    proj_ = reinterpret_cast<float*>(take());
    gate_ = reinterpret_cast<float*>(take());
    up_ = reinterpret_cast<float*>(take());
    cos_ = reinterpret_cast<float*>(take());
    sin_ = reinterpret_cast<float*>(take());
    pos_ = reinterpret_cast<int64_t*>(take());
    last_logits_ = reinterpret_cast<float*>(take());
    mm_scratch_ = std::span<std::byte>(take(), mm);
    return {};
}

Status Forward::eval(std::span<const int32_t> tokens, int64_t pos0, ThreadPool& pool,
                     std::span<float> all_logits) {
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) return make_error("eval: no tokens");
    if (pos0 < 0 || pos0 + n > kv_.n_ctx())
        return make_error("eval: positions {}..{} do not fit the context of {} tokens", pos0, pos0 + n - 1,
                          kv_.n_ctx());
    for (int64_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= hp_.n_vocab)
            return make_error("eval: token id {} (at index {}) is outside the vocabulary of {}", tokens[i], i,
                              hp_.n_vocab);
    }
    if (!all_logits.empty() && static_cast<int64_t>(all_logits.size()) != n * hp_.n_vocab)
        return make_error("eval: all_logits holds {} floats, expected {} tokens x {} vocab",
                          all_logits.size(), n, hp_.n_vocab);
    for (int64_t done = 0; done < n; done += n_batch_) {
        const int64_t m = std::min(n_batch_, n - done);
        eval_chunk(tokens.data() + done, m, pos0 + done, pool,
                   all_logits.empty() ? nullptr : all_logits.data() + done * hp_.n_vocab);
    }
    return {};
}

void Forward::eval_chunk(const int32_t* tokens, int64_t n, int64_t pos0, ThreadPool& pool,
                         float* all_logits) {
    const ModelWeights& w = model_.weights();
    const int64_t e = hp_.n_embd;
    // Embedding rows: any stored dtype, converted with the dtype table's row conversion.
    const ToFloatFn to_float = dtype_info(w.tok_embd.dtype).to_float;
    for (int64_t t = 0; t < n; ++t) to_float(w.tok_embd.row_ptr(tokens[t]), x_ + t * e, e);
    if (hp_.embd_scale != 1.0f) cpu::scale(x_, hp_.embd_scale, x_, n * e);
    tap("embd", -1, pos0, n, e, x_);

    for (int64_t t = 0; t < n; ++t) pos_[t] = pos0 + t;
    cpu::rope_table(hp_.inv_freq.data(), static_cast<int>(hp_.rope_dim), pos_, n, hp_.rope_attn_factor, cos_,
                    sin_);

    for (int il = 0; il < hp_.n_layer; ++il) layer(il, n, pos0, pool);

    // Output head: every row when all logits are wanted, else only the last.
    const int64_t first = all_logits ? 0 : n - 1;
    const int64_t rows = n - first;
    cpu::rms_norm(x_ + first * e, w.output_norm, xn_, rows, e, hp_.rms_eps, NormWeight::kPlain, &pool);
    tap("output_norm", -1, pos0 + first, rows, e, xn_);
    const int64_t V = hp_.n_vocab;
    if (all_logits) {
        cpu::matmul(w.output, xn_, rows, all_logits, mm_scratch_, pool);
        if (hp_.logit_scale != 1.0f) cpu::scale(all_logits, hp_.logit_scale, all_logits, rows * V);
        std::copy(all_logits + (rows - 1) * V, all_logits + rows * V, last_logits_);
        tap("logits", -1, pos0, rows, V, all_logits);
    } else {
        cpu::matmul(w.output, xn_, 1, last_logits_, mm_scratch_, pool);
        if (hp_.logit_scale != 1.0f) cpu::scale(last_logits_, hp_.logit_scale, last_logits_, V);
        tap("logits", -1, pos0 + n - 1, 1, V, last_logits_);
    }
}

}  // namespace pelican
