// ops_bench: CPU kernel throughput.
//   * memory bandwidth: a streaming read of 1 GiB in huge pages (1 and N threads) as the roofline;
//   * matmul decode (n_tok = 1): GB/s of weight bytes, cycling through enough copies of each
//     matrix (>= 256 MiB) that every call streams its weights from DRAM, as real decode does;
//   * matmul prefill (n_tok = 128, 512): GFLOP/s (2 n_in n_out n_tok flops per call).
// Each figure is the median of --reps repetitions, configurations interleaved round-robin so
// background noise spreads evenly.
//
//   ops_bench [--threads 1,2] [--reps 9] [--types q4_0,q8_0,f16] [--prefill] [--hot] [--no-bw] [--view]
//   [--attn]
//             [--isa scalar|avx2|avx512]
// --hot: small L2-resident matrices (kernel compute speed); --no-bw: skip the bandwidth test;
// --view: weights stay views of 4 KiB-page buffers (default: owned copies with huge pages).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/mem_bandwidth.h"
#include "core/buffer.h"
#include "core/dequantize.h"
#include "core/float_convert.h"

using namespace pelican;

namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds used by the whole process (all threads): immune to time-slicing by other
// processes on a shared machine, so bytes / cpu_s is the kernel's speed while it runs.
double cpu_s() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    size_t p = 0;
    while (p <= s.size()) {
        const size_t q = std::min(s.find(',', p), s.size());
        if (q > p) out.push_back(s.substr(p, q - p));
        p = q + 1;
    }
    return out;
}

struct MatSet {
    DType type;
    int64_t n_in, n_out;
    std::vector<Buffer> raw;           // GGUF bytes (kept alive: Weights may view them)
    std::vector<cpu::Weight> weights;  // prepared copies
};

MatSet make_set(DType t, int64_t n_in, int64_t n_out, size_t min_total_bytes, bool own_copy,
                std::mt19937& rng) {
    MatSet s{t, n_in, n_out, {}, {}};
    const size_t row_bytes = *dtype_row_bytes(t, static_cast<uint64_t>(n_in));
    const size_t bytes = row_bytes * static_cast<size_t>(n_out);
    const size_t copies = std::max<size_t>(1, (min_total_bytes + bytes - 1) / bytes);
    std::vector<float> row(static_cast<size_t>(n_in));
    std::normal_distribution<float> nd(0.0f, 0.02f);
    Buffer first = Buffer::allocate(bytes).value();
    for (int64_t o = 0; o < n_out; ++o) {
        for (auto& v : row) v = nd(rng);
        (void)quantize_row(t, row.data(), static_cast<uint8_t*>(first.data()) + o * row_bytes, n_in);
    }
    for (size_t c = 0; c < copies; ++c) {
        Buffer b = Buffer::allocate(bytes).value();
        std::memcpy(b.data(), first.data(), bytes);
        auto view = *Tensor::contiguous_view(t, {n_in, n_out}, b.data(), "w");
        s.weights.push_back(cpu::Weight::prepare(view, true, own_copy).value());
        s.raw.push_back(std::move(b));
    }
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> threads{1, 2};
    int reps = 9;
    bool prefill = false;
    bool hot = false;
    bool bandwidth = true;
    bool attn = false;
    bool own_copy = true;  // weights in owned huge-page memory, as cpu::Weight::prepare(own_copy)  //
                           // L2-resident matrices: kernel compute speed, independent of DRAM
    std::vector<std::string> types{"q4_0", "q8_0", "f16"};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
        if (a == "--threads") {
            threads.clear();
            for (auto& s : split(next())) threads.push_back(std::stoi(s));
        } else if (a == "--reps") {
            reps = std::stoi(next());
        } else if (a == "--types") {
            types = split(next());
        } else if (a == "--view") {
            own_copy = false;
        } else if (a == "--attn") {
            attn = true;
        } else if (a == "--no-bw") {
            bandwidth = false;
        } else if (a == "--hot") {
            hot = true;
        } else if (a == "--prefill") {
            prefill = true;
        } else if (a == "--isa") {
            const std::string v = next();
            cpu::set_isa(v == "scalar" ? cpu::Isa::kScalar
                         : v == "avx2" ? cpu::Isa::kAvx2
                                       : cpu::Isa::kAvx512);
        } else {
            std::fprintf(stderr,
                         "usage: ops_bench [--threads 1,2] [--reps N] [--types q4_0,q8_0,f16] [--prefill] "
                         "[--isa X]\n");
            return 2;
        }
    }
    std::printf("isa: %s (detected %s)\n", cpu::isa_name(cpu::active_isa()),
                cpu::isa_name(cpu::detected_isa()));

    // ---- memory bandwidth (backend/cpu/mem_bandwidth.h) ----
    if (bandwidth && !threads.empty()) {
        ThreadPool fill(*std::max_element(threads.begin(), threads.end()));
        auto big = cpu::ReadProbeBuffer::allocate(cpu::kReadProbeBytes, fill);
        if (!big) {
            std::fprintf(stderr, "%s\n", big.error().message.c_str());
            return 1;
        }
        for (int th : threads) {
            ThreadPool pool(th);
            const cpu::ReadBandwidth bw = cpu::measure_read_bandwidth(big->bytes, pool, reps);
            std::printf("read bandwidth, %d thread(s): median %.1f GB/s (max %.1f)\n", th, bw.median_gbps,
                        bw.max_gbps);
        }
    }

    // ---- matmul ----
    std::mt19937 rng(1234);
    struct Shape {
        int64_t n_in, n_out;
    };
    std::vector<Shape> shapes{{2048, 5632}, {5632, 2048}};
    if (hot) shapes = {{2048, 128}, {5632, 48}};  // ~100-700 KB: stays in L2
    std::vector<MatSet> sets;
    for (const auto& tn : types) {
        auto t = dtype_from_name(tn);
        if (!t || !cpu::matmul_supported(*t)) {
            std::fprintf(stderr, "unsupported type %s\n", tn.c_str());
            return 2;
        }
        for (const Shape& s : shapes)
            sets.push_back(make_set(*t, s.n_in, s.n_out, hot ? 0 : size_t{256} << 20, own_copy, rng));
    }
    std::vector<float> x(5632 * 512), y(5632 * 512);
    for (auto& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);

    // Decode: one pass over all copies of a set = one timed sample; configs interleaved.
    for (int th : threads) {
        ThreadPool pool(th);
        std::vector<std::vector<double>> gbs(sets.size()), gbs_cpu(sets.size());
        for (int r = 0; r < reps + 1; ++r) {
            for (size_t k = 0; k < sets.size(); ++k) {
                MatSet& s = sets[k];
                const double t0 = now_s(), c0 = cpu_s();
                const int calls = hot ? 200 : 1;
                for (int c = 0; c < calls; ++c)
                    for (size_t i = 0; i < (hot ? 1 : s.weights.size()); ++i)
                        cpu::matmul(s.weights[i], x.data(), 1, y.data(), pool);
                const double dt = now_s() - t0, dc = cpu_s() - c0;
                const double bytes = static_cast<double>(s.weights[0].bytes()) *
                                     static_cast<double>(hot ? calls : s.weights.size());
                if (r > 0) {
                    gbs[k].push_back(bytes / dt / 1e9);
                    gbs_cpu[k].push_back(bytes / (dc / th) / 1e9);
                }
            }
        }
        for (size_t k = 0; k < sets.size(); ++k) {
            const MatSet& s = sets[k];
            std::printf(
                "decode %-5s %5lldx%-5lld (n_in x n_out) %d thread(s): median %6.1f GB/s wall (max %6.1f), "
                "%6.1f GB/s per cpu-time/threads  (%.1f us/call)\n",
                std::string(dtype_name(s.type)).c_str(), static_cast<long long>(s.n_in),
                static_cast<long long>(s.n_out), th, median(gbs[k]),
                *std::max_element(gbs[k].begin(), gbs[k].end()), median(gbs_cpu[k]),
                s.weights[0].bytes() / (median(gbs[k]) * 1e9) * 1e6);
        }
    }

    if (attn) {
        // Decode attention of one layer, TinyLlama shape (32 query heads, 4 KV heads, head_dim 64).
        for (int th : threads) {
            ThreadPool pool(th);
            for (DType kv : {DType::F32, DType::F16}) {
                for (int64_t ctx : {512, 2048}) {
                    AttentionParams p;
                    p.n_head = 32;
                    p.n_kv_head = 4;
                    p.head_dim = 64;
                    p.scale = 0.125f;
                    p.kv_type = kv;
                    const size_t elems = static_cast<size_t>(ctx * 4 * 64), esz = kv == DType::F16 ? 2 : 4;
                    std::vector<uint8_t> k(elems * esz), v(elems * esz);
                    for (size_t i = 0; i < elems; ++i) {
                        const float f = std::normal_distribution<float>(0.0f, 1.0f)(rng);
                        if (kv == DType::F16) {
                            const uint16_t h = f32_to_f16(f);
                            std::memcpy(&k[i * 2], &h, 2);
                            std::memcpy(&v[i * 2], &h, 2);
                        } else {
                            std::memcpy(&k[i * 4], &f, 4);
                            std::memcpy(&v[i * 4], &f, 4);
                        }
                    }
                    std::vector<float> q(32 * 64, 0.1f), out(32 * 64);
                    std::vector<double> us;
                    for (int r = 0; r < reps + 1; ++r) {
                        const double t0 = now_s();
                        for (int c = 0; c < 20; ++c)
                            cpu::attention(q.data(), k.data(), v.data(), ctx - 1, 1, p, out.data(), pool);
                        if (r > 0) us.push_back((now_s() - t0) / 20 * 1e6);
                    }
                    std::printf("attention decode ctx %5lld %s cache %d thread(s): median %.1f us/layer\n",
                                static_cast<long long>(ctx), std::string(dtype_name(kv)).c_str(), th,
                                median(us));
                }
            }
        }
    }

    if (prefill) {
        for (int th : threads) {
            ThreadPool pool(th);
            for (int64_t n_tok : {128, 512}) {
                std::vector<std::vector<double>> gf(sets.size()), gf_cpu(sets.size());
                for (int r = 0; r < std::max(3, reps / 3) + 1; ++r) {
                    for (size_t k = 0; k < sets.size(); ++k) {
                        MatSet& s = sets[k];
                        const double t0 = now_s(), c0 = cpu_s();
                        cpu::matmul(s.weights[static_cast<size_t>(r) % s.weights.size()], x.data(), n_tok,
                                    y.data(), pool);
                        const double dt = now_s() - t0, dc = cpu_s() - c0;
                        const double flop = 2.0 * static_cast<double>(s.n_in * s.n_out * n_tok);
                        if (r > 0) {
                            gf[k].push_back(flop / dt / 1e9);
                            gf_cpu[k].push_back(flop / (dc / th) / 1e9);
                        }
                    }
                }
                for (size_t k = 0; k < sets.size(); ++k) {
                    const MatSet& s = sets[k];
                    std::printf(
                        "prefill %-5s %5lldx%-5lld n_tok %3lld %d thread(s): median %6.1f GFLOP/s wall, "
                        "%6.1f per cpu-time/threads\n",
                        std::string(dtype_name(s.type)).c_str(), static_cast<long long>(s.n_in),
                        static_cast<long long>(s.n_out), static_cast<long long>(n_tok), th, median(gf[k]),
                        median(gf_cpu[k]));
                }
            }
        }
    }
    return 0;
}
