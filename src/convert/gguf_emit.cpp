// Streaming GGUF emission of planned tensors (see gguf_emit.h).
#include "convert/gguf_emit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>

#include "convert/progress.h"
#include "core/dequantize.h"
#include "core/thread_pool.h"
#include "formats/gguf_writer.h"
#include "model/rope_permute.h"

namespace pelican {
namespace {

constexpr uint64_t kChunkBytes = uint64_t{16} << 20;  // output bytes per written chunk

// Row geometry of a tensor as the emitter walks it: n_rows rows of row_len elements. A permuted
// 1-D tensor is walked as row_len 1 so the permutation can move single elements.
struct Geometry {
    int64_t row_len = 0;
    int64_t n_rows = 0;
    int64_t head_dim = 0;  // rows per head when permuted
};

Geometry geometry_of(const PlannedTensor& t) {
    Geometry g;
    const auto n = static_cast<int64_t>(t.n_elements());
    g.row_len = t.permute_heads > 0 && t.dims.size() == 1 ? 1 : static_cast<int64_t>(t.dims[0]);
    g.n_rows = n / g.row_len;
    if (t.permute_heads > 0) g.head_dim = g.n_rows / t.permute_heads;
    return g;
}

int64_t source_row(const Geometry& g, int64_t r) {
    if (g.head_dim == 0) return r;
    return r / g.head_dim * g.head_dim + rope_permute_src_row(r % g.head_dim, g.head_dim);
}

// First failure inside a parallel section.
struct FirstError {
    std::mutex mu;
    std::atomic<bool> set{false};
    std::string message;
    void record(std::string m) {
        std::lock_guard<std::mutex> lock(mu);
        if (!set.exchange(true)) message = std::move(m);
    }
};

// One chunk of the write: rows [r0, r0 + n) of one tensor.
struct Chunk {
    size_t tensor = 0;
    int64_t r0 = 0;
    int64_t n = 0;
};

// Produces rows [r0, r0 + n) of `t` in its output type into `chunk`, on the pool.
Status produce_chunk(const PlannedTensor& t, int64_t r0, int64_t n, std::vector<uint8_t>& chunk,
                     ThreadPool& pool, std::vector<std::vector<float>>& scratch) {
    const Geometry g = geometry_of(t);
    const auto out_row = static_cast<size_t>(*dtype_row_bytes(t.type, static_cast<uint64_t>(g.row_len)));
    const size_t src_row =
        t.src ? static_cast<size_t>(*dtype_row_bytes(t.src_type, static_cast<uint64_t>(g.row_len))) : 0;
    const bool copy = t.src && t.src_type == t.type;
    const bool check_finite = dtype_info(t.type).block_elems > 1;  // quantizers need finite input
    chunk.resize(static_cast<size_t>(n) * out_row);
    const int64_t per_task = std::max<int64_t>(1, n / (pool.size() * 4));
    FirstError err;
    pool.parallel_for((n + per_task - 1) / per_task, [&](int64_t task, int thread) {
        float* buf = scratch[static_cast<size_t>(thread)].data();
        const int64_t end = std::min(n, (task + 1) * per_task);
        for (int64_t i = task * per_task; i < end && !err.set.load(std::memory_order_relaxed); ++i) {
            const int64_t sr = source_row(g, r0 + i);
            uint8_t* dst = chunk.data() + static_cast<size_t>(i) * out_row;
            if (copy) {
                std::memcpy(dst, t.src + static_cast<size_t>(sr) * src_row, out_row);
                continue;
            }
            if (t.src) {
                const Status s =
                    dequantize_row(t.src_type, t.src + static_cast<size_t>(sr) * src_row, buf, g.row_len);
                if (!s.ok()) return err.record(t.name + ": " + s.error().message);
            } else {
                t.generate(sr, buf);
            }
            if (check_finite)
                for (int64_t j = 0; j < g.row_len; ++j)
                    if (!std::isfinite(buf[j]) || std::fabs(buf[j]) > 1e6f)
                        return err.record(
                            fmt::format("tensor {}: row {} holds {} at column {}; "
                                        "cannot quantize non-finite or huge values",
                                        t.name, sr, buf[j], j));
            const Status s = quantize_row(t.type, buf, dst, g.row_len);
            if (!s.ok()) return err.record(t.name + ": " + s.error().message);
        }
    });
    if (err.set) return Error{err.message};
    return {};
}

}  // namespace

Expected<EmitStats> emit_gguf(const std::string& path, const std::vector<GgufKV>& kvs,
                              const std::vector<PlannedTensor>& tensors, const EmitOptions& opt) {
    GgufWriter w;
    for (const GgufKV& kv : kvs) PELICAN_TRY(w.add_kv(kv.key, kv.value));
    for (const PlannedTensor& t : tensors) {
        PELICAN_TRY(validate_planned(t));
        PELICAN_TRY(w.add_tensor(t.name, t.type, t.dims));
    }
    if (opt.fd >= 0) {
        PELICAN_TRY(w.begin_fd(opt.fd, path));
    } else {
        PELICAN_TRY(w.begin(path, opt.force));  // the output rules of core/output_file.h
    }

    PELICAN_ASSIGN(std::unique_ptr<ThreadPool> pool_owner, ThreadPool::create(opt.threads));
    ThreadPool& pool = *pool_owner;
    const int n_threads = pool.size();
    uint64_t total = 0;
    int64_t max_row = 1;
    std::vector<Chunk> chunks;
    for (size_t ti = 0; ti < tensors.size(); ++ti) {
        const PlannedTensor& t = tensors[ti];
        total += w.tensors()[ti].n_bytes;
        const Geometry g = geometry_of(t);
        max_row = std::max(max_row, g.row_len);
        const auto out_row = *dtype_row_bytes(t.type, static_cast<uint64_t>(g.row_len));
        const int64_t rows_per_chunk = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / out_row));
        for (int64_t r0 = 0; r0 < g.n_rows; r0 += rows_per_chunk)
            chunks.push_back({ti, r0, std::min(rows_per_chunk, g.n_rows - r0)});
    }
    Progress progress("writing " + std::filesystem::path(path).filename().string(), total, opt.progress);
    std::vector<std::vector<float>> scratch(static_cast<size_t>(n_threads),
                                            std::vector<float>(static_cast<size_t>(max_row)));

    // Double buffering: chunk k is produced on the pool while a writer thread writes chunk k-1.
    std::vector<uint8_t> bufs[2];
    std::future<Status> pending;  // the write of the previous chunk
    uint64_t pending_bytes = 0;
    const std::string* pending_name = nullptr;
    uint64_t done = 0;
    const auto wait_write = [&]() -> Status {
        if (!pending.valid()) return {};
        Status s = pending.get();
        if (!s.ok()) return s;
        done += pending_bytes;
        progress.update(done, *pending_name);
        return {};
    };

    for (size_t k = 0; k < chunks.size(); ++k) {
        if (opt.cancel && opt.cancel->load()) {
            (void)wait_write();
            return make_error("interrupted; '{}' was not written", path);
        }
        const PlannedTensor& t = tensors[chunks[k].tensor];
        Status s = produce_chunk(t, chunks[k].r0, chunks[k].n, bufs[k % 2], pool, scratch);
        const Status ws = wait_write();
        PELICAN_TRY(ws);
        PELICAN_TRY(s);
        pending_bytes = bufs[k % 2].size();
        pending_name = &t.name;
        pending =
            std::async(std::launch::async, [&w, buf = &bufs[k % 2]] { return w.write_tensor_data(*buf); });
    }
    PELICAN_TRY(wait_write());
    PELICAN_TRY(w.finish());
    progress.finish();
    return EmitStats{w.file_size(), progress.elapsed_s()};
}

}  // namespace pelican
