// cuda_attention_bench: GPU attention speed at the Llama-3-8B shape (32 q heads, 8 kv heads,
// head_dim 128, F16 cache).
//   * decode (attention_decode, graph-replayed): 8 layers' caches (enough bytes that K/V come
//     from HBM, not L2) captured in one graph; time per call and GB/s of K+V read, with % of the
//     device-to-device copy bandwidth measured here (read + write bytes / time) as the roofline;
//   * prefill (attention_prefill, 512 tokens at depth 0 / 4096 / 32768): TFLOP/s counting
//     4 * head_dim flops per (query head, visible key) pair.
//   * rope_store_kv for 1 and 512 tokens, sincosf vs rope table, 20 launches per graph (PDL).
//
//   cuda_attention_bench [--quick]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_info.h"
#include "core/float_convert.h"

using namespace pelican;
using cuda::DeviceBuffer;

namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHd = 128, kLayers = 8;

DeviceBuffer random_f16(size_t n, std::mt19937& gen) {
    std::normal_distribution<float> nd;
    std::vector<uint16_t> h(std::min<size_t>(n, 1 << 22));
    for (auto& x : h) x = f32_to_f16(nd(gen));
    DeviceBuffer b(n * 2);
    if (!b.ok()) {
        std::fprintf(stderr, "out of device memory\n");
        std::exit(1);
    }
    for (size_t off = 0; off < n; off += h.size())
        PELICAN_CUDA_CHECK(cudaMemcpy(b.as<uint16_t>() + off, h.data(), std::min(h.size(), n - off) * 2,
                                      cudaMemcpyHostToDevice));
    return b;
}

DeviceBuffer random_f32(size_t n, std::mt19937& gen) {
    std::normal_distribution<float> nd;
    std::vector<float> h(n);
    for (auto& x : h) x = nd(gen);
    DeviceBuffer b(n * 4);
    PELICAN_CUDA_CHECK(cudaMemcpy(b.get(), h.data(), n * 4, cudaMemcpyHostToDevice));
    return b;
}

// Seconds per call of fn (which enqueues `calls` operations) on stream, median of reps runs.
template <typename Fn>
double time_s(cudaStream_t stream, int reps, int calls, Fn&& fn) {
    cudaEvent_t a, b;
    PELICAN_CUDA_CHECK(cudaEventCreate(&a));
    PELICAN_CUDA_CHECK(cudaEventCreate(&b));
    fn();  // warm-up
    std::vector<double> v;
    for (int r = 0; r < reps; ++r) {
        PELICAN_CUDA_CHECK(cudaEventRecord(a, stream));
        fn();
        PELICAN_CUDA_CHECK(cudaEventRecord(b, stream));
        PELICAN_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        PELICAN_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        v.push_back(ms * 1e-3 / calls);
    }
    PELICAN_CUDA_CHECK(cudaEventDestroy(a));
    PELICAN_CUDA_CHECK(cudaEventDestroy(b));
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--quick"))
            quick = true;
        else {
            std::fprintf(stderr, "usage: cuda_attention_bench [--quick]\n");
            return 2;
        }
    }
    if (!cuda::gpu_available()) {
        std::fprintf(stderr, "cuda_attention_bench: no CUDA device\n");
        return 1;
    }
    const int reps = quick ? 5 : 15;
    std::printf("device: %s\n", cuda::device_description(0).c_str());
    cudaStream_t stream;
    PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::mt19937 gen(1234);

    // Roofline: device-to-device copy of 1 GiB (read + write bytes).
    double roof_gbps = 0;
    {
        const size_t n = size_t{1} << 30;
        DeviceBuffer x(n), y(n);
        const double s = time_s(stream, reps, 1, [&] {
            PELICAN_CUDA_CHECK(cudaMemcpyAsync(y.get(), x.get(), n, cudaMemcpyDeviceToDevice, stream));
        });
        roof_gbps = 2.0 * n / s * 1e-9;
        std::printf("roofline: d2d copy %.0f GB/s (read + write)\n\n", roof_gbps);
    }

    // ---- decode ----
    const int64_t n_ctx = 32768;
    const size_t cache_elems = static_cast<size_t>(n_ctx) * kKvHeads * kHd;
    std::vector<DeviceBuffer> kc, vc;
    for (int l = 0; l < kLayers; ++l) {
        kc.push_back(random_f16(cache_elems, gen));
        vc.push_back(random_f16(cache_elems, gen));
    }
    DeviceBuffer q = random_f32(static_cast<size_t>(8) * kHeads * kHd, gen);
    DeviceBuffer out(static_cast<size_t>(8) * kHeads * kHd * 4);
    DeviceBuffer pos(4);
    DeviceBuffer ws(cuda::attention_workspace_bytes(n_ctx, kHeads, kHd, 8));
    PELICAN_CUDA_CHECK(cudaMemset(ws.get(), 0, ws.size()));
    std::printf("%-34s %10s %10s %8s\n", "decode (32/8 heads, hd 128, f16)", "us/layer", "GB/s", "% roof");
    for (const int n_tok : {1, 2, 4, 8}) {
        for (const int64_t len :
             {int64_t{512}, int64_t{1024}, int64_t{4096}, int64_t{8192}, int64_t{16384}, int64_t{32768}}) {
            if (quick && (n_tok == 2 || n_tok == 4)) continue;
            if (n_tok > 1 && len != 4096 && len != 32768) continue;
            cuda::AttnArgs a;
            a.q = q.as<float>();
            a.n_tok = n_tok;
            a.n_head = kHeads;
            a.n_kv_head = kKvHeads;
            a.head_dim = kHd;
            a.scale = 1.0f / std::sqrt(static_cast<float>(kHd));
            a.pos0_dev = pos.as<int32_t>();
            a.out = out.as<float>();
            a.workspace = ws.get();
            const int32_t pos0 = static_cast<int32_t>(len - n_tok);
            PELICAN_CUDA_CHECK(cudaMemcpy(pos.get(), &pos0, 4, cudaMemcpyHostToDevice));
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            PELICAN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            for (int l = 0; l < kLayers; ++l) {
                a.kv = {kc[l].get(), vc[l].get(), DType::F16, n_ctx};
                cuda::attention_decode(a, stream);
            }
            PELICAN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
            PELICAN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            const int loops = 10;
            const double s = time_s(stream, reps, loops * kLayers, [&] {
                for (int i = 0; i < loops; ++i) PELICAN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
            });
            const double bytes = 2.0 * static_cast<double>(len) * kKvHeads * kHd * 2;
            char name[64];
            std::snprintf(name, sizeof name, "  n_tok %d, %lldK positions", n_tok,
                          static_cast<long long>(len / 1024));
            std::printf("%-34s %10.2f %10.0f %7.1f%%\n", name, s * 1e6, bytes / s * 1e-9,
                        100.0 * bytes / s * 1e-9 / roof_gbps);
            PELICAN_CUDA_CHECK(cudaGraphExecDestroy(exec));
            PELICAN_CUDA_CHECK(cudaGraphDestroy(graph));
        }
    }

    // ---- prefill ----
    const int n_tok = 512;
    DeviceBuffer pq = random_f32(static_cast<size_t>(n_tok) * kHeads * kHd, gen);
    DeviceBuffer pout(static_cast<size_t>(n_tok) * kHeads * kHd * 4);
    std::printf("\n%-34s %10s %10s\n", "prefill 512 tokens (32/8, hd 128)", "us/layer", "TFLOP/s");
    std::vector<int64_t> depths{0, 4096};
    if (!quick) depths.push_back(n_ctx - n_tok);
    for (const DType type : {DType::F16, DType::F32}) {
        DeviceBuffer k32, v32;
        if (type == DType::F32) {  // fp32 cache for the fp32 path (depth <= 4096 only)
            k32 = random_f32(static_cast<size_t>(4096 + n_tok) * kKvHeads * kHd, gen);
            v32 = random_f32(static_cast<size_t>(4096 + n_tok) * kKvHeads * kHd, gen);
        }
        for (const int64_t depth : depths) {
            if (type == DType::F32 && depth > 4096) continue;
            cuda::AttnArgs a;
            a.q = pq.as<float>();
            a.n_tok = n_tok;
            a.n_head = kHeads;
            a.n_kv_head = kKvHeads;
            a.head_dim = kHd;
            a.scale = 1.0f / std::sqrt(static_cast<float>(kHd));
            a.out = pout.as<float>();
            a.kv = type == DType::F16 ? cuda::KvView{kc[0].get(), vc[0].get(), DType::F16, n_ctx}
                                      : cuda::KvView{k32.get(), v32.get(), DType::F32, 4096 + n_tok};
            const double s = time_s(stream, reps, 1, [&] { cuda::attention_prefill(a, depth, stream); });
            double pairs = 0;
            for (int t = 0; t < n_tok; ++t) pairs += static_cast<double>(depth + t + 1);
            const double flops = 4.0 * kHd * kHeads * pairs;
            char name[64];
            std::snprintf(name, sizeof name, "  %s cache, depth %lld", type == DType::F16 ? "f16" : "f32",
                          static_cast<long long>(depth));
            std::printf("%-34s %10.1f %10.1f\n", name, s * 1e6, flops / s * 1e-12);
        }
    }

    // ---- rope_store_kv ----
    std::printf("\n%-34s %10s\n", "rope_store_kv (norms, neox; graph)", "us");
    {
        const int64_t row = (kHeads + 2 * kKvHeads) * kHd;
        DeviceBuffer qkv = random_f32(static_cast<size_t>(n_tok) * row, gen);
        DeviceBuffer w = random_f32(kHd, gen);
        std::vector<float> hfreq(kHd / 2);  // Llama-3 base 500000
        for (int i = 0; i < kHd / 2; ++i) hfreq[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / kHd));
        DeviceBuffer freq(hfreq.size() * 4), table(static_cast<size_t>(n_ctx) * kHd * 4);
        PELICAN_CUDA_CHECK(cudaMemcpy(freq.get(), hfreq.data(), hfreq.size() * 4, cudaMemcpyHostToDevice));
        cuda::rope_table_build(freq.as<float>(), kHd, n_ctx, 1.0f, table.as<float>(), stream);
        for (const int cfg : {0, 1, 2, 3}) {
            const int nt = cfg % 2 == 0 ? 1 : 512;
            const bool use_table = cfg >= 2;
            cuda::RopeStoreArgs r;
            r.qkv = qkv.as<float>();
            r.n_tok = nt;
            r.n_head = kHeads;
            r.n_kv_head = kKvHeads;
            r.head_dim = kHd;
            r.n_rot = kHd;
            r.inv_freq = freq.as<float>();
            r.q_norm = w.as<float>();
            r.k_norm = w.as<float>();
            r.pos0_dev = pos.as<int32_t>();
            r.kv = {kc[0].get(), vc[0].get(), DType::F16, n_ctx};
            r.rope_table = use_table ? table.as<float>() : nullptr;
            const int32_t p0 = 30000;
            PELICAN_CUDA_CHECK(cudaMemcpy(pos.get(), &p0, 4, cudaMemcpyHostToDevice));
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            PELICAN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < 20; ++i) cuda::rope_store_kv(r, stream);
            PELICAN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
            PELICAN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            const double s =
                time_s(stream, reps, 20, [&] { PELICAN_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
            PELICAN_CUDA_CHECK(cudaGraphExecDestroy(exec));
            PELICAN_CUDA_CHECK(cudaGraphDestroy(graph));
            char name[64];
            std::snprintf(name, sizeof name, "  %d tokens at pos 30000, %s", nt,
                          use_table ? "table" : "sincosf");
            std::printf("%-34s %10.2f\n", name, s * 1e6);
        }
    }
    PELICAN_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}
