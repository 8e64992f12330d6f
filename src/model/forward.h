// Options of a forward pass over one sequence (model/forward_pass.h) and the tap through which
// eval and debugging see named intermediates. The dense block itself runs on an Executor
// (runtime/executor.h; the CPU's is backend/cpu/cpu_executor.h, which lists the tap names).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/forward_pass.h"
#include "model/model.h"

namespace pelican {

struct TapInfo {
    std::string_view name;  // see the executor's list
    int layer;              // -1 outside the layers
    int64_t pos0;           // absolute position of row 0
    int64_t n_rows;         // tokens in this chunk
    int64_t width;          // floats per row
    const float* data;      // [n_rows, width]
};
using TapFn = std::function<void(const TapInfo&)>;

struct ForwardOptions {
    int64_t n_ctx = 0;      // KV cache positions (required, > 0)
    int64_t n_batch = 512;  // most tokens per internal step (clamped to n_ctx)
};

}  // namespace pelican
