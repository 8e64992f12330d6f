// GPU attention (backend/cuda/attention.h) against the scalar references (ops/ops.h), on fresh
// random inputs (replay a failure with PELICAN_TEST_SEED=<seed>); rope_store_kv is in
// cuda_rope_store_test.cpp:
//   * attention_decode (split-KV): the streaming kernel (F16, head_dim 64/128/256: 1, 2, 4 or 8
//     rows per CTA, several row blocks — smaller ones with fewer than 8 KV heads, none empty —,
//     chunk edges 63..129 and 4096, up to 32K keys) and the
//     rows kernel (F32, other head dims): GQA 1/2/4/8, head_dim 16..256, n_tok 1..8, caches larger
//     than the live length, sliding window; a CUDA graph replayed at many positions; a PDL chain
//     rope_store_kv -> attention_decode -> attention_decode captured in a graph, bit-identical
//     to the same kernels run with a full synchronisation between them;
//   * attention_prefill: n_tok 1/17/300 at pos0 0 and 123, fp32 and tensor-core paths, windows.
// Cache rows that must not be read (past the live length, before the window) hold NaN, and the
// output starts as NaN, so a stray read or a missed write fails loudly.
//
// Small-problem mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h; for compute-sanitizer): every
// kernel and instantiation above still runs, at lengths <= 300 keys: decode keeps the rows kernel
// (F32 at hd 16/32/64/96/128/256, F16 at generic hd; one split and several; two row blocks) and
// the streaming kernel at every (hd 64/128/256, 1/2/4/8 rows per CTA), one split (<= 64 keys)
// and several, many idle splits (8192-row cache), windows (also shorter than the batch), a full
// cache, n_tok 1/4/7 (and 8 in the list); prefill keeps every case with n_tok 1/17/80 instead of
// 1/17/300; the graph replay and the PDL chain keep n_tok 1/4 (and hd 128/64) on a 640-row cache
// at 7 / 6 positions instead of 6000 rows at 11 / 8.
//
// Attention tolerance, per output element (t, h, d), u = 2^-24 (fp32 paths):
//   scores: fp32 fma dot of hd terms, times scale: |ds| <= E = (hd + 4) u S with
//           S = |scale| max_j sum_d |q_d k_jd|;
//   p_j = exp(s_j - m): relative error <= 2E + 2u |s_j - m| + 4u (expf, 2 ulp) and 2u per
//           rescale of the running sums (at most one per tile of >= 8 keys, plus the split
//           combine): eps = 2E + 2u (smax - smin) + 4u + 2u (n_keys / 8 + 4);
//   out = sum p_j v_j / sum p_j, both sums fp32 over n_keys terms:
//           |dout| <= (2 eps + (2 n_keys + 16) u) max_j |v_jd|.
// Tensor-core prefill (F16 cache): q is rounded to f16 by the kernel, so the reference gets the
// same rounded q; p_j is rounded to f16 as the A operand of P.V (relative 2^-11, or absolute
// 2^-25 below the f16 normal range) while the running sum keeps the fp32 p:
//           |dout| <= (2^-11 + n_keys 2^-25 + 2 eps' + (2 n_keys + hd + 16) 4u) max_j |v_jd|
// with eps' = eps at 4u (tensor-core fp32 accumulation is not IEEE round-to-nearest).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "core/float_convert.h"
#include "cuda_attention_test_util.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::expect_close;
using test::Rng;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
    DeviceBuffer b(v.size() * sizeof(T));
    EXPECT_TRUE(b.ok());
    PELICAN_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return b;
}

template <typename T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    PELICAN_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

// A KV cache on host (fp32 values, all representable in f16) and device (in `type`).
struct Cache {
    DType type;
    int64_t n_ctx, n_kv_head, hd;
    std::vector<float> k, v;  // [n_ctx][n_kv_head][hd]
    DeviceBuffer dk, dv;

    // Rows [first, last) random (k scaled by 1.5), the rest NaN.
    Cache(Rng& rng, DType t, int64_t ctx, int64_t kvh, int64_t head_dim, int64_t first, int64_t last)
        : type(t), n_ctx(ctx), n_kv_head(kvh), hd(head_dim) {
        const int64_t row = kvh * head_dim;
        k.assign(static_cast<size_t>(ctx * row), kNaN);
        v.assign(k.size(), kNaN);
        for (int64_t i = first * row; i < last * row; ++i) {
            k[i] = f16_to_f32(f32_to_f16(rng.normal() * 1.5f * (rng.index(50) == 0 ? 4.0f : 1.0f)));
            v[i] = f16_to_f32(f32_to_f16(rng.normal()));
        }
        upload_all();
    }
    void upload_all() {
        if (type == DType::F32) {
            dk = upload(k);
            dv = upload(v);
        } else {
            std::vector<uint16_t> hk(k.size()), hv(v.size());
            for (size_t i = 0; i < k.size(); ++i) {
                hk[i] = f32_to_f16(k[i]);
                hv[i] = f32_to_f16(v[i]);
            }
            dk = upload(hk);
            dv = upload(hv);
        }
    }
    cuda::KvView view() const { return {dk.get(), dv.get(), type, n_ctx}; }
};

enum class Path { kDecode, kPrefill };

struct AttnCase {
    int n_head, n_kv_head, hd;
    DType kv;
    int n_tok;
    int64_t pos0;
    int64_t window = 0;
    int64_t n_ctx = 0;  // 0: pos0 + n_tok + 9
};

std::string describe(const AttnCase& c, Path path) {
    return std::string(path == Path::kDecode ? "decode" : "prefill") + " heads " + std::to_string(c.n_head) +
           "/" + std::to_string(c.n_kv_head) + " hd " + std::to_string(c.hd) + " " +
           std::string(dtype_name(c.kv)) + " n_tok " + std::to_string(c.n_tok) + " pos0 " +
           std::to_string(c.pos0) + " window " + std::to_string(c.window) + " n_ctx " +
           std::to_string(c.n_ctx) +
           (path == Path::kDecode
                ? (c.kv == DType::F16 && (c.hd == 64 || c.hd == 128 || c.hd == 256) ? " [stream kernel]"
                                                                                    : " [rows kernel]")
                : "");
}

// Per-element bound of the file comment for q [n_tok][n_head][hd] against the cache.
std::vector<double> attention_tolerance(const AttnCase& c, const std::vector<float>& q, const Cache& cache,
                                        float scale, bool tensor_core) {
    const double u = std::ldexp(1.0, -24), uc = tensor_core ? 4 * u : u;
    const int group = c.n_head / c.n_kv_head, hd = c.hd;
    const int64_t row = static_cast<int64_t>(c.n_kv_head) * hd;
    std::vector<double> tol(q.size());
    for (int64_t t = 0; t < c.n_tok; ++t) {
        const int64_t pos = c.pos0 + t, first = c.window ? std::max<int64_t>(0, pos - c.window + 1) : 0;
        const int64_t n_keys = pos - first + 1;
        for (int h = 0; h < c.n_head; ++h) {
            const int64_t kvh = h / group;
            const float* qv = q.data() + (t * c.n_head + h) * hd;
            double S = 0, smax = -INFINITY, smin = INFINITY;
            for (int64_t j = first; j <= pos; ++j) {
                const float* kj = cache.k.data() + j * row + kvh * hd;
                double a = 0, s = 0;
                for (int d = 0; d < hd; ++d) {
                    a += std::fabs(static_cast<double>(qv[d]) * kj[d]);
                    s += static_cast<double>(qv[d]) * kj[d];
                }
                S = std::max(S, a * std::fabs(scale));
                smax = std::max(smax, s * scale);
                smin = std::min(smin, s * scale);
            }
            const double E = (hd + 4) * uc * S;
            const double eps = 2 * E + 2 * uc * (smax - smin) + 4 * uc + 2 * uc * (n_keys / 8.0 + 4);
            double rel = 2 * eps + (2.0 * n_keys + 16) * uc;
            if (tensor_core) rel += std::ldexp(1.0, -11) + n_keys * std::ldexp(1.0, -25) + hd * uc;
            for (int d = 0; d < hd; ++d) {
                double vmax = 0;
                for (int64_t j = first; j <= pos; ++j)
                    vmax = std::max(vmax, std::fabs(static_cast<double>(cache.v[j * row + kvh * hd + d])));
                tol[(t * c.n_head + h) * hd + d] = rel * vmax + 1e-30;
            }
        }
    }
    return tol;
}

struct Workspace {
    DeviceBuffer buf;
    Workspace(int64_t n_ctx, int n_head, int hd, int max_tokens)
        : buf(cuda::attention_workspace_bytes(n_ctx, n_head, hd, max_tokens)) {
        EXPECT_TRUE(buf.ok());
        PELICAN_CUDA_CHECK(cudaMemset(buf.get(), 0, buf.size()));
    }
    // The arrival counters (both combine levels') must be back at zero after every launch.
    void expect_counters_zero(int n_head) const {
        const std::vector<int32_t> ctr = download<int32_t>(buf, cuda::attention_workspace_counters(n_head));
        for (size_t i = 0; i < ctr.size(); ++i) ASSERT_EQ(ctr[i], 0) << "split counter " << i << " not reset";
    }
};

void run_attention(Rng& rng, AttnCase c, Path path) {
    if (c.n_ctx == 0) c.n_ctx = c.pos0 + c.n_tok + 9;
    c.n_ctx = std::max<int64_t>(c.n_ctx, c.pos0 + c.n_tok);
    const std::string what = describe(c, path);
    SCOPED_TRACE(what);
    const int hd = c.hd;
    const bool tensor_core =
        path == Path::kPrefill && c.kv == DType::F16 && (hd == 64 || hd == 128 || hd == 256);
    const int64_t first_row = c.window ? std::max<int64_t>(0, c.pos0 - c.window + 1) : 0;
    Cache cache(rng, c.kv, c.n_ctx, c.n_kv_head, hd, first_row, c.pos0 + c.n_tok);

    // q inside wider token rows (as in the fused qkv buffer): q_stride = (n_head + 2 n_kv) hd.
    const int64_t q_stride = static_cast<int64_t>(c.n_head + 2 * c.n_kv_head) * hd;
    std::vector<float> qrow = test::random_vec(rng, c.n_tok * q_stride);
    std::vector<float> q(static_cast<size_t>(c.n_tok) * c.n_head * hd);
    for (int t = 0; t < c.n_tok; ++t)
        for (int i = 0; i < c.n_head * hd; ++i) {
            float x = qrow[t * q_stride + i];
            if (tensor_core) x = f16_to_f32(f32_to_f16(x));  // the kernel's own rounding of q
            q[static_cast<size_t>(t) * c.n_head * hd + i] = x;
        }

    AttentionParams p;
    p.n_head = c.n_head;
    p.n_kv_head = c.n_kv_head;
    p.head_dim = hd;
    p.scale = 1.0f / std::sqrt(static_cast<float>(hd)) * rng.uniform(0.5f, 2.0f);
    p.kv_type = c.kv;
    p.window = c.window;
    std::vector<float> ref(q.size());
    std::vector<uint16_t> kh, vh;
    const void *rk = cache.k.data(), *rv = cache.v.data();
    if (c.kv == DType::F16) {
        kh.resize(cache.k.size());
        vh.resize(cache.v.size());
        for (size_t i = 0; i < kh.size(); ++i) {
            kh[i] = f32_to_f16(cache.k[i]);
            vh[i] = f32_to_f16(cache.v[i]);
        }
        rk = kh.data();
        rv = vh.data();
    }
    ref::attention(q.data(), rk, rv, c.pos0, c.n_tok, p, ref.data());
    const std::vector<double> tol = attention_tolerance(c, q, cache, p.scale, tensor_core);

    DeviceBuffer dq = upload(qrow);
    DeviceBuffer dout(q.size() * sizeof(float));
    PELICAN_CUDA_CHECK(cudaMemset(dout.get(), 0xff, dout.size()));  // NaN
    const int32_t pos0_i = static_cast<int32_t>(c.pos0);
    DeviceBuffer dpos = upload(std::vector<int32_t>{pos0_i});
    cuda::AttnArgs a;
    a.q = dq.as<float>();
    a.q_stride = q_stride;
    a.n_tok = c.n_tok;
    a.n_head = c.n_head;
    a.n_kv_head = c.n_kv_head;
    a.head_dim = hd;
    a.scale = p.scale;
    a.window = c.window;
    a.pos0_dev = dpos.as<int32_t>();
    a.kv = cache.view();
    a.out = dout.as<float>();
    if (path == Path::kDecode) {
        Workspace ws(c.n_ctx, c.n_head, hd, 8);
        a.workspace = ws.buf.get();
        for (int rep = 0; rep < 2; ++rep) {  // the second call reuses the workspace
            cuda::attention_decode(a, nullptr);
            PELICAN_CUDA_CHECK(cudaDeviceSynchronize());
            expect_close(download<float>(dout, q.size()), ref, tol, c.n_head, hd,
                         what + (rep ? " (workspace reused)" : ""));
            ws.expect_counters_zero(c.n_head);
        }
    } else {
        cuda::attention_prefill(a, c.pos0, nullptr);
        PELICAN_CUDA_CHECK(cudaDeviceSynchronize());
        expect_close(download<float>(dout, q.size()), ref, tol, c.n_head, hd, what);
    }
}

TEST(CudaAttention, DecodeMatchesReference) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const std::vector<AttnCase> full = {
        // heads, kv, hd, cache, n_tok, pos0, window, n_ctx
        {4, 4, 16, DType::F32, 1, 0},                  // first token, MHA, tiny head
        {8, 2, 32, DType::F16, 3, 4},                  // length 7
        {8, 2, 32, DType::F32, 7, 0},                  // length 7, every token in one step
        {32, 8, 128, DType::F16, 1, 63, 0, 8192},      // Llama-3 shape, length 64, big cache
        {32, 8, 128, DType::F16, 8, 992},              // length 1000, 8-token verification
        {32, 8, 128, DType::F32, 4, 4996},             // length 5000, fp32 cache
        {32, 8, 128, DType::F16, 1, 4999, 0, 8192},    // length 5000, decode
        {16, 2, 256, DType::F16, 2, 4998},             // Qwen3.5-like, length 5000 (4 blocks of 4 rows)
        {16, 2, 256, DType::F16, 1, 4095, 0, 4224},    // Qwen3.5 decode at 4K: 2 KV heads x 4 blocks of 2
        {16, 2, 256, DType::F16, 1, 32767, 0, 32768},  // Qwen3.5 decode at 32K: two-level combine
        {16, 2, 256, DType::F16, 8, 4992, 1000},       // window + 8 tokens + many splits: whole groups masked
        {8, 8, 128, DType::F16, 8, 4992, 700},         // the same at head_dim 128
        {10, 1, 64, DType::F16, 1, 3000},              // 1 KV head, 10 rows: five blocks of 2
        {16, 2, 256, DType::F32, 1, 999},              // head 256, fp32
        {16, 2, 256, DType::F16, 8, 56},               // 64 rows per kv head: two row blocks
        {8, 1, 64, DType::F16, 5, 4995},               // MQA group 8, length 5000
        {8, 1, 64, DType::F32, 7, 57},                 // group 8, length 64
        {4, 4, 64, DType::F16, 1, 999, 0, 40000},      // many splits idle
        {8, 2, 80, DType::F16, 2, 998},                // generic head dims
        {12, 4, 96, DType::F32, 3, 61},                //
        {8, 8, 16, DType::F16, 8, 4992},               //
        {32, 8, 128, DType::F16, 3, 997, 100},         // sliding window
        {16, 2, 256, DType::F32, 2, 4998, 1000},       // window, long
        {8, 2, 64, DType::F16, 8, 20, 4},              // window shorter than the batch
        // streaming kernel: rows per CTA 1 / 2 / 4 / 8, chunk and block edges, many splits
        {8, 8, 128, DType::F16, 1, 62},                // MHA, length 63 (1 row per CTA)
        {8, 8, 128, DType::F16, 1, 63},                // length 64
        {16, 8, 64, DType::F16, 1, 64},                // group 2, length 65
        {16, 8, 256, DType::F16, 1, 127},              // group 2, hd 256, length 128
        {32, 8, 128, DType::F16, 1, 128},              // length 129
        {32, 8, 128, DType::F16, 1, 4095, 0, 4096},    // length 4096, full cache
        {32, 8, 128, DType::F16, 1, 32767, 0, 32768},  // 32K keys
        {32, 4, 128, DType::F16, 2, 9000},             // group 8, 16 rows: two row blocks of 8
        {32, 8, 128, DType::F16, 3, 3000},             // 12 rows: two row blocks of 6
        {64, 8, 128, DType::F16, 1, 20000},            // group 8: 8 rows per CTA
        {8, 1, 256, DType::F16, 8, 700},               // group 8 x 8 tokens: 8 row blocks
        {32, 8, 128, DType::F16, 1, 20000, 4096},      // window 4096, long
        {32, 8, 64, DType::F16, 4, 5000, 77},          // window not a multiple of anything
        {16, 4, 256, DType::F16, 1, 9, 3},             // tiny window
    };
    // Small mode: lengths <= 300 (several splits already: 64 keys per stream split, 128 per rows
    // split), every rows-kernel instantiation reached (F32 at hd 64/128/256/generic, F16
    // generic), every streaming (hd, rows per CTA) instantiation, windows, idle splits.
    const std::vector<AttnCase> small = {
        // rows kernel
        {4, 4, 16, DType::F32, 1, 0},           // first token, MHA, tiny head
        {8, 2, 32, DType::F16, 3, 4},           // F16 generic, one split
        {8, 2, 32, DType::F32, 7, 0},           // every token in one step
        {32, 8, 128, DType::F32, 4, 296},       // F32 hd 128, splits
        {16, 2, 256, DType::F32, 1, 299},       // F32 hd 256, splits
        {8, 1, 64, DType::F32, 7, 57},          // F32 hd 64, group 8: two row blocks
        {8, 2, 80, DType::F16, 2, 298},         // F16 generic, splits
        {12, 4, 96, DType::F32, 3, 61},         // F32 generic
        {8, 8, 16, DType::F16, 8, 292},         // 8 tokens, splits
        {16, 2, 256, DType::F32, 2, 298, 100},  // window, splits
        // streaming kernel (hd, rows per CTA): (64, 1/2/4/8), (128, 1/2/4/8), (256, 1/2/4/8)
        {4, 4, 64, DType::F16, 1, 199, 0, 8192},   // 1 row, many splits idle
        {16, 8, 64, DType::F16, 1, 64},            // 2 rows, length 65: two splits
        {32, 8, 64, DType::F16, 1, 150},           // 4 rows
        {8, 1, 64, DType::F16, 5, 295},            // 8 rows (RB 8), MQA 40 rows: eight blocks of 5
        {10, 1, 64, DType::F16, 1, 150},           // 1 KV head, 10 rows: five blocks of 2 (none empty)
        {8, 2, 64, DType::F16, 8, 20, 4},          // window shorter than the batch
        {32, 8, 64, DType::F16, 4, 300, 77},       // window not a multiple of anything
        {8, 8, 128, DType::F16, 1, 62},            // 1 row, length 63: one split
        {8, 8, 128, DType::F16, 1, 63},            // length 64
        {8, 8, 128, DType::F16, 2, 100},           // 2 rows
        {32, 8, 128, DType::F16, 1, 63, 0, 8192},  // 4 rows, Llama-3 shape, big cache
        {32, 8, 128, DType::F16, 1, 128},          // length 129
        {32, 8, 128, DType::F16, 1, 255, 0, 256},  // full cache
        {32, 4, 128, DType::F16, 2, 300},          // 8 rows: two row blocks of 8
        {32, 8, 128, DType::F16, 3, 197, 100},     // 12 rows: two blocks of 6; window
        {8, 8, 256, DType::F16, 1, 150},           // 1 row
        {16, 8, 256, DType::F16, 1, 127},          // 2 rows, length 128
        {32, 8, 256, DType::F16, 1, 9, 3},         // 4 rows, tiny window
        {16, 2, 256, DType::F16, 8, 56},           // 8 rows: eight row blocks
        {16, 2, 256, DType::F16, 1, 150},          // Qwen3.5 decode: 2 KV heads x 4 blocks of 2 rows
        {12, 2, 128, DType::F16, 1, 100},          // 2 KV heads, group 6: three blocks of 2
    };
    for (const AttnCase& c : test::cuda_test_small() ? small : full) run_attention(rng, c, Path::kDecode);
    const int len = test::cuda_test_size(1000, 200);
    for (int n_tok = 1; n_tok <= 8; n_tok += test::cuda_test_size(1, 3)) {  // small: 1, 4, 7
        run_attention(rng, {32, 8, 128, DType::F16, n_tok, len - n_tok}, Path::kDecode);
        run_attention(rng, {16, 4, 64, DType::F32, n_tok, 64 - n_tok}, Path::kDecode);
    }
}

TEST(CudaAttention, PrefillMatchesReference) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const std::vector<AttnCase> full = {
        {4, 4, 16, DType::F32, 17, 0},           // fp32 path (golden tests)
        {8, 2, 32, DType::F32, 300, 123},        //
        {32, 8, 128, DType::F32, 17, 123},       //
        {16, 2, 256, DType::F32, 1, 0},          //
        {8, 2, 64, DType::F32, 300, 123, 50},    // window
        {4, 2, 16, DType::F16, 300, 0},          // f16 cache, generic head dim
        {32, 8, 128, DType::F16, 300, 123},      // tensor cores
        {32, 8, 128, DType::F16, 17, 0},         //
        {8, 1, 64, DType::F16, 300, 0},          //
        {8, 1, 64, DType::F16, 1, 123},          //
        {16, 2, 256, DType::F16, 300, 0},        //
        {16, 2, 256, DType::F16, 17, 123},       //
        {8, 2, 128, DType::F16, 300, 123, 100},  // window, tensor cores
        {4, 4, 256, DType::F16, 300, 123, 37},   //
    };
    // Small mode: the same paths with 80 tokens instead of 300 (two 64-token query tiles, the
    // last partial; more than 32 rows per kv head: several rows-kernel row blocks).
    std::vector<AttnCase> small = full;
    for (AttnCase& c : small) c.n_tok = std::min(c.n_tok, 80);
    for (const AttnCase& c : test::cuda_test_small() ? small : full) run_attention(rng, c, Path::kPrefill);
}

TEST(CudaAttention, DecodeGraphReplay) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    for (const int n_tok : {1, 4}) {
        const int n_head = 32, n_kv = 8, hd = 128;
        const int64_t n_ctx = test::cuda_test_size<int64_t>(6000, 640);
        SCOPED_TRACE("graph n_tok " + std::to_string(n_tok));
        Cache cache(rng, DType::F16, n_ctx, n_kv, hd, 0, n_ctx);
        const std::vector<float> q = test::random_vec(rng, static_cast<int64_t>(n_tok) * n_head * hd);
        DeviceBuffer dq = upload(q), dpos = upload(std::vector<int32_t>{0});
        DeviceBuffer dout(q.size() * sizeof(float));
        Workspace ws(n_ctx, n_head, hd, n_tok);
        cuda::AttnArgs a;
        a.q = dq.as<float>();
        a.n_tok = n_tok;
        a.n_head = n_head;
        a.n_kv_head = n_kv;
        a.head_dim = hd;
        a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        a.pos0_dev = dpos.as<int32_t>();
        a.kv = cache.view();
        a.out = dout.as<float>();
        a.workspace = ws.buf.get();

        cudaStream_t stream;
        PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        PELICAN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        cuda::attention_decode(a, stream);
        PELICAN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        PELICAN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

        AttentionParams p;
        p.n_head = n_head;
        p.n_kv_head = n_kv;
        p.head_dim = hd;
        p.scale = a.scale;
        p.kv_type = DType::F16;
        std::vector<uint16_t> kh(cache.k.size()), vh(cache.v.size());
        for (size_t i = 0; i < kh.size(); ++i) {
            kh[i] = f32_to_f16(cache.k[i]);
            vh[i] = f32_to_f16(cache.v[i]);
        }
        std::vector<int32_t> positions = {0, 5, 60, 124, 127, 128, 1000, 4095, 4096, 5000};
        if (test::cuda_test_small()) positions = {0, 5, 60, 127, 128, 500};
        positions.push_back(static_cast<int32_t>(n_ctx - n_tok));
        for (const int32_t pos0 : positions) {
            const AttnCase c{n_head, n_kv, hd, DType::F16, n_tok, pos0, 0, n_ctx};
            PELICAN_CUDA_CHECK(cudaMemsetAsync(dout.get(), 0xff, dout.size(), stream));
            PELICAN_CUDA_CHECK(
                cudaMemcpyAsync(dpos.get(), &pos0, sizeof pos0, cudaMemcpyHostToDevice, stream));
            PELICAN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
            PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream));
            std::vector<float> ref(q.size());
            ref::attention(q.data(), kh.data(), vh.data(), pos0, n_tok, p, ref.data());
            expect_close(download<float>(dout, q.size()), ref,
                         attention_tolerance(c, q, cache, p.scale, false), n_head, hd,
                         "graph replay at pos0 " + std::to_string(pos0));
            ws.expect_counters_zero(n_head);
        }
        PELICAN_CUDA_CHECK(cudaGraphExecDestroy(exec));
        PELICAN_CUDA_CHECK(cudaGraphDestroy(graph));
        PELICAN_CUDA_CHECK(cudaStreamDestroy(stream));
    }
}

// rope_store_kv -> attention_decode -> attention_decode, all PDL launches, captured in one graph
// and replayed at many positions (the rows being written start as NaN, so reading the cache
// before rope_store_kv finished shows up), against the same kernels run eagerly with a full
// synchronisation after each one (sincosf rope there, table rope in the graph). Bit-identical.
TEST(CudaAttention, PdlChainGraphMatchesSerial) {
    if (!pelican::cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    for (const int n_tok : {1, 4}) {
        for (const int hd : {128, 64}) {
            const int n_head = 32, n_kv = 8, n_rot = hd;
            const int64_t n_ctx = test::cuda_test_size<int64_t>(6000, 640);
            SCOPED_TRACE("pdl chain n_tok " + std::to_string(n_tok) + " hd " + std::to_string(hd));
            Cache cache(rng, DType::F16, n_ctx, n_kv, hd, 0, n_ctx);
            const int64_t row = static_cast<int64_t>(n_head + 2 * n_kv) * hd;
            const std::vector<float> qkv = test::random_vec(rng, n_tok * row);
            std::vector<float> inv_freq(n_rot / 2);
            for (int i = 0; i < n_rot / 2; ++i)
                inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / n_rot));
            DeviceBuffer dqkv = upload(qkv), dfreq = upload(inv_freq), dpos = upload(std::vector<int32_t>{0});
            DeviceBuffer table(static_cast<size_t>(n_ctx) * n_rot * 4);
            cuda::rope_table_build(dfreq.as<float>(), n_rot, n_ctx, 1.0f, table.as<float>(), nullptr);
            const size_t out_n = static_cast<size_t>(n_tok) * n_head * hd;
            DeviceBuffer dout(out_n * 4), dout2(out_n * 4);
            Workspace ws(n_ctx, n_head, hd, n_tok);

            cuda::RopeStoreArgs r;
            r.qkv = dqkv.as<float>();
            r.n_tok = n_tok;
            r.n_head = n_head;
            r.n_kv_head = n_kv;
            r.head_dim = hd;
            r.n_rot = n_rot;
            r.inv_freq = dfreq.as<float>();
            r.pos0_dev = dpos.as<int32_t>();
            r.kv = cache.view();
            cuda::AttnArgs a;
            a.q = dqkv.as<float>();
            a.q_stride = row;
            a.n_tok = n_tok;
            a.n_head = n_head;
            a.n_kv_head = n_kv;
            a.head_dim = hd;
            a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
            a.pos0_dev = dpos.as<int32_t>();
            a.kv = cache.view();
            a.workspace = ws.buf.get();

            cudaStream_t stream;
            PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            PELICAN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            {
                cuda::RopeStoreArgs rt = r;
                rt.rope_table = table.as<float>();
                cuda::rope_store_kv(rt, stream);
                cuda::AttnArgs a1 = a, a2 = a;
                a1.out = dout.as<float>();
                a2.out = dout2.as<float>();
                cuda::attention_decode(a1, stream);
                cuda::attention_decode(a2, stream);  // back to back: workspace reuse under PDL
            }
            PELICAN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
            PELICAN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

            const size_t row_bytes = static_cast<size_t>(n_kv) * hd * 2;
            auto reset = [&](int32_t pos0) {  // fresh qkv, NaN cache rows at pos0.., NaN outputs
                PELICAN_CUDA_CHECK(
                    cudaMemcpyAsync(dqkv.get(), qkv.data(), qkv.size() * 4, cudaMemcpyHostToDevice, stream));
                PELICAN_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(cache.dk.get()) + pos0 * row_bytes,
                                                   0xff, n_tok * row_bytes, stream));
                PELICAN_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(cache.dv.get()) + pos0 * row_bytes,
                                                   0xff, n_tok * row_bytes, stream));
                PELICAN_CUDA_CHECK(cudaMemsetAsync(dout.get(), 0xff, dout.size(), stream));
                PELICAN_CUDA_CHECK(cudaMemsetAsync(dout2.get(), 0xff, dout2.size(), stream));
                PELICAN_CUDA_CHECK(cudaMemcpyAsync(dpos.get(), &pos0, 4, cudaMemcpyHostToDevice, stream));
                PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream));
            };
            std::vector<int32_t> positions = {0, 1, 63, 64, 500, 4095, 5000};
            if (test::cuda_test_small()) positions = {0, 1, 63, 64, 500};
            positions.push_back(static_cast<int32_t>(n_ctx - n_tok));
            for (const int32_t pos0 : positions) {
                reset(pos0);
                cuda::rope_store_kv(r, stream);
                PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream));
                cuda::AttnArgs a1 = a;
                a1.out = dout.as<float>();
                cuda::attention_decode(a1, stream);
                PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream));
                const std::vector<float> want = download<float>(dout, out_n);
                const std::vector<float> qkv_want = download<float>(dqkv, qkv.size());
                ws.expect_counters_zero(n_head);
                size_t n_nan = 0;
                for (const float x : want) n_nan += std::isnan(x);
                ASSERT_EQ(n_nan, 0u) << "serial run at pos0 " << pos0 << " produced NaN";

                reset(pos0);
                PELICAN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
                PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream));
                const std::vector<float> got = download<float>(dout, out_n),
                                         got2 = download<float>(dout2, out_n);
                const std::vector<float> qkv_got = download<float>(dqkv, qkv.size());
                ws.expect_counters_zero(n_head);
                size_t bad = 0, bad2 = 0, first = out_n;
                for (size_t i = 0; i < out_n; ++i) {
                    const bool b1 = std::memcmp(&got[i], &want[i], 4) != 0;
                    bad += b1;
                    bad2 += std::memcmp(&got2[i], &want[i], 4) != 0;
                    if (b1 && first == out_n) first = i;
                }
                EXPECT_EQ(bad, 0u) << "graph (PDL) output differs from the serial run at pos0 " << pos0
                                   << " in " << bad << " of " << out_n << " values; first at " << first
                                   << ": got " << (first < out_n ? got[first] : 0.0f) << " want "
                                   << (first < out_n ? want[first] : 0.0f);
                EXPECT_EQ(bad2, 0u) << "second attention_decode of the graph differs at pos0 " << pos0;
                EXPECT_EQ(std::memcmp(qkv_got.data(), qkv_want.data(), qkv.size() * 4), 0)
                    << "roped q (table, graph) differs from the sincosf run at pos0 " << pos0;
            }
            std::printf("  pdl chain n_tok %d hd %d: graph == serial at %zu positions\n", n_tok, hd,
                        positions.size());
            PELICAN_CUDA_CHECK(cudaGraphExecDestroy(exec));
            PELICAN_CUDA_CHECK(cudaGraphDestroy(graph));
            PELICAN_CUDA_CHECK(cudaStreamDestroy(stream));
        }
    }
}

}  // namespace
}  // namespace pelican
