// The weights of the shared dense block (declared once, in weights.cpp) for every Llama-family
// architecture. Matrices are cpu::Weight views of the mapped file when allow_repack is false (the
// GPU upload reads them); with it (the CPU) they are owned copies, Q4_0/Q8_0 repacked for the
// kernels, and the mapped pages of each matrix are released from the resident set as soon as it
// is copied (WeightSource::release_pages), so the process holds the weights once. Norm weights and
// biases are owned fp32 copies (converted when the file stores them narrower); the token
// embedding stays a view read row by row (or reads a tied head's copy). Absent optional tensors
// are nullptr.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/buffer.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/hparams.h"
#include "model/weight_source.h"

namespace pelican {

struct LayerWeights {
    const float* attn_norm = nullptr;  // [n_embd]
    cpu::Weight wq;                    // [q_dim, n_embd]   (torch order: out, in)
    cpu::Weight wk;                    // [kv_dim, n_embd]
    cpu::Weight wv;                    // [kv_dim, n_embd]
    cpu::Weight wo;                    // [n_embd, q_dim]
    const float* bq = nullptr;         // [q_dim]   (optional)
    const float* bk = nullptr;         // [kv_dim]
    const float* bv = nullptr;         // [kv_dim]
    const float* bo = nullptr;         // [n_embd]
    const float* q_norm = nullptr;     // [head_dim] (qwen3)
    const float* k_norm = nullptr;     // [head_dim]
    const float* ffn_norm = nullptr;   // [n_embd]
    cpu::Weight w_gate;                // [n_ff, n_embd]
    cpu::Weight w_up;                  // [n_ff, n_embd]
    cpu::Weight w_down;                // [n_embd, n_ff]
    const float* b_gate = nullptr;     // [n_ff]   (optional)
    const float* b_up = nullptr;       // [n_ff]
    const float* b_down = nullptr;     // [n_embd]
};

struct ModelWeights {
    // ne = {n_embd, n_vocab}, any dtype with a to_float row conversion: a view of the file, or of
    // the tied head's copy (share_tied_embedding).
    Tensor tok_embd;
    const float* output_norm = nullptr;  // [n_embd]
    cpu::Weight output;                  // [n_vocab, n_embd]; token_embd when the file has no output
    bool tied_output = false;
    std::vector<LayerWeights> layers;
    std::vector<Buffer> owned;             // fp32 copies of the norms and biases
    std::vector<float> rope_freq_factors;  // GGUF rope_freqs.weight ([rope_dim/2]) or empty
};

struct WeightLoadOptions {
    // Let the CPU backend repack Q4_0/Q8_0 for its kernels and copy the other matrices into
    // huge-page memory (cpu::Weight::prepare's own_copy), releasing the mapped pages they came from.
    bool allow_repack = true;
};

// A tied head (w.tied_output) that the CPU copied in the embedding's own row layout (GGUF rows,
// not repacked) holds the embedding's bytes: points w.tok_embd at that copy, so lookups read the
// one copy held and never fault the released mapping back in. Otherwise nothing changes (a
// repacked head, or a view for the GPU: the embedding stays a view of the file).
void share_tied_embedding(ModelWeights& w);

// Loads and checks every tensor of the block for hp (hp.n_vocab is set from token_embd when 0, and
// checked against it otherwise). Errors name the tensor as the file spells it, with the expected
// and found shapes.
Expected<ModelWeights> load_weights(const WeightSource& src, ModelHParams& hp,
                                    const WeightLoadOptions& opt = {});

}  // namespace pelican
