// CPU matmul driver: picks the kernel for the weight's type and layout on the active ISA,
// quantizes the activations once into the caller's scratch, and splits (row chunk, token chunk)
// tasks over the thread pool.
#include <algorithm>
#include <cassert>
#include <new>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul_kernels.h"
#include "ops/act_quant.h"

namespace pelican::cpu {
namespace {

using detail::KernelTable;
using detail::MatmulKernel;

const KernelTable& table_for(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::kAvx512) return detail::avx512_kernels();
    if (isa == Isa::kAvx2) return detail::avx2_kernels();
#endif
    (void)isa;
    return detail::scalar_kernels();
}

// The best kernel at or below the active ISA (a SIMD table may lack a type/layout pair).
MatmulKernel find_kernel(DType t, Weight::Layout layout, Isa isa) {
    for (int i = static_cast<int>(isa); i >= 0; --i) {
        const KernelTable& tab = table_for(static_cast<Isa>(i));
        if (MatmulKernel k =
                tab.find ? tab.find(static_cast<detail::WType>(t), static_cast<detail::WLayout>(layout))
                         : nullptr)
            return k;
    }
    return nullptr;
}

constexpr size_t align64(size_t n) { return (n + 63) / 64 * 64; }
constexpr int64_t kTokChunk = 64;  // tokens per task in prefill: their activations stay in L2

// Carves the activation arrays out of scratch (layout matches matmul_scratch_bytes).
ActQ8 carve(std::byte* p, int64_t n_in, int64_t n_tok, int block) {
    ActQ8 a;
    a.n = n_in;
    a.block = block;
    a.qs = reinterpret_cast<int8_t*>(p);
    p += align64(static_cast<size_t>(n_in * n_tok));
    a.d = reinterpret_cast<float*>(p);
    p += align64(static_cast<size_t>(n_in / 32 * n_tok) * sizeof(float));
    if (block == kActBlock32) {
        a.s = reinterpret_cast<float*>(p);
    } else {
        a.bsum = reinterpret_cast<int16_t*>(p);
    }
    return a;
}

}  // namespace

size_t matmul_scratch_bytes(int64_t n_in, int64_t n_tok) {
    const auto n = static_cast<size_t>(n_in), t = static_cast<size_t>(n_tok);
    // qs, then d (sized for 32-blocks, the larger), then s (32-blocks) or bsum (256-blocks).
    return align64(n * t) + align64(n / 32 * t * sizeof(float)) +
           align64(std::max(n / 32 * sizeof(float), n / 16 * sizeof(int16_t)) * t);
}

namespace {

// Quantizes x [n_tok, n] into scratch for the given activation block (0: nothing to do) and
// points args at it.
void quantize_acts(const float* x, int64_t n, int64_t n_tok, int block, Isa isa, std::span<std::byte> scratch,
                   ThreadPool& pool, detail::MatmulArgs* args) {
    if (block == 0) return;
    assert(scratch.size() >= matmul_scratch_bytes(n, n_tok));
    const ActQ8 a = carve(scratch.data(), n, n_tok, block);
    const KernelTable& tab = table_for(isa);
    auto quantize_row = [&](int64_t t) {
        if (block == kActBlock32) {
            tab.quantize_act32(x + t * n, n, a.qs + t * n, a.d + t * (n / 32), a.s + t * (n / 32));
        } else {
            tab.quantize_act256(x + t * n, n, a.qs + t * n, a.d + t * (n / 256), a.bsum + t * (n / 16));
        }
    };
    if (n_tok == 1) {
        quantize_row(0);
    } else {
        pool.parallel_for(n_tok, [&](int64_t t, int) { quantize_row(t); });
    }
    args->xq = a.qs;
    args->xd = a.d;
    args->xs = a.s;
    args->xbsum = a.bsum;
}

// One weight's share of a parallel pass: its kernel, arguments and row chunking.
struct Plan {
    MatmulKernel kernel = nullptr;
    detail::MatmulArgs args;
    int64_t rows = 0;   // rows to compute (padded to 16 for the interleaved layout)
    int64_t chunk = 0;  // rows per task
    int64_t n_row_chunks = 0;
};

// Row chunks: a multiple of 16 for the interleaved layout; about 8 chunks per thread (over all
// weights of the pass) so dynamic scheduling evens out uneven progress, at least 16 rows per task.
Plan make_plan(const Weight& w, const detail::MatmulArgs& acts, float* y, Isa isa, int64_t want_tasks,
               int64_t total_rows) {
    Plan p;
    p.kernel = find_kernel(w.type(), w.layout(), isa);
    assert(p.kernel != nullptr);
    p.args = acts;
    p.args.w = static_cast<const uint8_t*>(w.data());
    p.args.w_stride = w.row_stride();
    p.args.n_out = w.n_out();
    p.args.y = y;
    const bool ilv = w.layout() == Weight::Layout::kInterleave16;
    const int64_t align = ilv ? detail::kIlvRows : 1;
    p.rows = ilv ? (w.n_out() + 15) / 16 * 16 : w.n_out();
    // this weight's share of the tasks, proportional to its rows
    const int64_t share = std::max<int64_t>(1, want_tasks * p.rows / std::max<int64_t>(1, total_rows));
    p.chunk = std::max<int64_t>(16, (p.rows + share - 1) / share);
    p.chunk = (p.chunk + align - 1) / align * align;
    p.n_row_chunks = (p.rows + p.chunk - 1) / p.chunk;
    return p;
}

// Runs the plans' (row chunk, token chunk) tasks in one parallel_for.
void run_plans(const Plan* plans, size_t n_plans, int64_t n_tok, ThreadPool& pool) {
    const int64_t n_tok_chunks = (n_tok + kTokChunk - 1) / kTokChunk;
    int64_t n_tasks = 0;
    for (size_t k = 0; k < n_plans; ++k) n_tasks += plans[k].n_row_chunks * n_tok_chunks;
    pool.parallel_for(n_tasks, [&](int64_t task, int) {
        size_t k = 0;
        while (task >= plans[k].n_row_chunks * n_tok_chunks) task -= plans[k++].n_row_chunks * n_tok_chunks;
        const Plan& p = plans[k];
        const int64_t rc = task / n_tok_chunks, tc = task % n_tok_chunks;
        const int64_t r0 = rc * p.chunk, t0 = tc * kTokChunk;
        p.kernel(p.args, r0, std::min(p.rows, r0 + p.chunk), t0, std::min(n_tok, t0 + kTokChunk));
    });
}

}  // namespace

void matmul(const Weight& w, const float* x, int64_t n_tok, float* y, std::span<std::byte> scratch,
            ThreadPool& pool) {
    const Weight* ws[1] = {&w};
    float* ys[1] = {y};
    matmul_multi(ws, x, n_tok, ys, scratch, pool);
}

void matmul_multi(std::span<const Weight* const> ws, const float* x, int64_t n_tok,
                  std::span<float* const> ys, std::span<std::byte> scratch, ThreadPool& pool) {
    assert(ws.size() == ys.size() && ws.size() <= kMaxMultiWeights);
    if (n_tok == 0 || ws.empty()) return;
    const int64_t n_in = ws[0]->n_in();
    // One activation format for the pass: all quantized weights must share it, else split.
    int block = 0;
    for (const Weight* w : ws) {
        assert(w->n_in() == n_in);
        const int b = act_quant_block(w->type());
        if (b != 0 && block != 0 && b != block) {
            for (size_t k = 0; k < ws.size(); ++k) matmul(*ws[k], x, n_tok, ys[k], scratch, pool);
            return;
        }
        if (b != 0) block = b;
    }
    const Isa isa = active_isa();
    detail::MatmulArgs acts;
    acts.n_in = n_in;
    acts.n_tok = n_tok;
    acts.x = x;
    quantize_acts(x, n_in, n_tok, block, isa, scratch, pool, &acts);

    const int64_t n_tok_chunks = (n_tok + kTokChunk - 1) / kTokChunk;
    const int64_t want_tasks = std::max<int64_t>(1, int64_t{pool.size()} * 8 / n_tok_chunks);
    int64_t total_rows = 0;
    for (const Weight* w : ws) total_rows += w->n_out();
    Plan plans[kMaxMultiWeights];
    for (size_t k = 0; k < ws.size(); ++k)
        plans[k] = make_plan(*ws[k], acts, ys[k], isa, want_tasks, total_rows);
    run_plans(plans, ws.size(), n_tok, pool);
}

void matmul(const Weight& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool) {
    thread_local Buffer scratch;
    const size_t need = matmul_scratch_bytes(w.n_in(), n_tok);
    if (scratch.size() < need) {
        auto buf = Buffer::allocate(need);
        if (!buf) throw std::bad_alloc();
        scratch = std::move(buf).value();
    }
    matmul(w, x, n_tok, y, std::span<std::byte>(static_cast<std::byte*>(scratch.data()), need), pool);
}

}  // namespace pelican::cpu
