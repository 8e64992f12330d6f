// Writes planned tensors (convert/tensor_plan.h) and metadata as one GGUF file, streaming: each
// tensor is produced in chunks of rows (converted / generated and quantized on a thread pool),
// written, and dropped, so memory stays at a few chunk buffers whatever the model size. The file
// appears atomically (GgufWriter writes a unique temporary next to OUT and renames it at the end;
// core/output_file.h); on any error or a cancel request the temporary file is removed.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "convert/tensor_plan.h"
#include "core/status.h"
#include "formats/gguf.h"

namespace pelican {

struct EmitOptions {
    int threads = 0;                            // 0: ThreadPool::default_thread_count()
    bool progress = true;                       // progress bar / lines on stderr
    const std::atomic<bool>* cancel = nullptr;  // polled between chunks; set -> "interrupted" error
    int fd = -1;         // >= 0: write into this open descriptor (e.g. a memfd) instead; path names it only
    bool force = false;  // replace an existing (writable, regular) output file; otherwise refuse it
};

struct EmitStats {
    uint64_t file_bytes = 0;
    double seconds = 0;
};

Expected<EmitStats> emit_gguf(const std::string& path, const std::vector<GgufKV>& kvs,
                              const std::vector<PlannedTensor>& tensors, const EmitOptions& opt = {});

}  // namespace pelican
