// The Gated DeltaNet mixer of the Qwen3.5 / Qwen3-Next hybrid layers on the GPU (host-includable,
// fmt-free): the causal depthwise conv + SiLU with its rolling state, and one fused kernel for
// the L2 norms, the decay / beta gates, the gated delta rule over a run of tokens and the gated
// RMSNorm. Same functions as the scalar references in ops/ops_qwen35.h (ref::causal_conv1d_silu,
// ref::l2norm, ref::deltanet_gates, ref::gated_delta_rule_recurrent, ref::rms_norm_gated), in fp32.
// Both launches are graph-capturable (no allocation, no host sync) and use programmatic dependent
// launch (pdl.cuh). Bad arguments abort with a message (internal invariants, not user input).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace pelican::cuda {

// Exactly ref::causal_conv1d_silu, with a row stride on x:
//   x [n_tok rows, x_stride floats apart; the first n_ch columns used], w [n_ch, kernel],
//   state [kernel - 1, n_ch] (the previous inputs, oldest first; updated in place to the last
//   kernel - 1 rows of concat(state, x)), y [n_tok, n_ch] contiguous:
//   y[t, c] = silu(sum_{j < kernel} w[c, j] * xx[t + j, c]),  xx = concat(state, x) along time.
// kernel in 2..8. y must not overlap x or state. All pointers device. n_tok 0: nothing happens.
void conv1d_silu(const float* x, int64_t x_stride, int n_tok, int64_t n_ch, int kernel, const float* w,
                 float* state, float* y, cudaStream_t stream);

// One Gated DeltaNet step over n_tok tokens of one sequence (decode: 1; a prefill chunk: up to a
// few thousand), after the conv. Per token t and value head h, with kh the key head of h
// (v_tiled ? h % n_k_heads : h / (n_v_heads / n_k_heads), as DeltaNetShape::key_head):
//   q, k = conv_out[t] columns of key head kh, L2-normed (x / sqrt(sum x^2 + 1e-6)); q *= 1/sqrt(d_k)
//   v    = conv_out[t] columns of value head h
//   beta = sigmoid(b[t, h]);  g = -exp(a_log[h]) * softplus(a[t, h] + dt_bias[h])
//   S <- S exp(g);  d = beta (v - S^T k);  S <- S + k d^T;  o = S^T q      (S = state[h] [d_k, d_v])
//   out[t, h * d_v + j] = norm_w[j] * o_j / sqrt(mean(o^2) + eps) * silu(z[t, h * d_v + j])
// fp32 throughout; the state is read once at the start and written once at the end.
// Supported head widths: d_k == d_v, 16, 32, 64 or 128 (others abort).
struct DeltaNetStepArgs {
    int n_tok = 1;
    int n_k_heads = 0;  // query/key heads (divides n_v_heads)
    int n_v_heads = 0;  // value heads (one CTA each)
    int d_k = 0, d_v = 0;
    bool v_tiled = false;  // value-head order: false = grouped by key head (HF), true = tiled (GGUF)

    // conv_out [n_tok rows, conv_stride floats apart]: columns [Q (n_k_heads * d_k) | K (n_k_heads
    // * d_k) | V (n_v_heads * d_v)] (conv1d_silu's y). conv_stride 0 = that width (conv_dim).
    const float* conv_out = nullptr;
    int64_t conv_stride = 0;
    // a, b: [n_tok rows] of n_v_heads values (element (t, h) at t * stride + h); stride 0 = n_v_heads.
    // They may be columns of one wider row buffer (a stacked projection's output).
    const float* a = nullptr;
    int64_t a_stride = 0;
    const float* b = nullptr;
    int64_t b_stride = 0;
    // z: [n_tok rows] of n_v_heads * d_v gate values (t * z_stride + h * d_v + j); stride 0 = value_dim.
    const float* z = nullptr;
    int64_t z_stride = 0;

    const float* a_log = nullptr;    // [n_v_heads] (A = -exp(a_log))
    const float* dt_bias = nullptr;  // [n_v_heads]
    const float* norm_w = nullptr;   // [d_v] RMSNormGated weight (plain, not 1 + w)
    float eps = 1e-6f;               // RMSNormGated epsilon

    // [n_v_heads, d_k, d_v] fp32, in/out (S[h][i][j] at (h * d_k + i) * d_v + j). deltanet_step reads
    // it before its PDL wait (pdl.cuh): it must not be written by the kernel launched just before on
    // the stream (the forward passes run conv1d_silu in between; copies and memsets are fine).
    float* state = nullptr;
    // out [n_tok rows, out_stride floats apart] of n_v_heads * d_v values; out_stride 0 = value_dim.
    // Must not overlap any input or the state.
    float* out = nullptr;
    int64_t out_stride = 0;
    // Optional (decode): the causal conv + SiLU folded in. With conv_in set, conv_out is not read: the
    // kernel reads conv_in [n_tok rows, conv_in_stride floats apart; columns Q|K|V] (conv1d_silu's x)
    // and applies the conv itself with conv_w [conv_dim, conv_kernel] and conv_state [conv_kernel - 1,
    // conv_dim] (read before the PDL wait, updated in place at the end), bit for bit as conv1d_silu
    // then deltanet_step. Only where deltanet_conv_fold_supported() (otherwise deltanet_step aborts): the
    // value heads of one key head run as one cluster, so that the key head's Q/K channels' state is
    // written once, after every one of them has read it. The conv state must not be written by the
    // kernel launched just before (as `state`).
    const float* conv_in = nullptr;
    int64_t conv_in_stride = 0;  // 0 = conv_dim
    const float* conv_w = nullptr;
    float* conv_state = nullptr;
    int conv_kernel = 0;
    // Optional (the executors): the rows of many sequences in one launch. When run_row0 is set, the
    // launch covers n_runs runs (n_tok is not read): run r's tokens are rows run_row0[r] ..
    // run_row0[r + 1] - 1 of every row-indexed input and of out (one sequence's consecutive tokens);
    // its state is read from state + run_state_in[r] * state_stride (run_state_in[r] < 0: the run is
    // skipped, e.g. a prompt run the chunked form serves), and the state after the token of row i is
    // written to state + row_state_out[i] * state_stride when row_state_out[i] >= 0 (the last row of
    // every run that is not skipped must have one; an entry is never both read and written by one
    // launch). All three arrays are device int32 that no kernel of the step writes. Not with conv_in.
    const int32_t* run_row0 = nullptr;       // [n_runs + 1]
    const int32_t* run_state_in = nullptr;   // [n_runs]
    const int32_t* row_state_out = nullptr;  // [rows]
    int64_t state_stride = 0;                // floats between state entries
    int n_runs = 0;
};
void deltanet_step(const DeltaNetStepArgs& args, cudaStream_t stream);
// Whether deltanet_step can fold the conv in for these shapes: conv kernel 4, d_k = d_v in {16, 32, 64,
// 128}, and n_v_heads / n_k_heads == 1 or, on sm_90+ (clusters), <= 8.
bool deltanet_conv_fold_supported(int conv_kernel, int n_k_heads, int n_v_heads, int d);

// The same function over args.n_tok tokens in the chunked (WY) form for prompts, chunks of 64 tokens
// (ref::gated_delta_rule_chunked; deltanet_chunk.cu): the intra-chunk triangular systems of every
// (chunk, value head) in parallel, one sequential pass over the chunks per (value head, block of 32
// state columns), then the outputs and the gated RMSNorm of every (chunk, head) in parallel. Three
// PDL launches, graph-capturable. Same arguments, results equal to deltanet_step up to rounding.
// scratch: deltanet_chunk_scratch_bytes(args.n_tok, n_v_heads, d_k) bytes of device memory (need not
// be zeroed; overwritten; must not overlap the arguments' buffers).
size_t deltanet_chunk_scratch_bytes(int64_t n_tok, int64_t n_v_heads, int64_t d);
void deltanet_chunked(const DeltaNetStepArgs& args, void* scratch, cudaStream_t stream);

// conv1d_silu over the rows of many sequences at once (the executors). Row i (of n_rows) belongs to
// run row_run[i], whose rows are run_row0[run] .. run_row0[run + 1] - 1 (consecutive tokens of one
// sequence) and whose conv state before its first row is entry run_state_in[run] (>= 0):
// [kernel - 1, n_ch] at state + entry * state_stride. Output row i is conv1d_silu's output for that
// token (same order of operations, bit for bit); when row_state_out[i] >= 0 the conv state after row i
// (the run's last kernel - 1 inputs up to it) is written to that entry. An entry is never both read and
// written by one launch. Index arrays: device int32. kernel in 2..8; y [n_rows, n_ch] contiguous.
struct ConvRunsArgs {
    const float* x = nullptr;  // [n_rows rows, x_stride floats apart; the first n_ch columns used]
    int64_t x_stride = 0;
    int n_rows = 0;
    int64_t n_ch = 0;
    int kernel = 0;
    const float* w = nullptr;                // [n_ch, kernel]
    const int32_t* row_run = nullptr;        // [n_rows]
    const int32_t* run_row0 = nullptr;       // [runs + 1]
    const int32_t* run_state_in = nullptr;   // [runs]
    const int32_t* row_state_out = nullptr;  // [n_rows]
    float* state = nullptr;
    int64_t state_stride = 0;  // floats between entries
    float* y = nullptr;
};
void conv1d_silu_runs(const ConvRunsArgs& a, cudaStream_t stream);

}  // namespace pelican::cuda
