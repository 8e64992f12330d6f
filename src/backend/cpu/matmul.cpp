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

void matmul(const Weight& w, const float* x, int64_t n_tok, float* y, std::span<std::byte> scratch,
            ThreadPool& pool) {
    assert(w.n_in() > 0 && n_tok >= 0);
    if (n_tok == 0) return;
    const Isa isa = active_isa();
    const MatmulKernel kernel = find_kernel(w.type(), w.layout(), isa);
    assert(kernel != nullptr);

    detail::MatmulArgs args;
    args.w = static_cast<const uint8_t*>(w.data());
    args.w_stride = w.row_stride();
    args.n_in = w.n_in();
    args.n_out = w.n_out();
    args.n_tok = n_tok;
    args.x = x;
    args.y = y;

    const int block = act_quant_block(w.type());
    if (block != 0) {
        assert(scratch.size() >= matmul_scratch_bytes(w.n_in(), n_tok));
        const ActQ8 a = carve(scratch.data(), w.n_in(), n_tok, block);
        const KernelTable& tab = table_for(isa);
        const int64_t n = w.n_in();
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
        args.xq = a.qs;
        args.xd = a.d;
        args.xs = a.s;
        args.xbsum = a.bsum;
    }

    // Row chunks: a multiple of 16 for the interleaved layout; about 8 chunks per thread so
    // the dynamic scheduling evens out uneven progress, but at least 16 rows per task.
    const bool ilv = w.layout() == Weight::Layout::kInterleave16;
    const int64_t align = ilv ? detail::kIlvRows : 1;
    const int64_t rows = ilv ? (w.n_out() + 15) / 16 * 16 : w.n_out();
    const int64_t n_tok_chunks = (n_tok + kTokChunk - 1) / kTokChunk;
    const int64_t want_tasks = std::max<int64_t>(1, int64_t{pool.size()} * 8 / n_tok_chunks);
    int64_t chunk = std::max<int64_t>(16, (rows + want_tasks - 1) / want_tasks);
    chunk = (chunk + align - 1) / align * align;
    const int64_t n_row_chunks = (rows + chunk - 1) / chunk;
    pool.parallel_for(n_row_chunks * n_tok_chunks, [&](int64_t task, int) {
        const int64_t rc = task / n_tok_chunks, tc = task % n_tok_chunks;
        const int64_t r0 = rc * chunk, t0 = tc * kTokChunk;
        kernel(args, r0, std::min(rows, r0 + chunk), t0, std::min(n_tok, t0 + kTokChunk));
    });
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
