// cuda_moe_bench: the decode MoE block of one token, the one-kernel version (moe_fused.h) against the
// three-kernel chain it replaces (moe_router_route -> expert gate/up GEMV -> expert down GEMV with the
// fused combine; the GEMVs autotuned), on Qwen3.5 expert shapes with random weights.
//   * µs per block: a CUDA graph of 40 back-to-back blocks (each reading the previous one's x, PDL
//     chained, as in the decode graph), replayed 10 times; median over replays. The expert stacks
//     hold all n_expert + 1 experts (each expert's rows a copy of one random block of rows: the bytes
//     read are what matters), so the chosen experts' rows come from HBM, not from the L2;
//   * the fused kernel's phases (--trace): %globaltimer stamps of every CTA, median over CTAs of each
//     phase boundary relative to the earliest start, for one block launched after a warm-up.
//
//   cuda_moe_bench [--shape 35b|122b] [--type q4_0|q4_k|q8_0] [--trace]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_matrix.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_fused.h"
#include "core/dequantize.h"
#include "core/dtype.h"

using namespace pelican;

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// n_copies x rows rows of n_in, each copy the same random quantized block.
cuda::GpuMatrix upload_stack(DType t, int64_t n_in, int64_t rows, int64_t n_copies, std::mt19937& rng) {
    const int64_t rb = static_cast<int64_t>(*dtype_row_bytes(t, static_cast<uint64_t>(n_in)));
    std::vector<uint8_t> block(static_cast<size_t>(rb * rows));
    std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(static_cast<float>(n_in)));
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = nd(rng);
        (void)quantize_row(t, row.data(), block.data() + r * rb, n_in);
    }
    std::vector<uint8_t> all(block.size() * static_cast<size_t>(n_copies));
    for (int64_t c = 0; c < n_copies; ++c)
        std::memcpy(all.data() + c * block.size(), block.data(), block.size());
    cuda::HostRows hr{all.data(), static_cast<size_t>(rb), rows * n_copies};
    cuda::GpuMatrix m;
    const char* err = nullptr;
    if (!cuda::upload_matrix(t, n_in, &hr, 1, m, nullptr, &err)) {
        std::fprintf(stderr, "upload failed: %s\n", err ? err : "?");
        std::exit(1);
    }
    return m;
}

template <class F>
double graph_us(cudaStream_t s, int per_graph, F&& enqueue) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    PELICAN_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per_graph; ++i) enqueue();
    PELICAN_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    PELICAN_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    PELICAN_CUDA_CHECK(cudaEventCreate(&e0));
    PELICAN_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<double> us;
    for (int rep = 0; rep < 13; ++rep) {
        PELICAN_CUDA_CHECK(cudaEventRecord(e0, s));
        PELICAN_CUDA_CHECK(cudaGraphLaunch(ge, s));
        PELICAN_CUDA_CHECK(cudaEventRecord(e1, s));
        PELICAN_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0.0f;
        PELICAN_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (rep >= 3) us.push_back(1000.0 * ms / per_graph);
    }
    PELICAN_CUDA_CHECK(cudaEventDestroy(e0));
    PELICAN_CUDA_CHECK(cudaEventDestroy(e1));
    PELICAN_CUDA_CHECK(cudaGraphExecDestroy(ge));
    PELICAN_CUDA_CHECK(cudaGraphDestroy(g));
    return median(us);
}

}  // namespace

int main(int argc, char** argv) {
    std::string shape = "35b", type = "q4_0";
    bool trace = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--shape" && i + 1 < argc)
            shape = argv[++i];
        else if (a == "--type" && i + 1 < argc)
            type = argv[++i];
        else if (a == "--trace")
            trace = true;
        else {
            std::fprintf(stderr,
                         "usage: cuda_moe_bench [--shape 35b|122b] [--type q4_0|q4_k|q8_0] [--trace]\n");
            return 2;
        }
    }
    if ((shape != "35b" && shape != "122b") || (type != "q4_0" && type != "q4_k" && type != "q8_0")) {
        std::fprintf(stderr, "cuda_moe_bench: --shape must be 35b or 122b, --type q4_0, q4_k or q8_0\n");
        return 2;
    }
    const DType t = type == "q4_k" ? DType::Q4_K : type == "q8_0" ? DType::Q8_0 : DType::Q4_0;
    const int64_t n_embd = shape == "122b" ? 3072 : 2048, n_ff = shape == "122b" ? 1024 : 512;
    const int n_expert = 256, k = 8, S = k + 1, E1 = n_expert + 1;
    std::mt19937 rng(7);
    cuda::GpuMatrix gu = upload_stack(t, n_embd, 2 * n_ff, E1, rng),
                    dn = upload_stack(t, n_ff, n_embd, E1, rng);
    std::vector<float> rw(static_cast<size_t>(n_embd * E1)), x(static_cast<size_t>(n_embd)),
        nw(static_cast<size_t>(n_embd), 0.0f);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : rw) v = 0.05f * nd(rng);
    for (auto& v : x) v = nd(rng);
    cuda::HostRows hr{reinterpret_cast<const uint8_t*>(rw.data()), static_cast<size_t>(n_embd) * 4, E1};
    cuda::GpuMatrix router;
    const char* err = nullptr;
    if (!cuda::upload_matrix(DType::F32, n_embd, &hr, 1, router, nullptr, &err)) return 1;
    if (!cuda::moe_fused_supported(gu, dn, n_embd, n_ff, n_expert, k)) {
        std::fprintf(stderr, "moe_fused_supported: false\n");
        return 1;
    }
    cuda::DeviceBuffer dx(x.size() * 4), dnw(nw.size() * 4), dl(E1 * 4), dids(S * 4), dw(S * 4),
        dact(static_cast<size_t>(S * n_ff) * 4), dout(static_cast<size_t>(S * n_embd) * 4), dbar(8), dctr(4),
        dcomb(static_cast<size_t>(n_embd) * 4), dtrace(256 * cuda::kMoeFusedTracePoints * 8);
    PELICAN_CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    PELICAN_CUDA_CHECK(cudaMemcpy(dnw.get(), nw.data(), nw.size() * 4, cudaMemcpyHostToDevice));
    for (auto* b : {&dbar, &dctr, &dcomb}) PELICAN_CUDA_CHECK(cudaMemset(b->get(), 0, b->size()));
    cudaStream_t s;
    PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    cuda::MoeFusedArgs a;
    a.x = dx.as<float>();
    a.n_embd = n_embd;
    a.norm_w = dnw.as<float>();
    a.router_w = cuda::gpu_matrix_f32_rows(router);
    a.router_stride = cuda::gpu_matrix_f32_row_floats(router);
    a.n_expert = n_expert;
    a.k = k;
    a.gate_up = gu;
    a.down = dn;
    a.n_ff = n_ff;
    a.logits = dl.as<float>();
    a.ids = dids.as<int32_t>();
    a.weights = dw.as<float>();
    a.act = dact.as<float>();
    a.barrier = reinterpret_cast<unsigned long long*>(dbar.get());

    cuda::MoeRouterArgs r;
    r.x = dx.as<float>();
    r.n_embd = n_embd;
    r.norm_w = dnw.as<float>();
    r.norm_one_plus = true;
    r.w = a.router_w;
    r.w_stride = a.router_stride;
    r.n_rows = E1;
    r.logits = dl.as<float>();
    r.n_expert = n_expert;
    r.k = k;
    r.shared_slot = true;
    r.ids = dids.as<int32_t>();
    r.weights = dw.as<float>();
    r.counter = dctr.as<unsigned>();
    cuda::GemvArgs g;
    g.x = dx.as<float>();
    g.norm_w = dnw.as<float>();
    g.norm_one_plus = true;
    g.glu = true;
    g.expert_ids = dids.as<int32_t>();
    g.n_expert_slots = S;
    g.expert_rows = 2 * n_ff;
    g.x_slot_stride = n_embd;
    g.x_slot_div = S;
    g.y = dact.as<float>();
    cuda::GemvArgs d;
    d.x = dact.as<float>();
    d.expert_ids = dids.as<int32_t>();
    d.n_expert_slots = S;
    d.expert_rows = n_embd;
    d.x_slot_stride = n_ff;
    d.y = dout.as<float>();
    d.comb_ctr = dcomb.as<unsigned>();
    d.comb_w = dw.as<float>();
    d.comb_res = dx.as<float>();
    d.comb_y = dx.as<float>();
    cuda::gemv_autotune(gu, g, s);
    cuda::gemv_autotune(dn, d, s);
    std::printf("shape %s (n_embd %lld, ff %lld, %d experts top-%d + shared), %s; gate/up %s, down %s\n",
                shape.c_str(), static_cast<long long>(n_embd), static_cast<long long>(n_ff), n_expert, k,
                std::string(dtype_name(t)).c_str(), cuda::gemv_variant_name(cuda::gemv_variant_for(gu, g)),
                cuda::gemv_variant_name(cuda::gemv_variant_for(dn, d)));
    const double chain = graph_us(s, 40, [&] {
        cuda::moe_router_route(r, s);
        cuda::gemv(gu, g, s);
        cuda::gemv(dn, d, s);
    });
    const double fused = graph_us(s, 40, [&] { cuda::moe_fused_decode(a, s); });
    const double mb =
        (E1 * 4.0 * n_embd + S * (static_cast<double>(gu.bytes) / E1 + static_cast<double>(dn.bytes) / E1)) /
        1e6;
    std::printf("us per block: chain %.2f, fused %.2f (%.2fx); %.1f MB read per block: %.0f / %.0f GB/s\n",
                chain, fused, chain / fused, mb, mb * 1e3 / chain, mb * 1e3 / fused);
    if (trace) {
        cuda::MoeFusedArgs b = a;
        b.trace = dtrace.as<uint64_t>();
        for (int i = 0; i < 5; ++i) cuda::moe_fused_decode(a, s);
        cuda::moe_fused_decode(b, s);
        PELICAN_CUDA_CHECK(cudaStreamSynchronize(s));
        int sms = 0;
        PELICAN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        std::vector<uint64_t> st(static_cast<size_t>(sms * cuda::kMoeFusedTracePoints));
        PELICAN_CUDA_CHECK(cudaMemcpy(st.data(), dtrace.get(), st.size() * 8, cudaMemcpyDeviceToHost));
        uint64_t t0 = UINT64_MAX;
        for (int c = 0; c < sms; ++c)
            t0 = std::min(t0, st[static_cast<size_t>(c * cuda::kMoeFusedTracePoints)]);
        const char* names[cuda::kMoeFusedTracePoints] = {"start",      "pdl wait", "x' staged", "logits",
                                                         "barrier 1",  "routed",   "gate/up",   "barrier 2",
                                                         "act staged", "end",      "(softmax)"};
        std::printf("fused phases (us from the earliest CTA start; median / max over %d CTAs):\n", sms);
        for (int p = 0; p < cuda::kMoeFusedTracePoints; ++p) {
            std::vector<double> v;
            for (int c = 0; c < sms; ++c)
                v.push_back(1e-3 * static_cast<double>(
                                       st[static_cast<size_t>(c * cuda::kMoeFusedTracePoints + p)] - t0));
            std::printf("  %-11s %7.2f %7.2f\n", names[p], median(v), *std::max_element(v.begin(), v.end()));
        }
    }
    for (cuda::GpuMatrix* m : {&gu, &dn, &router}) cuda::free_matrix(*m);
    PELICAN_CUDA_CHECK(cudaStreamDestroy(s));
    return 0;
}
