// attention_decode: split-KV flash-decoding. F16 cache at head_dim 64/128/256: the streaming
// kernel (attention_stream.cu; splits = one wave of resident CTAs, chunks of >= 64 keys, rows
// blocks of <= 8 rows). Otherwise the rows kernel (attention_rows.cu):
//
// Rows kernel splits: fixed per (n_ctx, n_kv_head, device): enough CTAs for ~4 per SM at long context
// (n_kv_head * n_splits >= 4 * SMs where n_ctx allows), at most kMaxSplits, and no more than
// n_ctx / kMinChunk. The keys per split are chosen at run time from the live length
// (max(len / n_splits, kMinChunk), rounded to the tile), so short contexts use few splits and the
// rest exit at once.
//
// Workspace (device, zeroed once): [counters: n_head * kMaxTok int32, then the two-level combine's
// n_head * kMaxTok * kCombineGroups, padded to 256 B] [ml: n_splits * n_head * n_tok float2, padded
// to 256 B] [acc: same slots * round_up(hd, 4) fp32, padded] [group ml: kCombineGroups * n_head *
// n_tok float2, padded] [group acc: same slots * round_up(hd, 4) fp32].
//
// PELICAN_ATTN_COMBINE2=0: the streaming kernel combines its splits in one level (the last split
// reads every partial) instead of two.
#include "backend/cuda/attention.h"
#include "backend/cuda/attention_impl.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/tuning.h"

#include <cstdio>
#include <cstdlib>

namespace pelican::cuda {
namespace {

constexpr size_t align256(size_t n) { return (n + 255) & ~size_t{255}; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Upper bound of the splits of either kernel over every n_kv_head and device.
int max_splits(int64_t n_ctx) {
    const int64_t s = ceil_div(n_ctx > 0 ? n_ctx : 1, attn::kStreamMinChunk);
    return static_cast<int>(s < attn::kMaxSplits ? s : attn::kMaxSplits);
}

int sm_count() {
    static int cached[64] = {};
    int dev = 0;
    PELICAN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 64 && cached[dev]) return cached[dev];
    int n = 0;
    PELICAN_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev < 64) cached[dev] = n;
    return n;
}

int decode_splits(int64_t n_ctx, int n_kv_head) {
    const int64_t target = ceil_div(4 * static_cast<int64_t>(sm_count()), n_kv_head);
    const int64_t s = target < max_splits(n_ctx) ? target : max_splits(n_ctx);
    return static_cast<int>(s > 0 ? s : 1);
}

constexpr int kMinPairs = 8;  // (kv head, row block) pairs the streaming kernel aims for

bool row_blocks_enabled() { return cuda_tuning().attn_row_blocks; }

bool combine2_enabled() { return cuda_tuning().attn_combine2; }

size_t counter_ints(int n_head) {
    return static_cast<size_t>(n_head) * attn::kMaxTok * (1 + attn::kCombineGroups);
}

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "pelican: attention_decode: %s\n", what);
    std::abort();
}

}  // namespace

size_t attention_workspace_counters(int n_head) { return counter_ints(n_head); }

size_t attention_workspace_bytes(int64_t n_ctx, int n_head, int head_dim, int max_tokens) {
    if (max_tokens > attn::kMaxTok) max_tokens = attn::kMaxTok;
    if (max_tokens < 1) max_tokens = 1;
    const size_t slots = static_cast<size_t>(max_splits(n_ctx)) * n_head * max_tokens;
    const size_t gslots = static_cast<size_t>(attn::kCombineGroups) * n_head * max_tokens;
    const size_t hd4 = static_cast<size_t>((head_dim + 3) & ~3);
    return align256(counter_ints(n_head) * sizeof(int32_t)) + align256(slots * 8) +
           align256(slots * hd4 * sizeof(float)) + align256(gslots * 8) + gslots * hd4 * sizeof(float);
}

void attention_decode(const AttnArgs& a, cudaStream_t stream) {
    if (a.n_tok < 1 || a.n_tok > attn::kMaxTok) fail("n_tok must be 1..8");
    if (a.n_kv_head <= 0 || a.n_head % a.n_kv_head != 0) fail("n_head must be a multiple of n_kv_head");
    if (a.kv.type != DType::F16 && a.kv.type != DType::F32) fail("KV cache must be F16 or F32");
    if (!a.workspace || !a.pos0_dev) fail("workspace and pos0_dev are required");
    const int group = a.n_head / a.n_kv_head;
    const int rows_total = group * a.n_tok;
    const bool streaming = a.kv.type == DType::F16 && attn::stream_supported(a.head_dim, a.kv.k, a.kv.v);
    int nz = static_cast<int>(ceil_div(rows_total, streaming ? attn::kStreamMaxRows : attn::kMaxRows));
    // Streaming, few KV heads (Qwen3.5: 2 KV heads x 8 query rows of dim 256): smaller row blocks
    // so that there are >= kMinPairs (kv head, row block) pairs. Each block re-reads its head's K/V
    // (from L2 after the first), but the splits per pair (one wave of CTAs shared by the pairs) and
    // so the last CTA's combine (splits x rows x head_dim partials, read alone) shrink with it: at
    // 2 KV heads and 4K keys the combine was 66 x 8 x 256 floats per head, and tg128 fell from 468
    // to 355 tok/s between depth 0 and 4K on the 35B-A3B shape (docs/performance.md). Not yet
    // measured with this rule. PELICAN_ATTN_ROW_BLOCKS=0: off (row blocks from kStreamMaxRows alone).
    if (streaming && row_blocks_enabled()) {
        const int want = static_cast<int>(ceil_div(kMinPairs, a.n_kv_head));
        if (nz < want) nz = want < rows_total ? want : rows_total;
    }
    const int n_splits = decode_splits(a.kv.n_ctx, a.n_kv_head);

    attn::RowsParams p{};
    p.q = a.q;
    p.q_stride = a.q_stride ? a.q_stride : static_cast<int64_t>(a.n_head) * a.head_dim;
    p.n_tok = a.n_tok;
    p.n_head = a.n_head;
    p.n_kv_head = a.n_kv_head;
    p.head_dim = a.head_dim;
    p.group = group;
    p.scale = a.scale;
    p.window = a.window;
    p.pos0_dev = a.pos0_dev;
    p.k = a.kv.k;
    p.v = a.kv.v;
    p.out = a.out;
    p.rows_cta = static_cast<int>(ceil_div(rows_total, nz));
    nz = static_cast<int>(ceil_div(rows_total, p.rows_cta));  // no empty row block (e.g. 10 rows, 8 -> 5 x 2)
    p.n_splits = n_splits;
    p.min_chunk = streaming ? attn::kStreamMinChunk : attn::kMinChunk;
    // Partials laid out for the most splits either kernel may use (fits the workspace as long as
    // n_tok <= its max_tokens).
    // The group slots likewise for n_tok rows (the workspace holds them for max_tokens >= n_tok).
    const size_t slots = static_cast<size_t>(max_splits(a.kv.n_ctx)) * a.n_head * a.n_tok;
    const size_t gslots = static_cast<size_t>(attn::kCombineGroups) * a.n_head * a.n_tok;
    auto* base = static_cast<unsigned char*>(a.workspace);
    p.counters = reinterpret_cast<int*>(base);
    p.group_counters = p.counters + static_cast<size_t>(a.n_head) * attn::kMaxTok;
    base += align256(counter_ints(a.n_head) * sizeof(int32_t));
    p.ml = reinterpret_cast<float2*>(base);
    base += align256(slots * 8);
    p.acc = reinterpret_cast<float*>(base);
    p.acc_stride = (a.head_dim + 3) & ~3;
    base += align256(slots * static_cast<size_t>(p.acc_stride) * sizeof(float));
    if (streaming && combine2_enabled()) {
        p.group_ml = reinterpret_cast<float2*>(base);
        base += align256(gslots * 8);
        p.group_acc = reinterpret_cast<float*>(base);
    }
    if (streaming)
        attn::launch_stream(p, nz, sm_count(), max_splits(a.kv.n_ctx), stream);
    else
        attn::launch_rows(p, a.kv.type == DType::F16, nz, stream);
}

}  // namespace pelican::cuda
