// Upload helpers shared by GpuModel::upload's parts (gpu_model.cpp: attention and SwiGLU layers;
// gpu_model_hybrid.cpp: gated attention, Gated DeltaNet, MoE, MTP). Internal to those files.
//
//   Uploader up(model.path(), stream);
//   PELICAN_TRY(up.stack({&l.wq, &l.wk, &l.wv}, "blk.3.attn_q+attn_k+attn_v", m));   // one matrix
//   PELICAN_TRY(up.parts(segments, il, parts));                 // same-typed runs -> GpuParts
//   VecArena vecs; vecs.add(&dst, {{ptr, n}}); ... vecs.upload(buffer);               // fp32 vectors
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gpu_matrix.h"
#include "backend/cuda/gpu_model.h"
#include "core/status.h"

namespace pelican::cuda {

// "GPU memory free X of Y" (or "GPU memory unknown").
std::string gpu_memory_note();

// Ok when w can be uploaded: GGUF rows (not repacked for the CPU) of a GPU matmul type; else the
// error names the tensor.
Status check_gpu_matrix(const cpu::Weight& w, const std::string& name);

std::string gpu_layer_name(int il, std::string_view what);  // "blk.<il>.<what>"

// fp32 vectors gathered on the host, then uploaded as one allocation. Slices start on 256-byte
// boundaries; the destination pointers are patched once the device base address is known.
class VecArena {
public:
    // Appends the concatenation of parts (nullptr parts are zeros); nothing when every part is
    // absent (the destination stays nullptr).
    void add(const float** dst, std::initializer_list<std::pair<const float*, int64_t>> parts);
    size_t bytes() const { return host_.size() * sizeof(float); }
    Status upload(DeviceBuffer& out);

private:
    std::vector<float> host_;
    std::vector<std::pair<const float**, size_t>> fixups_;
};

// Rows of one CPU weight taken into a stacked GPU matrix: row ranges [first, first + count) in
// order (empty: all rows).
struct RowSegment {
    const cpu::Weight* w = nullptr;
    std::string name;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    int64_t rows() const;
};

class Uploader {
public:
    Uploader(std::string path, cudaStream_t stream) : path_(std::move(path)), stream_(stream) {}

    // One GpuMatrix from same-typed, same-n_in segments stacked along n_out (in order).
    Status stack(std::span<const RowSegment> segs, const std::string& name, GpuMatrix& out);
    Status stack(std::span<const cpu::Weight* const> ws, const std::string& name, GpuMatrix& out);
    // Consecutive same-typed segments form one GpuPart (row0 = its first output row).
    Status parts(std::span<const RowSegment> segs, int il, std::vector<GpuPart>& out);

    size_t device_bytes = 0;  // every matrix uploaded so far
    size_t read_bytes = 0;    // their GpuMatrix::read_bytes
    bool all_f32 = true;      // every matrix F32

private:
    std::string path_;
    cudaStream_t stream_;
};

}  // namespace pelican::cuda
