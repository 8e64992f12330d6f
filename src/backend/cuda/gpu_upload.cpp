// Upload helpers of GpuModel (see gpu_upload.h).
#include "backend/cuda/gpu_upload.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "core/format_bytes.h"

namespace pelican::cuda {

std::string gpu_memory_note() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return "GPU memory unknown";
    }
    return fmt::format("GPU memory free {} of {}", human_bytes(free_b), human_bytes(total_b));
}

Status check_gpu_matrix(const cpu::Weight& w, const std::string& name) {
    if (w.layout() != cpu::Weight::Layout::kRows)
        return make_error(
            "{}: the weights were repacked for the CPU backend; load the model with allow_repack = false "
            "(EngineOptions.device = cuda does) to run it on the GPU",
            name);
    if (!gpu_matmul_supported(w.type()))
        return make_error(
            "{}: type {} is not supported by the GPU matmul (supported: f32, f16, bf16, q8_0, "
            "q4_0, q4_k, q6_k)",
            name, dtype_name(w.type()));
    return {};
}

std::string gpu_layer_name(int il, std::string_view what) { return fmt::format("blk.{}.{}", il, what); }

void VecArena::add(const float** dst, std::initializer_list<std::pair<const float*, int64_t>> parts) {
    bool any = false;
    for (const auto& [p, n] : parts) any |= p != nullptr;
    if (!any) return;
    const size_t off = host_.size();
    for (const auto& [p, n] : parts) {
        if (p)
            host_.insert(host_.end(), p, p + n);
        else
            host_.insert(host_.end(), static_cast<size_t>(n), 0.0f);
    }
    host_.resize((host_.size() + 63) / 64 * 64, 0.0f);
    fixups_.push_back({dst, off});
}

Status VecArena::upload(DeviceBuffer& out) {
    if (host_.empty()) return {};
    out = DeviceBuffer(bytes());
    if (!out.ok())
        return make_error("allocating {} of norms, biases and rope frequencies on the GPU failed ({})",
                          human_bytes(bytes()), gpu_memory_note());
    PELICAN_CUDA_CHECK(cudaMemcpy(out.get(), host_.data(), bytes(), cudaMemcpyHostToDevice));
    for (const auto& [dst, off] : fixups_) *dst = out.as<float>() + off;
    return {};
}

int64_t RowSegment::rows() const {
    if (ranges.empty()) return w->n_out();
    int64_t n = 0;
    for (const auto& [first, count] : ranges) n += count;
    return n;
}

Status Uploader::stack(std::span<const RowSegment> segs, const std::string& name, GpuMatrix& out) {
    std::vector<HostRows> parts;
    size_t host_bytes = 0;
    int64_t n_out = 0;
    const cpu::Weight& first = *segs.front().w;
    for (const RowSegment& s : segs) {
        if (s.w->type() != first.type() || s.w->n_in() != first.n_in())
            return make_error("{}: {}: parts of one GPU matrix differ in type or width", path_, name);
        const auto* base = static_cast<const uint8_t*>(s.w->data());
        const size_t stride = static_cast<size_t>(s.w->row_stride());
        const size_t rb = static_cast<size_t>(s.w->bytes() / s.w->n_out());
        if (s.ranges.empty()) {
            parts.push_back({base, stride, s.w->n_out()});
        } else {
            for (const auto& [r0, count] : s.ranges) {
                if (r0 < 0 || count < 0 || r0 + count > s.w->n_out())
                    return make_error("{}: {}: row range {}+{} outside {} rows", path_, name, r0, count,
                                      s.w->n_out());
                parts.push_back({base + static_cast<size_t>(r0) * stride, stride, count});
            }
        }
        host_bytes += rb * static_cast<size_t>(s.rows());
        n_out += s.rows();
    }
    const char* err = nullptr;
    if (!upload_matrix(first.type(), first.n_in(), parts.data(), static_cast<int>(parts.size()), out, stream_,
                       &err))
        return make_error("{}: uploading {} ({} [{} x {}], {}) to the GPU failed: {} ({})", path_, name,
                          dtype_name(first.type()), n_out, first.n_in(), human_bytes(host_bytes),
                          err ? err : "unknown error", gpu_memory_note());
    device_bytes += out.bytes;
    read_bytes += out.read_bytes;
    if (first.type() != DType::F32) all_f32 = false;
    return {};
}

Status Uploader::stack(std::span<const cpu::Weight* const> ws, const std::string& name, GpuMatrix& out) {
    std::vector<RowSegment> segs;
    for (const cpu::Weight* w : ws) segs.push_back(RowSegment{w, {}, {}});
    return stack(segs, name, out);
}

Status Uploader::parts(std::span<const RowSegment> segs, int il, std::vector<GpuPart>& out) {
    int64_t row0 = 0;
    for (size_t i = 0; i < segs.size();) {
        size_t j = i + 1;
        while (j < segs.size() && segs[j].w->type() == segs[i].w->type()) ++j;
        std::string name;
        int64_t rows = 0;
        for (size_t k = i; k < j; ++k) {
            if (k != i) name += '+';
            name += segs[k].name;
            rows += segs[k].rows();
        }
        out.push_back(GpuPart{GpuMatrix{}, row0});
        PELICAN_TRY(stack(segs.subspan(i, j - i), gpu_layer_name(il, name), out.back().m));
        row0 += rows;
        i = j;
    }
    return {};
}

}  // namespace pelican::cuda
