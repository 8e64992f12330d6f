// PrefillMatmul benchmark: the matmuls of one Llama-3-8B prefill (32 layers of q/k/v, o,
// gate/up, down, plus the LM head) at n_tok tokens, for each weight type and weight-tile size.
//
//   cuda_prefill_bench [--tok N] [--types q4_k,q8_0,f16,...] [--tiles 32,64,128,256] [--iters N]
//
// Weights are random valid blocks (scales set to small fp16 values); the numbers do not depend
// on the values. Prints ms per matrix and per model, and the GEMM TFLOP/s (2 n_tok n_in n_out).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/gpu_matrix.h"
#include "backend/cuda/prefill_matmul.h"
#include "core/blocks.h"
#include "core/dtype.h"
#include "core/float_convert.h"

namespace {

using namespace pelican;

struct Shape {
    const char* name;
    int64_t n_in, n_out;
    int per_model;  // occurrences in one forward pass
};
const Shape kShapes[] = {
    {"qkv", 4096, 6144, 32},   {"o", 4096, 4096, 32},        {"gate_up", 4096, 28672, 32},
    {"down", 14336, 4096, 32}, {"lm_head", 4096, 128256, 1},
};

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "cuda_prefill_bench: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

// Random GGUF rows of type t with sane fp16 scale fields.
std::vector<uint8_t> random_rows(DType t, int64_t n_in, int64_t n_out, std::mt19937_64& g) {
    const size_t row = *dtype_row_bytes(t, static_cast<uint64_t>(n_in));
    std::vector<uint8_t> b(row * static_cast<size_t>(n_out));
    for (size_t i = 0; i + 8 <= b.size(); i += 8) {
        const uint64_t v = g();
        std::memcpy(&b[i], &v, 8);
    }
    const auto put = [&](size_t off, float v) {
        const uint16_t h = t == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(&b[off], &h, 2);
    };
    const DTypeInfo& info = dtype_info(t);
    const size_t n_blocks = b.size() / info.block_bytes;
    std::uniform_real_distribution<float> u(-0.02f, 0.02f);
    for (size_t k = 0; k < n_blocks; ++k) {
        const size_t o = k * info.block_bytes;
        switch (t) {
            case DType::F16:
            case DType::BF16:
                put(o, u(g));
                break;
            case DType::F32: {
                const float v = u(g);
                std::memcpy(&b[o], &v, 4);
                break;
            }
            case DType::Q4_0:
            case DType::Q8_0:
                put(o, 0.001f);
                break;
            case DType::Q4_K:
                put(o, 0.0005f);
                put(o + 2, 0.0002f);
                break;
            case DType::Q6_K:
                put(o + offsetof(BlockQ6_K, d), 0.00002f);
                break;
            default:
                break;
        }
    }
    return b;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(item);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    int64_t n_tok = 512;
    int iters = 10;
    std::string types = "q4_k,q8_0,q4_0,q6_k,bf16,f16", tiles = "16,32,64,128,256";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--tok")
            n_tok = std::atoll(argv[i + 1]);
        else if (a == "--types")
            types = argv[i + 1];
        else if (a == "--tiles")
            tiles = argv[i + 1];
        else if (a == "--iters")
            iters = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr,
                         "usage: cuda_prefill_bench [--tok N] [--types a,b] [--tiles MiB,MiB] [--iters N]\n");
            return 2;
        }
    }
    int64_t max_in = 0, max_out = 0;
    for (const Shape& s : kShapes) {
        max_in = std::max(max_in, s.n_in);
        max_out = std::max(max_out, s.n_out);
    }
    float *x = nullptr, *y = nullptr;
    check(cudaMalloc(&x, static_cast<size_t>(n_tok * max_in) * 4), "malloc x");
    check(cudaMalloc(&y, static_cast<size_t>(n_tok * max_out) * 4), "malloc y");
    {
        std::vector<float> hx(static_cast<size_t>(n_tok * max_in));
        std::mt19937 g(1);
        std::normal_distribution<float> d(0.0f, 1.0f);
        for (auto& v : hx) v = d(g);
        check(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice), "copy x");
    }
    cudaStream_t stream;
    check(cudaStreamCreate(&stream), "stream");
    cudaEvent_t e0, e1;
    check(cudaEventCreate(&e0), "event");
    check(cudaEventCreate(&e1), "event");
    std::mt19937_64 g(42);

    std::printf("n_tok %lld, %d iterations per figure (median-free mean)\n", static_cast<long long>(n_tok),
                iters);
    for (const std::string& tn : split(types)) {
        const auto t = dtype_from_name(tn);
        if (!t || !cuda::gpu_matmul_supported(*t)) {
            std::fprintf(stderr, "skipping type %s\n", tn.c_str());
            continue;
        }
        // One PrefillMatmul per tile size (the tile is fixed at init).
        std::vector<std::string> tile_list = split(tiles);
        std::vector<double> model_ms(tile_list.size(), 0.0);
        double flops_model = 0;
        for (const Shape& s : kShapes) {
            const std::vector<uint8_t> host = random_rows(*t, s.n_in, s.n_out, g);
            const cuda::HostRows part{host.data(), *dtype_row_bytes(*t, static_cast<uint64_t>(s.n_in)),
                                      s.n_out};
            cuda::GpuMatrix m;
            const char* err = nullptr;
            if (!cuda::upload_matrix(*t, s.n_in, &part, 1, m, stream, &err)) {
                std::fprintf(stderr, "upload %s %s: %s\n", tn.c_str(), s.name, err);
                return 1;
            }
            const double flops = 2.0 * static_cast<double>(n_tok) * static_cast<double>(s.n_in) * s.n_out;
            flops_model += flops * s.per_model;
            for (size_t ti = 0; ti < tile_list.size(); ++ti) {
                setenv("PELICAN_PREFILL_TILE_MIB", tile_list[ti].c_str(), 1);
                cuda::PrefillMatmul mm;
                if (!mm.init(max_in, max_out, n_tok, stream, &err)) {
                    std::fprintf(stderr, "init: %s\n", err);
                    return 1;
                }
                mm.run(m, x, n_tok, y, stream);  // warm-up (cuBLAS heuristics, clocks)
                check(cudaEventRecord(e0, stream), "record");
                for (int it = 0; it < iters; ++it) mm.run(m, x, n_tok, y, stream);
                check(cudaEventRecord(e1, stream), "record");
                check(cudaEventSynchronize(e1), "sync");
                float ms = 0;
                check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
                const double per = ms / iters;
                model_ms[ti] += per * s.per_model;
                std::printf("%-5s %-8s %6lld x %6lld  tile %4s MiB  %8.3f ms  %6.1f TFLOP/s\n", tn.c_str(),
                            s.name, static_cast<long long>(s.n_in), static_cast<long long>(s.n_out),
                            tile_list[ti].c_str(), per, flops / (per * 1e-3) / 1e12);
            }
            cuda::free_matrix(m);
        }
        for (size_t ti = 0; ti < tile_list.size(); ++ti)
            std::printf("%-5s MODEL (Llama-3-8B prefill matmuls)  tile %4s MiB  %8.2f ms  %6.1f TFLOP/s\n",
                        tn.c_str(), tile_list[ti].c_str(), model_ms[ti],
                        flops_model / (model_ms[ti] * 1e-3) / 1e12);
    }
    unsetenv("PELICAN_PREFILL_TILE_MIB");
    cudaFree(x);
    cudaFree(y);
    return 0;
}
