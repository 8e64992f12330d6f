// cuda::attention_paged (backend/cuda/attention_paged.h) against cpu::attention_paged on the same
// pools and block tables (the F16 pool's bits handed to both, so both widen the same halves), on
// fresh random inputs (replay a failure with PELICAN_TEST_SEED=<seed>):
//   * every rows-kernel instantiation: vectorised F16 at head_dim 64/128/256 and F32 at 64/128 with
//     1/2/4/8 query heads per CTA, generic F16/F32 at head_dims 16/20/80/96/200/256 (and a misaligned
//     pool at 128), groups of 10/12/16 (two head blocks); decode and short verify rows;
//   * mixed steps: decode rows, padding rows (row_pos -1: zeros) and prefill chunks in one launch, so
//     that some 64-row tiles are uniform (tensor-core tile kernel) and the chunks' edges are not;
//     windows, block sizes 1/5/16/32, a max_seq_rows hint below 16 (tile kernel off: rows kernel only);
//   * splits: B = 1..3 rows up to 16K keys (two-level combines at 2 KV heads), B = 128 decode rows
//     with contexts up to 3000;
//   * the workspace reused across launches of other shapes (bitwise the same output, counters back
//     at zero), and a CUDA graph captured once and replayed over other row_pos / row_table / tables.
// Pools: blocks shuffled over the pool, every third sequence sharing sequence 0's first block (a
// forked prefix), tables at shuffled indices. Pool rows no sequence owns (and table entries past a
// sequence's blocks, which point at an all-NaN block) hold NaN, the outputs start as NaN: a stray read
// or a missed write fails loudly.
//
// Tolerance, per output element (row, head, dim): |gpu - cpu| <= |gpu - exact| + |cpu - exact|, the
// bound of each side derived from its fp32 reduction order (u = 2^-24):
//   GPU rows kernel (cuda_attention_test.cpp's bound for the rows / streaming kernels, which this
//   kernel's arithmetic follows: fma dots over head_dim, scale, expf, a rescale per block of >= 8
//   keys, the warp merge and at most two combine levels):
//     E = (hd + 4) u S, S = |scale| max_j sum_d |q_d k_jd|;
//     eps = 2E + 2u (smax - smin) + 4u + 2u (n_keys / 8 + 4);  |d| <= (2 eps + (2 n_keys + 16) u) vmax;
//   GPU tile kernel (tensor cores): the same with 4u for u (non-IEEE mma accumulation), plus the f16
//     rounding of p in P.V: + (2^-11 + n_keys 2^-25 + hd 4u) vmax; q is rounded to f16 by the kernel,
//     so the reference gets the same rounded q (rows the tile kernel takes are known from the rule
//     in attention_paged.h, mirrored in tile_rows() below);
//   CPU (paged_attention_test.cpp's bound): E = (hd + 8) u S; eps = 2E + u (smax - smin) + 4u +
//     6u (n_keys + 1); |d| <= (2 eps + (n_keys + 10) u) vmax;
// vmax = max_j |v_jd| over the row's keys.
//
// Small-problem mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h; for compute-sanitizer): every
// instantiation and path above with contexts <= 600 keys (splits still happen: 64 keys per split),
// B = 32 instead of 128, the long cases at 2000 keys, the graph at 3 layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/attention_paged.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "core/float_convert.h"
#include "core/thread_pool.h"
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
    DeviceBuffer b(std::max<size_t>(v.size(), 1) * sizeof(T));
    EXPECT_TRUE(b.ok());
    if (!v.empty())
        PELICAN_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return b;
}

template <typename T>
std::vector<T> download(const void* p, size_t n) {
    std::vector<T> v(n);
    PELICAN_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

ThreadPool& cpu_pool() {
    static ThreadPool pool(0);
    return pool;
}

struct Shape {
    int n_head, n_kv_head, hd;
    DType type;
    int bt;                  // block_tokens
    int64_t window = 0;      // 0 = full causal
    size_t pool_offset = 0;  // bytes the device pools start past a 256-byte boundary (misaligned)
};

std::string shape_name(const Shape& s) {
    return "heads " + std::to_string(s.n_head) + "/" + std::to_string(s.n_kv_head) + " hd " +
           std::to_string(s.hd) + " " + std::string(dtype_name(s.type)) + " block " + std::to_string(s.bt) +
           " window " + std::to_string(s.window) + (s.pool_offset ? " misaligned pool" : "");
}

struct SeqSpec {
    int64_t pos0, n_tok;  // pos0 < 0: one padding row
};

// One layer's K and V pools [n_blocks][bt][n_kv_head][hd] on the host (fp32 values, all exact in
// f16; the f16 bits for an F16 pool) and on the device. Block 0 is all NaN: table entries that must
// not be read point there.
struct Pools {
    Shape s;
    int n_blocks;
    int64_t kvd;
    std::vector<float> k, v;
    std::vector<uint16_t> kh, vh;
    DeviceBuffer dk_buf, dv_buf;
    void* dk = nullptr;
    void* dv = nullptr;

    Pools(Rng& rng, const Shape& sh, int blocks)
        : s(sh), n_blocks(blocks), kvd(int64_t{sh.n_kv_head} * sh.hd) {
        const size_t n = static_cast<size_t>(blocks) * sh.bt * kvd;
        k.resize(n);
        v.resize(n);
        for (size_t i = 0; i < n; ++i) {
            k[i] = f16_to_f32(f32_to_f16(rng.normal() * 1.5f * (rng.index(50) == 0 ? 4.0f : 1.0f)));
            v[i] = f16_to_f32(f32_to_f16(rng.normal()));
        }
        for (size_t i = 0; i < static_cast<size_t>(sh.bt * kvd); ++i) k[i] = v[i] = kNaN;
    }
    // NaN in every pool row past valid[block] rows of its block.
    void poison(const std::vector<int>& valid) {
        for (int b = 0; b < n_blocks; ++b)
            for (int r = valid[b]; r < s.bt; ++r) {
                const size_t at = (static_cast<size_t>(b) * s.bt + r) * kvd;
                std::fill_n(k.begin() + at, kvd, kNaN);
                std::fill_n(v.begin() + at, kvd, kNaN);
            }
    }
    void upload_all() {
        const size_t es = s.type == DType::F16 ? 2 : 4, bytes = k.size() * es;
        dk_buf = DeviceBuffer(bytes + 256);
        dv_buf = DeviceBuffer(bytes + 256);
        ASSERT_TRUE(dk_buf.ok() && dv_buf.ok());
        dk = static_cast<char*>(dk_buf.get()) + s.pool_offset;
        dv = static_cast<char*>(dv_buf.get()) + s.pool_offset;
        if (s.type == DType::F16) {
            kh.resize(k.size());
            vh.resize(v.size());
            for (size_t i = 0; i < k.size(); ++i) {
                kh[i] = f32_to_f16(k[i]);
                vh[i] = f32_to_f16(v[i]);
            }
            PELICAN_CUDA_CHECK(cudaMemcpy(dk, kh.data(), bytes, cudaMemcpyHostToDevice));
            PELICAN_CUDA_CHECK(cudaMemcpy(dv, vh.data(), bytes, cudaMemcpyHostToDevice));
        } else {
            PELICAN_CUDA_CHECK(cudaMemcpy(dk, k.data(), bytes, cudaMemcpyHostToDevice));
            PELICAN_CUDA_CHECK(cudaMemcpy(dv, v.data(), bytes, cudaMemcpyHostToDevice));
        }
    }
    const void* host_k() const {
        return s.type == DType::F16 ? static_cast<const void*>(kh.data()) : k.data();
    }
    const void* host_v() const {
        return s.type == DType::F16 ? static_cast<const void*>(vh.data()) : v.data();
    }
};

int64_t seq_len(const SeqSpec& q) { return q.pos0 < 0 ? 0 : q.pos0 + q.n_tok; }

int blocks_needed(const std::vector<SeqSpec>& seqs, int bt) {
    int64_t n = 0;
    for (const SeqSpec& q : seqs) n += (seq_len(q) + bt - 1) / bt;
    return static_cast<int>(n);
}

// The rows of one launch and their block tables over a pool.
struct Layout {
    std::vector<SeqSpec> seqs;
    int n_rows = 0, n_tables = 0, max_blocks = 0;
    std::vector<int32_t> tables;     // [n_tables][max_blocks]; unused entries 0 (the NaN block)
    std::vector<int32_t> seq_table;  // table index of each sequence (padding: an all-0 table)
    std::vector<int64_t> seq_row0;
    std::vector<int32_t> row_pos, row_table;
    std::vector<int> valid;  // per pool block: rows some sequence owns
    int64_t max_kv = 1;
    int max_seq_rows = 0;
};

// Blocks 1 .. n_blocks - 1 shuffled; every third sequence shares sequence 0's first block when both
// have a block past it. Tables at shuffled indices among n_seqs + 2, max_blocks = the most any
// sequence needs + 2 (or the given max_blocks).
Layout make_layout(Rng& rng, const std::vector<SeqSpec>& seqs, int n_blocks, int bt, int max_blocks = 0) {
    Layout L;
    L.seqs = seqs;
    std::vector<int32_t> free_blocks(static_cast<size_t>(n_blocks - 1));
    std::iota(free_blocks.begin(), free_blocks.end(), 1);
    for (size_t i = free_blocks.size(); i > 1; --i) std::swap(free_blocks[i - 1], free_blocks[rng.gen() % i]);
    int most = 1;
    for (const SeqSpec& q : seqs) most = std::max<int>(most, static_cast<int>((seq_len(q) + bt - 1) / bt));
    L.max_blocks = max_blocks ? max_blocks : most + 2;
    EXPECT_LE(most, L.max_blocks);
    L.n_tables = static_cast<int>(seqs.size()) + 2;
    std::vector<int32_t> order(static_cast<size_t>(L.n_tables));
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.gen() % i]);
    L.tables.assign(static_cast<size_t>(L.n_tables) * L.max_blocks, 0);
    L.valid.assign(static_cast<size_t>(n_blocks), 0);
    size_t next = 0;
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
        const SeqSpec& q = seqs[i];
        const int32_t ti = order[i];
        int32_t* tab = L.tables.data() + static_cast<size_t>(ti) * L.max_blocks;
        const int64_t len = seq_len(q), nb = (len + bt - 1) / bt;
        for (int64_t b = 0; b < nb; ++b) {
            const bool share = i > 0 && i % 3 == 0 && b == 0 && len > bt && seq_len(seqs[0]) > bt;
            if (share) {
                tab[0] = L.tables[static_cast<size_t>(L.seq_table[0]) * L.max_blocks];
            } else {
                EXPECT_LT(next, free_blocks.size()) << "pool too small";
                tab[b] = free_blocks[next++ % free_blocks.size()];
            }
            const int rows = static_cast<int>(std::min<int64_t>(bt, len - b * bt));
            L.valid[static_cast<size_t>(tab[b])] = std::max(L.valid[static_cast<size_t>(tab[b])], rows);
        }
        L.seq_table.push_back(q.pos0 < 0 ? order[seqs.size()] : ti);  // padding: an unused (all-0) table
        L.seq_row0.push_back(row);
        for (int64_t t = 0; t < q.n_tok; ++t) {
            L.row_pos.push_back(q.pos0 < 0 ? -1 : static_cast<int32_t>(q.pos0 + t));
            L.row_table.push_back(L.seq_table.back());
        }
        row += q.n_tok;
        L.max_kv = std::max(L.max_kv, len);
        L.max_seq_rows = std::max(L.max_seq_rows, static_cast<int>(q.n_tok));
    }
    L.n_rows = static_cast<int>(row);
    return L;
}

// Rows the tile kernel takes (attention_paged.h): tile kernel on (F16, head_dim 64/128/256, aligned
// pool, n_rows and the max_seq_rows hint >= kPagedTileMinRows) and the row in a uniform tile.
std::vector<char> tile_rows(const Shape& s, const Layout& L, int hint) {
    std::vector<char> tile(static_cast<size_t>(L.n_rows), 0);
    const int seq_rows = hint > 0 ? hint : L.n_rows;
    const bool on = s.type == DType::F16 && (s.hd == 64 || s.hd == 128 || s.hd == 256) &&
                    s.pool_offset % 16 == 0 && L.n_rows >= cuda::kPagedTileMinRows &&
                    seq_rows >= cuda::kPagedTileMinRows;
    if (!on) return tile;
    for (int r0 = 0; r0 < L.n_rows; r0 += cuda::kPagedTileRows) {
        const int n = std::min(cuda::kPagedTileRows, L.n_rows - r0);
        bool ok = n >= cuda::kPagedTileMinRows && L.row_pos[r0] >= 0;
        for (int t = 1; t < n && ok; ++t)
            ok = L.row_table[r0 + t] == L.row_table[r0] && L.row_pos[r0 + t] == L.row_pos[r0] + t;
        if (ok) std::fill_n(tile.begin() + r0, n, 1);
    }
    return tile;
}

struct Reference {
    std::vector<float> out;
    std::vector<double> tol;
};

// cpu::attention_paged over the layout's real sequences (padding rows: exactly 0) and the bound of
// the file comment per element.
Reference reference(const Pools& pools, const Layout& L, const std::vector<float>& q, float scale,
                    const std::vector<char>& tile) {
    const Shape& s = pools.s;
    const int hd = s.hd, group = s.n_head / s.n_kv_head, bt = s.bt;
    const int64_t kvd = pools.kvd, row_floats = int64_t{s.n_head} * hd;
    AttentionParams p;
    p.n_head = s.n_head;
    p.n_kv_head = s.n_kv_head;
    p.head_dim = hd;
    p.scale = scale;
    p.kv_type = s.type;
    p.window = s.window;
    std::vector<cpu::PagedSeq> seqs;
    for (size_t i = 0; i < L.seqs.size(); ++i)
        if (L.seqs[i].pos0 >= 0)
            seqs.push_back({L.seq_row0[i], L.seqs[i].n_tok, L.seqs[i].pos0,
                            L.tables.data() + static_cast<size_t>(L.seq_table[i]) * L.max_blocks});
    Reference ref;
    ref.out.assign(static_cast<size_t>(L.n_rows * row_floats), 0.0f);
    ref.tol.assign(ref.out.size(), 1e-30);
    cpu::attention_paged(q.data(), {pools.host_k(), bt * kvd}, {pools.host_v(), bt * kvd}, bt, seqs, p,
                         ref.out.data(), cpu_pool());

    const double u = std::ldexp(1.0, -24);
    cpu_pool().parallel_for(L.n_rows, [&](int64_t row, int) {
        const int64_t pos = L.row_pos[static_cast<size_t>(row)];
        if (pos < 0) return;
        const int32_t* tab =
            L.tables.data() + static_cast<size_t>(L.row_table[static_cast<size_t>(row)]) * L.max_blocks;
        const int64_t first = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
        const int64_t n_keys = pos - first + 1;
        std::vector<int64_t> at(static_cast<size_t>(n_keys));  // element offset of each key's row
        for (int64_t j = first; j <= pos; ++j)
            at[static_cast<size_t>(j - first)] = (int64_t{tab[j / bt]} * bt + j % bt) * kvd;
        const bool tc = tile[static_cast<size_t>(row)] != 0;
        const double uc = tc ? 4 * u : u;
        std::vector<double> vmax(static_cast<size_t>(hd));
        for (int kvh = 0; kvh < s.n_kv_head; ++kvh) {
            std::fill(vmax.begin(), vmax.end(), 0.0);
            for (const int64_t a : at)
                for (int d = 0; d < hd; ++d)
                    vmax[d] = std::max(vmax[d], std::fabs(static_cast<double>(pools.v[a + kvh * hd + d])));
            for (int g = 0; g < group; ++g) {
                const int h = kvh * group + g;
                const float* qv = q.data() + row * row_floats + int64_t{h} * hd;
                double S = 0, smax = -INFINITY, smin = INFINITY;
                for (const int64_t a : at) {
                    const float* kj = pools.k.data() + a + kvh * hd;
                    double abs_sum = 0, dot = 0;
                    for (int d = 0; d < hd; ++d) {
                        const double x = static_cast<double>(qv[d]) * kj[d];
                        abs_sum += std::fabs(x);
                        dot += x;
                    }
                    S = std::max(S, abs_sum * std::fabs(scale));
                    smax = std::max(smax, dot * scale);
                    smin = std::min(smin, dot * scale);
                }
                const double E = (hd + 4) * uc * S;
                const double eps = 2 * E + 2 * uc * (smax - smin) + 4 * uc + 2 * uc * (n_keys / 8.0 + 4);
                double rel = 2 * eps + (2.0 * n_keys + 16) * uc;
                if (tc) rel += std::ldexp(1.0, -11) + n_keys * std::ldexp(1.0, -25) + hd * uc;
                const double Ec = (hd + 8) * u * S;
                const double epsc = 2 * Ec + u * (smax - smin) + 4 * u + 6 * u * (n_keys + 1.0);
                rel += 2 * epsc + (n_keys + 10.0) * u;
                for (int d = 0; d < hd; ++d)
                    ref.tol[static_cast<size_t>(row * row_floats + int64_t{h} * hd + d)] =
                        rel * vmax[d] + 1e-30;
            }
        }
    });
    return ref;
}

// Device copies of a layout's rows and tables, and a workspace.
struct DeviceRows {
    DeviceBuffer q, row_pos, row_table, tables, out, ws;
    size_t ws_bytes = 0;
};

struct Prepared {
    Layout L;
    std::vector<float> qwide;  // [n_rows][q_stride]
    std::vector<float> q;      // [n_rows][n_head * hd] (the same values; tile rows rounded to f16)
    std::vector<char> tile;
    Reference ref;
};

int64_t q_stride_of(const Shape& s) { return int64_t{s.n_head + 2 * s.n_kv_head} * s.hd; }

// q inside wider rows (as in the fused qkv buffer); the rows the tile kernel takes rounded to f16.
Prepared prepare(Rng& rng, const Pools& pools, Layout L, int hint, float scale) {
    const Shape& s = pools.s;
    Prepared P;
    P.L = std::move(L);
    const int64_t stride = q_stride_of(s), row_floats = int64_t{s.n_head} * s.hd;
    P.tile = tile_rows(s, P.L, hint);
    P.qwide = test::random_vec(rng, P.L.n_rows * stride);
    P.q.resize(static_cast<size_t>(P.L.n_rows * row_floats));
    for (int64_t r = 0; r < P.L.n_rows; ++r)
        for (int64_t i = 0; i < row_floats; ++i) {
            float& x = P.qwide[static_cast<size_t>(r * stride + i)];
            if (P.tile[static_cast<size_t>(r)]) x = f16_to_f32(f32_to_f16(x));
            P.q[static_cast<size_t>(r * row_floats + i)] = x;
        }
    P.ref = reference(pools, P.L, P.q, scale, P.tile);
    return P;
}

cuda::PagedAttnArgs make_args(const Pools& pools, const Layout& L, const DeviceRows& d, float scale, int hint,
                              int64_t max_kv) {
    const Shape& s = pools.s;
    cuda::PagedAttnArgs a;
    a.q = d.q.as<float>();
    a.q_stride = q_stride_of(s);
    a.n_rows = L.n_rows;
    a.n_head = s.n_head;
    a.n_kv_head = s.n_kv_head;
    a.head_dim = s.hd;
    a.scale = scale;
    a.window = s.window;
    a.row_pos = d.row_pos.as<int32_t>();
    a.row_table = d.row_table.as<int32_t>();
    a.tables = d.tables.as<int32_t>();
    a.max_blocks = L.max_blocks;
    a.block_tokens = s.bt;
    a.k_pool = pools.dk;
    a.v_pool = pools.dv;
    a.type = s.type;
    a.out = d.out.as<float>();
    a.workspace = d.ws.get();
    a.workspace_bytes = d.ws_bytes;
    a.max_kv = max_kv;
    a.max_seq_rows = hint;
    return a;
}

void expect_counters_zero(const DeviceRows& d) {
    const std::vector<int32_t> ctr =
        download<int32_t>(d.ws.get(), cuda::paged_attention_workspace_counters());
    for (size_t i = 0; i < ctr.size(); ++i) ASSERT_EQ(ctr[i], 0) << "arrival counter " << i << " not reset";
}

size_t out_floats(const Shape& s, const Layout& L) { return static_cast<size_t>(L.n_rows) * s.n_head * s.hd; }

// One launch of a fresh layout against the reference, then a second launch reusing the workspace,
// bitwise equal. hint: the max_seq_rows passed (-1: the layout's own). max_kv: the layout's + extra.
void run_case(Rng& rng, const Shape& s, const std::vector<SeqSpec>& seqs, const std::string& note,
              int hint = -1, int64_t extra_kv = 0) {
    const std::string what = shape_name(s) + ": " + note;
    SCOPED_TRACE(what);
    Pools pools(rng, s, blocks_needed(seqs, s.bt) + 3);
    Layout L = make_layout(rng, seqs, pools.n_blocks, s.bt);
    pools.poison(L.valid);
    pools.upload_all();
    if (hint < 0) hint = L.max_seq_rows;
    const int64_t max_kv = L.max_kv + extra_kv;
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd)) * rng.uniform(0.5f, 2.0f);
    const Prepared P = prepare(rng, pools, std::move(L), hint, scale);

    DeviceRows d;
    d.q = upload(P.qwide);
    d.row_pos = upload(P.L.row_pos);
    d.row_table = upload(P.L.row_table);
    d.tables = upload(P.L.tables);
    const size_t n_out = out_floats(s, P.L);
    d.out = DeviceBuffer(n_out * sizeof(float));
    DeviceBuffer out2(n_out * sizeof(float));
    d.ws_bytes = cuda::paged_attention_workspace_bytes(P.L.n_rows, s.n_head, s.n_kv_head, s.hd, max_kv);
    d.ws = DeviceBuffer(d.ws_bytes);
    ASSERT_TRUE(d.out.ok() && out2.ok() && d.ws.ok());
    PELICAN_CUDA_CHECK(cudaMemset(d.ws.get(), 0, d.ws_bytes));
    PELICAN_CUDA_CHECK(cudaMemset(d.out.get(), 0xff, n_out * sizeof(float)));  // NaN
    PELICAN_CUDA_CHECK(cudaMemset(out2.get(), 0xff, n_out * sizeof(float)));

    cuda::PagedAttnArgs a = make_args(pools, P.L, d, scale, hint, max_kv);
    cuda::attention_paged(a, nullptr);
    PELICAN_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = download<float>(d.out.get(), n_out);
    size_t n_tile = 0;
    for (const char t : P.tile) n_tile += t != 0;
    expect_close(
        got, P.ref.out, P.ref.tol, s.n_head, s.hd,
        what + " (" + std::to_string(P.L.n_rows) + " rows, " + std::to_string(n_tile) + " by tiles)");
    expect_counters_zero(d);

    a.out = out2.as<float>();  // the same workspace again
    cuda::attention_paged(a, nullptr);
    PELICAN_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got2 = download<float>(out2.get(), n_out);
    EXPECT_EQ(std::memcmp(got.data(), got2.data(), n_out * sizeof(float)), 0)
        << "second launch on the reused workspace differs";
    expect_counters_zero(d);
}

// Decode rows at lengths around the split and block edges, and a 3-row verify.
std::vector<SeqSpec> decode_mix(int64_t longest) {
    std::vector<SeqSpec> v = {{0, 1}, {62, 1}, {63, 1}, {64, 1}, {128, 1}, {5, 3}};
    for (int64_t len : {int64_t{300}, int64_t{777}, longest})
        if (len <= longest) v.push_back({len - 1, 1});
    return v;
}

TEST(CudaPagedAttention, EveryKernelMatchesCpu) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const int64_t longest = test::cuda_test_size<int64_t>(1500, 600);
    // Vectorised kernel: F16 at 64/128/256, F32 at 64/128, 1/2/4/8 heads per CTA (2 KV heads).
    for (const DType t : {DType::F16, DType::F32})
        for (const int hd : {64, 128, 256}) {
            if (t == DType::F32 && hd == 256) continue;
            for (const int group : {1, 2, 4, 8})
                run_case(rng, {2 * group, 2, hd, t, 16}, decode_mix(longest),
                         "vectorised, group " + std::to_string(group));
        }
    // Generic kernel: other head dims, F32 at 256, a misaligned pool; 1/4/8 heads per CTA.
    struct G {
        int n_head, n_kv_head, hd;
        DType t;
        size_t offset;
    };
    const std::vector<G> generic = {
        {2, 2, 80, DType::F16, 0},  {8, 2, 80, DType::F16, 0},  {16, 2, 80, DType::F16, 0},
        {2, 2, 96, DType::F32, 0},  {8, 2, 96, DType::F32, 0},  {16, 2, 96, DType::F32, 0},
        {2, 2, 256, DType::F32, 0}, {8, 2, 256, DType::F32, 0}, {16, 2, 256, DType::F32, 0},
        {2, 2, 200, DType::F16, 0}, {6, 2, 200, DType::F16, 0}, {16, 2, 200, DType::F16, 0},
        {4, 2, 16, DType::F16, 0},  {6, 3, 20, DType::F16, 0},  {8, 2, 128, DType::F16, 2},
        {8, 8, 64, DType::F32, 4},
    };
    for (const G& g : generic)
        run_case(rng, {g.n_head, g.n_kv_head, g.hd, g.t, 16, 0, g.offset}, decode_mix(longest), "generic");
    // Groups above 8: two head blocks (16 -> 8 + 8, 12 -> 6 + 6, 10 -> 5 + 5).
    run_case(rng, {32, 2, 128, DType::F16, 16}, decode_mix(longest), "group 16");
    run_case(rng, {24, 2, 64, DType::F32, 16}, decode_mix(longest), "group 12");
    run_case(rng, {10, 1, 256, DType::F16, 16}, decode_mix(longest), "group 10");
    run_case(rng, {20, 2, 80, DType::F16, 16}, decode_mix(longest), "group 10, generic");
}

// rows 0..4 decode, 5..154 a 150-row chunk (tile 1 = rows 64..127 uniform, tiles 0 and 2 mixed),
// then decode, a padding row, decode, and a 100-row chunk over rows 159..258 (tile 3 uniform, tile 4
// has 3 rows: rows kernel).
std::vector<SeqSpec> mixed_layout(int64_t scale_len) {
    const int64_t L = scale_len;
    return {{L / 3, 1}, {0, 1},     {L - 1, 1}, {17, 1}, {L / 2, 1},  {37, 150},
            {300, 1},   {L / 5, 2}, {-1, 1},    {5, 1},  {L / 4, 100}};
}

TEST(CudaPagedAttention, MixedDecodeAndPrefillRows) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const int64_t len = test::cuda_test_size<int64_t>(2000, 600);
    for (const int hd : {128, 64, 256}) {
        const int n_head = hd == 64 ? 8 : 32, n_kv = hd == 64 ? 1 : (hd == 256 ? 4 : 8);
        run_case(rng, {n_head, n_kv, hd, DType::F16, 16}, mixed_layout(len), "mixed");
        run_case(rng, {n_head, n_kv, hd, DType::F16, 16, 100}, mixed_layout(len), "mixed, window 100");
        run_case(rng, {n_head, n_kv, hd, DType::F16, 32, 1000}, mixed_layout(len), "mixed, window 1000");
    }
    run_case(rng, {32, 8, 128, DType::F32, 16}, mixed_layout(len), "mixed, F32 (rows kernel only)");
    run_case(rng, {16, 4, 80, DType::F16, 5, 7}, mixed_layout(len), "mixed, generic, block 5, window 7");
    run_case(rng, {8, 2, 128, DType::F16, 5}, mixed_layout(len), "mixed, block 5 (page walk in tiles)");
    run_case(rng, {8, 2, 64, DType::F16, 1}, mixed_layout(300), "mixed, one token per block");
    run_case(rng, {32, 8, 128, DType::F16, 16}, mixed_layout(len), "mixed, hint 8: rows kernel only", 8);
    run_case(rng, {32, 8, 128, DType::F16, 16}, mixed_layout(len), "mixed, hint 0 (unknown)", 0);
    // Chunks from position 0 on tile edges: 64 rows at row 0 (uniform), then exactly 16 rows of one
    // sequence in a tile (uniform, the fewest), then 15 (rows kernel).
    run_case(rng, {16, 4, 128, DType::F16, 16}, {{0, 64}, {200, 16}}, "chunk of 64 at 0, chunk of 16");
    run_case(rng, {16, 4, 128, DType::F16, 16}, {{0, 64}, {200, 15}, {3, 1}}, "chunk of 64, chunk of 15");
    run_case(rng, {16, 2, 256, DType::F16, 16, 50}, {{0, 200}}, "one 200-row chunk from 0, window 50");
    // Padding rows only, and a padding row among decode rows in a graph-bucket-like launch.
    run_case(rng, {8, 2, 128, DType::F16, 16}, {{-1, 1}, {-1, 1}, {-1, 1}}, "padding only");
    run_case(rng, {8, 2, 128, DType::F16, 16}, {{99, 1}, {-1, 1}, {1000, 1}, {-1, 1}}, "decode + padding", -1,
             3000);
}

TEST(CudaPagedAttention, LongContextSplits) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const int64_t L = test::cuda_test_size<int64_t>(16384, 2000);
    run_case(rng, {32, 8, 128, DType::F16, 16}, {{L - 1, 1}}, "B 1 long");
    run_case(rng, {32, 8, 128, DType::F16, 16}, {{L - 1, 1}, {L / 3, 1}}, "B 2 long");
    run_case(rng, {16, 2, 256, DType::F16, 16}, {{99, 1}, {699, 1}, {L - 1, 1}},
             "Qwen3.5 shape: two-level combines");
    const int64_t window = test::cuda_test_size<int64_t>(4096, 500);  // shorter than the rows' contexts
    run_case(rng, {16, 2, 256, DType::F16, 16, window}, {{L - 1, 1}, {L / 2, 2}},
             "window " + std::to_string(window));
    run_case(rng, {32, 8, 128, DType::F32, 32}, {{L - 1, 1}}, "F32 long");
    run_case(rng, {8, 1, 80, DType::F16, 16}, {{L - 1, 1}, {L / 4, 1}}, "generic long");
    run_case(rng, {32, 8, 128, DType::F16, 16}, {{40, 1}}, "short row, max_kv far above", -1, L);
    // B = 128 (32 in small mode) decode rows of contexts 1..3000, F16 and F32.
    const int B = test::cuda_test_size(128, 32);
    const int64_t ctx = test::cuda_test_size<int64_t>(3000, 600);
    for (const DType t : {DType::F16, DType::F32}) {
        std::vector<SeqSpec> seqs;
        for (int i = 0; i < B; ++i) seqs.push_back({rng.index(ctx), 1});
        run_case(rng, {32, 8, 128, t, 16}, seqs, "B " + std::to_string(B) + " decode");
    }
    std::vector<SeqSpec> seqs;
    for (int i = 0; i < B; ++i) seqs.push_back({rng.index(ctx), 1});
    run_case(rng, {8, 8, 64, DType::F16, 32}, seqs, "B " + std::to_string(B) + " decode, MHA");
}

// One workspace (zeroed once) for launches of different shapes in a row: a split-heavy launch,
// then a wide one, then the first again: bitwise the same, counters at zero after each.
TEST(CudaPagedAttention, WorkspaceReusedAcrossLaunches) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const Shape s{16, 2, 256, DType::F16, 16};
    const int64_t L = test::cuda_test_size<int64_t>(8000, 1500);
    const std::vector<SeqSpec> a_seqs = {{L - 1, 1}, {L / 2, 1}};
    std::vector<SeqSpec> b_seqs;
    for (int i = 0; i < 100; ++i) b_seqs.push_back({rng.index(500), 1});
    std::vector<SeqSpec> all = a_seqs;
    all.insert(all.end(), b_seqs.begin(), b_seqs.end());
    Pools pools(rng, s, blocks_needed(all, s.bt) + 3);
    // Two layouts over one pool: A's blocks come first in `all`, so lay out `all` and cut it.
    Layout whole = make_layout(rng, all, pools.n_blocks, s.bt);
    pools.poison(whole.valid);
    pools.upload_all();
    auto sub = [&](size_t from, size_t n) {
        Layout l;
        l.max_blocks = whole.max_blocks;
        l.n_tables = whole.n_tables;
        l.tables = whole.tables;
        l.valid = whole.valid;
        for (size_t i = from; i < from + n; ++i) {
            l.seqs.push_back(whole.seqs[i]);
            l.seq_table.push_back(whole.seq_table[i]);
            l.seq_row0.push_back(l.n_rows);
            for (int64_t t = 0; t < whole.seqs[i].n_tok; ++t) {
                l.row_pos.push_back(static_cast<int32_t>(whole.seqs[i].pos0 + t));
                l.row_table.push_back(whole.seq_table[i]);
            }
            l.n_rows += static_cast<int>(whole.seqs[i].n_tok);
            l.max_kv = std::max(l.max_kv, seq_len(whole.seqs[i]));
        }
        l.max_seq_rows = 1;
        return l;
    };
    const float scale = 1.0f / 16.0f;
    const Prepared A = prepare(rng, pools, sub(0, a_seqs.size()), 1, scale);
    const Prepared B = prepare(rng, pools, sub(a_seqs.size(), b_seqs.size()), 1, scale);

    DeviceRows d;
    d.ws_bytes = cuda::paged_attention_workspace_bytes(128, s.n_head, s.n_kv_head, s.hd, L);
    d.ws = DeviceBuffer(d.ws_bytes);
    ASSERT_TRUE(d.ws.ok());
    PELICAN_CUDA_CHECK(cudaMemset(d.ws.get(), 0, d.ws_bytes));
    d.tables = upload(whole.tables);
    auto launch = [&](const Prepared& P) {
        d.q = upload(P.qwide);
        d.row_pos = upload(P.L.row_pos);
        d.row_table = upload(P.L.row_table);
        d.out = DeviceBuffer(out_floats(s, P.L) * sizeof(float));
        PELICAN_CUDA_CHECK(cudaMemset(d.out.get(), 0xff, d.out.size()));
        cuda::attention_paged(make_args(pools, P.L, d, scale, 1, L), nullptr);
        PELICAN_CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> got = download<float>(d.out.get(), out_floats(s, P.L));
        expect_counters_zero(d);
        return got;
    };
    const std::vector<float> a1 = launch(A);
    expect_close(a1, A.ref.out, A.ref.tol, s.n_head, s.hd, "launch A (2 long rows, splits)");
    const std::vector<float> b1 = launch(B);
    expect_close(b1, B.ref.out, B.ref.tol, s.n_head, s.hd, "launch B (100 rows)");
    const std::vector<float> a2 = launch(A);
    EXPECT_EQ(std::memcmp(a1.data(), a2.data(), a1.size() * sizeof(float)), 0) << "launch A again differs";
}

// One capture (n_rows 48, max_kv 4096, tile kernel on) replayed over layouts written into the same
// device buffers: 48 decode rows, one 48-row chunk (a uniform tile), decode + a chunk (mixed tile),
// decode + padding. Each against the reference and bitwise against an eager launch.
TEST(CudaPagedAttention, GraphReplay) {
    if (!cuda::gpu_available()) GTEST_SKIP() << "no CUDA device";
    Rng rng;
    const Shape s{32, 8, 128, DType::F16, 16};
    const int n_rows = 48;
    const int64_t max_kv = 4096;
    const int max_blocks = static_cast<int>(max_kv / s.bt);
    const int ctx = test::cuda_test_size(1200, 300);
    std::vector<std::vector<SeqSpec>> layouts;
    {
        std::vector<SeqSpec> v;
        for (int i = 0; i < n_rows - 1; ++i) v.push_back({rng.index(ctx), 1});
        v.push_back({max_kv - 1, 1});
        layouts.push_back(v);
    }
    layouts.push_back({{1000, n_rows}});
    {
        std::vector<SeqSpec> v;
        for (int i = 0; i < 20; ++i) v.push_back({rng.index(ctx), 1});
        v.push_back({50, n_rows - 20});
        layouts.push_back(v);
    }
    if (!test::cuda_test_small()) {
        std::vector<SeqSpec> v;
        for (int i = 0; i < 30; ++i) v.push_back({rng.index(ctx), 1});
        for (int i = 30; i < n_rows; ++i) v.push_back({-1, 1});
        layouts.push_back(v);
    }
    int most_blocks = 0;
    for (const auto& v : layouts) most_blocks = std::max(most_blocks, blocks_needed(v, s.bt));
    Pools pools(rng, s, most_blocks + 3);  // no poison: every layout uses other blocks
    pools.upload_all();
    const float scale = 1.0f / std::sqrt(128.0f);
    const int n_tables = n_rows + 2;
    const size_t n_out = static_cast<size_t>(n_rows) * s.n_head * s.hd;

    DeviceRows d;
    d.q = DeviceBuffer(static_cast<size_t>(n_rows * q_stride_of(s)) * sizeof(float));
    d.row_pos = DeviceBuffer(n_rows * sizeof(int32_t));
    d.row_table = DeviceBuffer(n_rows * sizeof(int32_t));
    d.tables = DeviceBuffer(static_cast<size_t>(n_tables) * max_blocks * sizeof(int32_t));
    d.out = DeviceBuffer(n_out * sizeof(float));
    DeviceBuffer eager(n_out * sizeof(float));
    d.ws_bytes = cuda::paged_attention_workspace_bytes(n_rows, s.n_head, s.n_kv_head, s.hd, max_kv);
    d.ws = DeviceBuffer(d.ws_bytes);
    ASSERT_TRUE(d.q.ok() && d.row_pos.ok() && d.row_table.ok() && d.tables.ok() && d.out.ok() && eager.ok() &&
                d.ws.ok());
    PELICAN_CUDA_CHECK(cudaMemset(d.ws.get(), 0, d.ws_bytes));
    Layout shape_only;
    shape_only.n_rows = n_rows;
    shape_only.max_blocks = max_blocks;
    const cuda::PagedAttnArgs a = make_args(pools, shape_only, d, scale, 0, max_kv);

    cudaStream_t stream;
    PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    PELICAN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cuda::attention_paged(a, stream);
    PELICAN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    PELICAN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

    for (size_t li = 0; li < layouts.size(); ++li) {
        SCOPED_TRACE("layout " + std::to_string(li));
        Layout L = make_layout(rng, layouts[li], pools.n_blocks, s.bt, max_blocks);
        ASSERT_EQ(L.n_rows, n_rows);
        L.tables.resize(static_cast<size_t>(n_tables) * max_blocks, 0);  // the capacity the graph reads
        const Prepared P = prepare(rng, pools, std::move(L), 0, scale);
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(d.q.get(), P.qwide.data(), P.qwide.size() * sizeof(float),
                                           cudaMemcpyHostToDevice, stream));
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(d.row_pos.get(), P.L.row_pos.data(), n_rows * sizeof(int32_t),
                                           cudaMemcpyHostToDevice, stream));
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(d.row_table.get(), P.L.row_table.data(), n_rows * sizeof(int32_t),
                                           cudaMemcpyHostToDevice, stream));
        PELICAN_CUDA_CHECK(cudaMemcpyAsync(d.tables.get(), P.L.tables.data(),
                                           P.L.tables.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                           stream));
        PELICAN_CUDA_CHECK(cudaMemsetAsync(d.out.get(), 0xff, n_out * sizeof(float), stream));
        PELICAN_CUDA_CHECK(cudaMemsetAsync(eager.get(), 0xff, n_out * sizeof(float), stream));
        PELICAN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        cuda::PagedAttnArgs e = a;
        e.out = eager.as<float>();
        cuda::attention_paged(e, stream);
        PELICAN_CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::vector<float> got = download<float>(d.out.get(), n_out);
        const std::vector<float> want = download<float>(eager.get(), n_out);
        size_t n_tile = 0;
        for (const char t : P.tile) n_tile += t != 0;
        expect_close(
            got, P.ref.out, P.ref.tol, s.n_head, s.hd,
            "graph replay, layout " + std::to_string(li) + " (" + std::to_string(n_tile) + " rows by tiles)");
        EXPECT_EQ(std::memcmp(got.data(), want.data(), n_out * sizeof(float)), 0)
            << "graph replay differs from the eager launch";
        expect_counters_zero(d);
    }
    PELICAN_CUDA_CHECK(cudaGraphExecDestroy(exec));
    PELICAN_CUDA_CHECK(cudaGraphDestroy(graph));
    PELICAN_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace pelican
