// cuda_qmatmul_bench: the tensor-core dequantizing matmul of batched decode (qmatmul.h) against the
// PrefillMatmul path (dequantize to f16 tiles + cuBLAS) on the Llama-3.1-8B decode shapes.
//   * per weight type, shape and n_tok: median microseconds per call of qmatmul from a CUDA graph of 20
//     back-to-back calls (as the decode graph runs them; 10 replays) and from plain launches; TB/s of
//     weight bytes (GpuMatrix::read_bytes / time); TFLOP/s (2 n_out n_in n_tok / time); the plan (CTA
//     tile rows x tokens, split-K, CTAs); PrefillMatmul's time for the same call (plain launches: it is
//     not captured) and the ratio; the L2 relative difference between the two results (both round W and
//     x to f16 and sum in fp32, so ~1e-7 .. 1e-6 is expected).
//     Each call cycles through enough copies of the matrix (>= 512 MiB in all) that its weights come
//     from HBM, not from the 60 MB L2 (batched-quant-kernels.md 5.6); weights are random codes with
//     sane scales, x is N(0, 1), never zeros.
//   * a step estimate for the 8B model: 32 x (QKV + O + gate_up + down) of the layer type plus the
//     128256 x 4096 LM head in Q6_K, for each layer type measured (when Q6_K is measured too).
//
//   * --sweep: also every tile configuration of the kernel (qmatmul_force_config) per shape and n_tok,
//     graph us each (3 replays) and the fastest, for settling the built-in table.
//
//   cuda_qmatmul_bench [--quick] [--types q4_0,q4_k,q6_k,q8_0] [--tok 16,32,64,128,256] [--no-prefill]
//                      [--cfg N] [--split N] [--sweep]
// --quick: 3 replays per figure instead of 10. --cfg / --split: force a configuration / split-K factor.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/gpu_matrix.h"
#include "backend/cuda/prefill_matmul.h"
#include "backend/cuda/qmatmul.h"
#include "core/dequantize.h"
#include "core/dtype.h"

using namespace pelican;

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Random valid GGUF rows of a quantized type t: random bytes, then fp16 scales of ~0.001 (d, and
// dmin for Q4_K) so that values stay finite.
std::vector<uint8_t> random_rows(DType t, int64_t n_in, int64_t n_out, std::mt19937& gen) {
    const size_t rb = *dtype_row_bytes(t, static_cast<uint64_t>(n_in));
    std::vector<uint8_t> bytes(rb * static_cast<size_t>(n_out));
    const auto& info = dtype_info(t);
    for (size_t i = 0; i < bytes.size(); i += 4) {
        const uint32_t v = gen();
        std::memcpy(bytes.data() + i, &v, std::min<size_t>(4, bytes.size() - i));
    }
    const uint16_t h = 0x1400;  // fp16 ~0.001
    for (size_t b = 0; b < bytes.size() / info.block_bytes; ++b) {
        uint8_t* blk = bytes.data() + b * info.block_bytes;
        if (t == DType::Q6_K)
            std::memcpy(blk + 208, &h, 2);
        else
            std::memcpy(blk, &h, 2);
        if (t == DType::Q4_K) std::memcpy(blk + 2, &h, 2);
    }
    return bytes;
}

struct Shape {
    const char* name;
    int64_t n_out, n_in;
    int per_layer;  // times per decode step (32 layers), 0 = the LM head (once)
};
const Shape kShapes[] = {{"qkv 6144x4096", 6144, 4096, 32},
                         {"o 4096x4096", 4096, 4096, 32},
                         {"gate_up 28672x4096", 28672, 4096, 32},
                         {"down 4096x14336", 4096, 14336, 32},
                         {"head 128256x4096", 128256, 4096, 0}};
constexpr int64_t kMaxIn = 14336, kMaxOut = 128256;

class Bench {
public:
    Bench(DType t, const Shape& s, int max_tok, std::mt19937& gen) : s_(s) {
        const std::vector<uint8_t> rows = random_rows(t, s.n_in, s.n_out, gen);
        const size_t rb = *dtype_row_bytes(t, static_cast<uint64_t>(s.n_in));
        size_t total = 0;
        do {
            cuda::GpuMatrix m;
            const char* err = nullptr;
            cuda::HostRows hr{rows.data(), rb, s.n_out};
            if (!cuda::upload_matrix(t, s.n_in, &hr, 1, m, nullptr, &err)) {
                std::fprintf(stderr, "upload failed: %s\n", err);
                std::exit(1);
            }
            total += m.bytes;
            mats_.push_back(m);
        } while (total < (size_t{512} << 20) && mats_.size() < 64);
        std::vector<float> xh(static_cast<size_t>(s.n_in * max_tok));
        std::normal_distribution<float> nd;
        for (auto& v : xh) v = nd(gen);
        x_ = cuda::DeviceBuffer(xh.size() * 4);
        y_ = cuda::DeviceBuffer(static_cast<size_t>(s.n_out * max_tok) * 4);
        y2_ = cuda::DeviceBuffer(static_cast<size_t>(s.n_out * max_tok) * 4);
        if (!x_.ok() || !y_.ok() || !y2_.ok()) {
            std::fprintf(stderr, "out of device memory\n");
            std::exit(1);
        }
        PELICAN_CUDA_CHECK(cudaMemcpy(x_.get(), xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
        PELICAN_CUDA_CHECK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
        PELICAN_CUDA_CHECK(cudaEventCreate(&e0_));
        PELICAN_CUDA_CHECK(cudaEventCreate(&e1_));
    }
    ~Bench() {
        cudaEventDestroy(e0_);
        cudaEventDestroy(e1_);
        cudaStreamDestroy(st_);
        for (auto& m : mats_) cuda::free_matrix(m);
    }
    const cuda::GpuMatrix& matrix() const { return mats_[0]; }

    // Median us per qmatmul call: (graph of kCalls, plain launches).
    std::pair<double, double> time_qmm(int n_tok, void* ws, size_t wsb, int reps) {
        auto call = [&](const cuda::GpuMatrix& m, float* y) {
            cuda::qmatmul(m, x_.as<float>(), s_.n_in, n_tok, y, s_.n_out, ws, wsb, st_);
        };
        cudaGraph_t g;
        cudaGraphExec_t ge;
        PELICAN_CUDA_CHECK(cudaStreamBeginCapture(st_, cudaStreamCaptureModeGlobal));
        for (int i = 0; i < kCalls; ++i) call(mats_[next_++ % mats_.size()], y_.as<float>());
        PELICAN_CUDA_CHECK(cudaStreamEndCapture(st_, &g));
        PELICAN_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
        const double tg = timed(reps, [&] { PELICAN_CUDA_CHECK(cudaGraphLaunch(ge, st_)); });
        const double tp = timed(reps, [&] {
            for (int i = 0; i < kCalls; ++i) call(mats_[next_++ % mats_.size()], y_.as<float>());
        });
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
        return {tg, tp};
    }
    double time_prefill(cuda::PrefillMatmul& pm, int n_tok, int reps) {
        return timed(reps, [&] {
            for (int i = 0; i < kCalls; ++i)
                pm.run(mats_[next_++ % mats_.size()], x_.as<float>(), n_tok, y2_.as<float>(), st_);
        });
    }
    // L2 relative difference of qmatmul against PrefillMatmul on copy 0 (both results fresh).
    double compare(cuda::PrefillMatmul& pm, int n_tok, void* ws, size_t wsb) {
        cuda::qmatmul(mats_[0], x_.as<float>(), s_.n_in, n_tok, y_.as<float>(), s_.n_out, ws, wsb, st_);
        pm.run(mats_[0], x_.as<float>(), n_tok, y2_.as<float>(), st_);
        PELICAN_CUDA_CHECK(cudaStreamSynchronize(st_));
        const size_t n = static_cast<size_t>(n_tok * s_.n_out);
        std::vector<float> a(n), b(n);
        PELICAN_CUDA_CHECK(cudaMemcpy(a.data(), y_.get(), n * 4, cudaMemcpyDeviceToHost));
        PELICAN_CUDA_CHECK(cudaMemcpy(b.data(), y2_.get(), n * 4, cudaMemcpyDeviceToHost));
        double e2 = 0, r2 = 0;
        for (size_t i = 0; i < n; ++i) {
            const double d = static_cast<double>(a[i]) - b[i];
            e2 += d * d;
            r2 += static_cast<double>(b[i]) * b[i];
        }
        return std::sqrt(e2 / std::max(r2, 1e-300));
    }

private:
    static constexpr int kCalls = 20;
    template <typename F>
    double timed(int reps, F&& enqueue) {
        auto once = [&] {
            PELICAN_CUDA_CHECK(cudaEventRecord(e0_, st_));
            enqueue();
            PELICAN_CUDA_CHECK(cudaEventRecord(e1_, st_));
            PELICAN_CUDA_CHECK(cudaEventSynchronize(e1_));
            float ms = 0;
            PELICAN_CUDA_CHECK(cudaEventElapsedTime(&ms, e0_, e1_));
            return static_cast<double>(ms) * 1e3 / kCalls;
        };
        once();  // warm-up
        std::vector<double> t;
        for (int r = 0; r < reps; ++r) t.push_back(once());
        return median(t);
    }
    Shape s_;
    std::vector<cuda::GpuMatrix> mats_;
    cuda::DeviceBuffer x_, y_, y2_;
    cudaStream_t st_ = nullptr;
    cudaEvent_t e0_ = nullptr, e1_ = nullptr;
    size_t next_ = 0;
};

std::vector<int> parse_ints(const std::string& s) {
    std::vector<int> v;
    size_t p = 0;
    while (p < s.size()) {
        const size_t q = std::min(s.find(',', p), s.size());
        v.push_back(std::atoi(s.substr(p, q - p).c_str()));
        p = q + 1;
    }
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false, prefill = true, sweep = false;
    int user_cfg = -1;
    std::vector<DType> types = {DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::Q8_0};
    std::vector<int> toks = {16, 32, 64, 128, 256};
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!std::strcmp(argv[i], "--no-prefill")) {
            prefill = false;
        } else if (!std::strcmp(argv[i], "--sweep")) {
            sweep = true;
        } else if (!std::strcmp(argv[i], "--cfg") && i + 1 < argc) {
            user_cfg = std::atoi(argv[++i]);
            cuda::qmatmul_force_config(user_cfg);
        } else if (!std::strcmp(argv[i], "--split") && i + 1 < argc) {
            cuda::qmatmul_force_split(std::atoi(argv[++i]));
        } else if (!std::strcmp(argv[i], "--tok") && i + 1 < argc) {
            toks = parse_ints(argv[++i]);
        } else if (!std::strcmp(argv[i], "--types") && i + 1 < argc) {
            types.clear();
            std::string s = argv[++i];
            size_t p = 0;
            while (p <= s.size()) {
                const size_t q = std::min(s.find(',', p), s.size());
                if (auto t = dtype_from_name(s.substr(p, q - p))) types.push_back(*t);
                p = q + 1;
            }
        } else {
            std::fprintf(
                stderr,
                "usage: cuda_qmatmul_bench [--quick] [--types q4_0,q4_k,q6_k,q8_0] [--tok 16,32,...] "
                "[--no-prefill] [--cfg N] [--split N] [--sweep]\n");
            return 2;
        }
    }
    if (!cuda::gpu_available()) {
        std::printf("no CUDA device\n");
        return 0;
    }
    toks.erase(std::remove_if(toks.begin(), toks.end(), [](int n) { return n < 1; }), toks.end());
    if (toks.empty()) return 2;
    const int max_tok = *std::max_element(toks.begin(), toks.end());
    std::printf("device: %s\n", cuda::device_description(0).c_str());
    const size_t wsb = cuda::qmatmul_workspace_bytes(kMaxIn, kMaxOut, max_tok);
    cuda::DeviceBuffer ws(wsb);
    cuda::PrefillMatmul pm;
    const char* err = nullptr;
    if (!ws.ok() || (prefill && !pm.init(kMaxIn, kMaxOut, max_tok, nullptr, &err))) {
        std::fprintf(stderr, "setup failed: %s\n", err ? err : "workspace allocation");
        return 1;
    }
    std::printf("qmatmul workspace %.1f MiB\n\n", static_cast<double>(wsb) / (1 << 20));
    const int reps = quick ? 3 : 10;
    std::mt19937 gen(1234);
    std::printf("%-5s %-19s %5s %8s %9s %9s %7s %8s %-16s %10s %7s %9s\n", "type", "shape", "n_tok", "MB",
                "graph us", "plain us", "TB/s", "TFLOP/s", "plan", "prefill us", "ratio", "L2 diff");
    // (type, shape index, n_tok) -> graph us, prefill us
    std::map<std::tuple<DType, int, int>, std::pair<double, double>> res;
    for (DType t : types) {
        for (int si = 0; si < static_cast<int>(std::size(kShapes)); ++si) {
            const Shape& s = kShapes[si];
            Bench b(t, s, max_tok, gen);
            if (!cuda::qmatmul_supported(b.matrix())) {
                std::printf("%-5s %-19s not supported by qmatmul\n", std::string(dtype_name(t)).c_str(),
                            s.name);
                continue;
            }
            for (int n_tok : toks) {
                const auto [tg, tp] = b.time_qmm(n_tok, ws.get(), wsb, reps);
                const double tpre = prefill ? b.time_prefill(pm, n_tok, reps) : 0.0;
                const double diff = prefill ? b.compare(pm, n_tok, ws.get(), wsb) : 0.0;
                const double bytes = static_cast<double>(b.matrix().read_bytes);
                const double flop = 2.0 * static_cast<double>(s.n_out) * static_cast<double>(s.n_in) * n_tok;
                const cuda::QmatmulPlan pl = cuda::qmatmul_plan(b.matrix(), n_tok);
                char plan[64];
                std::snprintf(plan, sizeof plan, "%dx%d s%d c%d", pl.rows_per_cta, pl.tokens_per_cta,
                              pl.split, pl.ctas);
                std::printf("%-5s %-19s %5d %8.1f %9.2f %9.2f %7.2f %8.1f %-16s %10.2f %7.2f %9.2e\n",
                            std::string(dtype_name(t)).c_str(), s.name, n_tok, bytes / 1e6, tg, tp,
                            bytes / (tg * 1e-6) / 1e12, flop / (tg * 1e-6) / 1e12, plan, tpre,
                            prefill ? tpre / tg : 0.0, diff);
                std::fflush(stdout);
                res[{t, si, n_tok}] = {tg, tpre};
                if (sweep) {
                    std::string line = "  sweep";
                    double best = 1e30;
                    int best_c = -1;
                    for (int c = 0; c < cuda::qmatmul_config_count(); ++c) {
                        cuda::qmatmul_force_config(c);
                        const cuda::QmatmulPlan pc = cuda::qmatmul_plan(b.matrix(), n_tok);
                        const double us = b.time_qmm(n_tok, ws.get(), wsb, 3).first;
                        char buf[80];
                        std::snprintf(buf, sizeof buf, " c%d(%dx%d s%d)=%.1f", c, pc.rows_per_cta,
                                      pc.tokens_per_cta, pc.split, us);
                        line += buf;
                        if (us < best) {
                            best = us;
                            best_c = c;
                        }
                    }
                    cuda::qmatmul_force_config(user_cfg);
                    std::printf("%s  best c%d %.1f us\n", line.c_str(), best_c, best);
                    std::fflush(stdout);
                }
            }
        }
    }
    // Step estimate: 32 layers of type t + the Q6_K head.
    const int head = static_cast<int>(std::size(kShapes)) - 1;
    std::printf(
        "\n8B decode-step matmuls (32 x (qkv + o + gate_up + down) of the layer type + Q6_K head), ms\n");
    std::printf("%-6s %5s %10s %10s\n", "layers", "n_tok", "qmatmul", "prefill");
    for (DType t : types) {
        for (int n_tok : toks) {
            double q = 0, p = 0;
            bool ok = true;
            for (int si = 0; si <= head; ++si) {
                const auto it = res.find({si == head ? DType::Q6_K : t, si, n_tok});
                if (it == res.end()) {
                    ok = false;
                    break;
                }
                const int mult = kShapes[si].per_layer > 0 ? kShapes[si].per_layer : 1;
                q += mult * it->second.first;
                p += mult * it->second.second;
            }
            if (ok)
                std::printf("%-6s %5d %10.3f %10.3f\n", std::string(dtype_name(t)).c_str(), n_tok, q / 1e3,
                            prefill ? p / 1e3 : 0.0);
        }
    }
    return 0;
}
