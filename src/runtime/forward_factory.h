// Picks and creates the forward pass for a model on a device: the CPU's (a SequencePass on
// backend/cpu/cpu_executor.h) or a device backend's (runtime/device_backend.h; CUDA is a library
// loaded on first use). The rest of the runtime (Engine, Session, bench) never names a backend
// class.
//
//   PELICAN_TRY(cuda_usable());                          // why CUDA cannot be used, if it cannot
//   PELICAN_ASSIGN(auto gm, upload_gpu_model(model));    // weights on the GPU, shared by passes
//   PELICAN_ASSIGN(auto fwd, create_forward_pass(model, {.n_ctx = 4096}, Device::kCuda, gm));
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/forward.h"
#include "pelican/engine.h"
#include "runtime/device_backend.h"
#include "runtime/sequence_pass.h"

namespace pelican {

// True when pelican was built with the CUDA backend (libpelican_cuda.so exists for it).
bool cuda_built();
// Ok when CUDA can be used here; else the reason (built without CUDA, no GPU, no driver, the
// backend library cannot be loaded).
Status cuda_usable();
// "NVIDIA H200 (sm_90, 139.8 GiB)" for the GPU in use, or "" without CUDA.
std::string gpu_description();
// Ok when the GPU pass runs this model (architecture, weight types, GGUF-row weights).
Status gpu_supports(const Model& model);
// Uploads the model's weights to the GPU (logs GiB and seconds). Errors: CUDA unusable, model
// not supported, out of GPU memory.
Expected<std::shared_ptr<const DeviceModel>> upload_gpu_model(const Model& model);

// The CPU pass of a model (dense or hybrid): a SequencePass on a CPU executor; `tap` sees the
// executor's named intermediates (backend/cpu/cpu_executor.h). Errors: bad sizes, out of memory.
Expected<std::unique_ptr<SequencePass>> create_cpu_pass(const Model& model, const ForwardOptions& opt,
                                                        TapFn tap = {});

// A forward pass on `device` (kCpu or kCuda; kAuto is resolved by the caller). kCuda needs the
// weights from upload_gpu_model. Errors: bad sizes, out of memory, CUDA unavailable.
Expected<std::unique_ptr<ForwardPass>> create_forward_pass(const Model& model, const ForwardOptions& opt,
                                                           Device device,
                                                           const std::shared_ptr<const DeviceModel>& gpu);
// The same for an engine's model, device and GPU weights (session_device kAuto = the engine's).
Expected<std::unique_ptr<ForwardPass>> create_forward_pass(const Engine& engine, const ForwardOptions& opt,
                                                           Device session_device = Device::kAuto);

// The many-sequence executor of an engine's model on the engine's device (the CPU executor, or the
// device backend's on its uploaded weights). Errors: bad sizes, a model the device executor does not
// run yet, out of memory.
Expected<std::unique_ptr<Executor>> create_executor(const Engine& engine, const ExecutorOptions& opt);

}  // namespace pelican
