// The boundary between the engine and a device backend that lives in its own shared library,
// loaded only when it is used (as llama.cpp's GGML_BACKEND_DL): the CUDA backend is
// libpelican_cuda.so, next to libpelican.so, so a CPU run, `--help` included, never maps the CUDA
// runtime or cuBLAS (~200 MB of RSS).
//
//   PELICAN_ASSIGN(DeviceBackend* cuda, cuda_backend());   // dlopen on first use; the reason if not
//   PELICAN_TRY(cuda->usable());
//   PELICAN_ASSIGN(auto weights, cuda->upload(model));      // shared by the passes of an engine
//   PELICAN_ASSIGN(auto pass, cuda->create_forward(weights, {.n_ctx = 4096}));
//
// The library exports one C function, kCudaBackendEntry, returning its DeviceBackend (a static
// object: never freed; the library is never unloaded). It is built from the same sources and
// compiler as the engine, so C++ types cross the boundary as they are.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"
#include "model/device_model.h"
#include "model/forward.h"
#include "runtime/executor.h"

namespace pelican {

class Model;

// Bounds a device executor is made for (its scratch and staging are sized by them).
struct ExecutorOptions {
    int64_t max_batch_tokens = 512;  // most rows per step
    int32_t max_seqs = 256;          // most sequences of one memory
    int64_t max_seq_tokens = 4096;   // most positions of one sequence
};

class DeviceBackend {
public:
    virtual ~DeviceBackend() = default;
    // Ok when a device can be used here; else the reason (no driver, no GPU).
    virtual Status usable() = 0;
    // "NVIDIA H200 (sm_90, 139.8 GiB)" for the device in use, or "".
    virtual std::string description() = 0;
    // Ok when this backend runs the model (architecture, weight types, layout).
    virtual Status supports(const Model& model) = 0;
    // Uploads the model's weights (logs GiB and seconds).
    virtual Expected<std::shared_ptr<const DeviceModel>> upload(const Model& model) = 0;
    virtual Expected<std::unique_ptr<ForwardPass>> create_forward(const std::shared_ptr<const DeviceModel>& w,
                                                                  const ForwardOptions& opt) = 0;
    // The many-sequence executor (runtime/executor.h) on these weights. Errors: a model the
    // executor does not run yet, bad sizes, out of device memory.
    virtual Expected<std::unique_ptr<Executor>> create_executor(const std::shared_ptr<const DeviceModel>& w,
                                                                const ExecutorOptions& opt) = 0;
    // The device's copy bandwidth in GB/s (read + write bytes of a device-to-device copy of `bytes`,
    // median of `passes`); <= 0 when it cannot be measured.
    virtual double copy_bandwidth_gbps(size_t bytes, int passes) = 0;
};

// The exported entry point's name and type.
inline constexpr const char* kCudaBackendEntry = "pelican_cuda_backend_v1";
using BackendEntry = DeviceBackend* (*)();

// The CUDA backend: loads libpelican_cuda.so on the first call (from the folder that holds
// libpelican.so, else the loader's search path). Errors say why: pelican was built without it,
// the library or the CUDA runtime it needs cannot be loaded, or no NVIDIA device exists on this
// machine (checked first, without loading anything: /dev/nvidiactl or /proc/driver/nvidia).
Expected<DeviceBackend*> cuda_backend();
// True once libpelican_cuda.so has been loaded into this process.
bool cuda_backend_loaded();

}  // namespace pelican
