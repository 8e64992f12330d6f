// Forward-pass selection (runtime/forward_factory.h).
#include "runtime/forward_factory.h"

#include "model/hybrid_forward.h"
#include "model/model.h"

#ifdef PELICAN_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/cuda_hybrid_forward.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/gpu_model.h"
#endif

namespace pelican {

bool cuda_built() {
#ifdef PELICAN_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

Status cuda_usable() {
#ifdef PELICAN_HAVE_CUDA
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return make_error("no usable CUDA device ({}: {})", cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (n == 0) return make_error("no usable CUDA device (the driver sees no GPU)");
    return {};
#else
    return make_error("this pelican was built without the CUDA backend (nvcc was not found at build time)");
#endif
}

std::string gpu_description() {
#ifdef PELICAN_HAVE_CUDA
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return {};
    }
    return cuda::device_description(dev);
#else
    return {};
#endif
}

Status gpu_supports(const Model& model) {
#ifdef PELICAN_HAVE_CUDA
    return cuda::gpu_supports_model(model);
#else
    (void)model;
    return cuda_usable();
#endif
}

Expected<std::shared_ptr<const cuda::GpuModel>> upload_gpu_model(const Model& model) {
#ifdef PELICAN_HAVE_CUDA
    PELICAN_TRY(cuda_usable());
    PELICAN_ASSIGN(std::unique_ptr<cuda::GpuModel> gm, cuda::GpuModel::upload(model));
    return std::shared_ptr<const cuda::GpuModel>(std::move(gm));
#else
    (void)model;
    return cuda_usable().take_error();
#endif
}

Expected<std::unique_ptr<ForwardPass>> create_forward_pass(const Model& model, const ForwardOptions& opt,
                                                           Device device,
                                                           const std::shared_ptr<const cuda::GpuModel>& gpu) {
    switch (device) {
        case Device::kCpu: {
            // Architecture-specific CPU passes branch here before the dense block: the hybrid
            // Qwen3.5 stack (Gated DeltaNet + gated attention, model/hybrid_forward.h).
            if (model.arch().hybrid) return create_hybrid_forward(model, opt);
            PELICAN_ASSIGN(std::unique_ptr<Forward> f, Forward::create(model, opt));
            return std::unique_ptr<ForwardPass>(std::move(f));
        }
        case Device::kCuda: {
#ifdef PELICAN_HAVE_CUDA
            if (!gpu) return make_error("CUDA forward pass: the model's weights are not on the GPU");
            if (gpu->hybrid()) {
                PELICAN_ASSIGN(std::unique_ptr<cuda::CudaHybridForward> h,
                               cuda::CudaHybridForward::create(gpu, opt));
                return std::unique_ptr<ForwardPass>(std::move(h));
            }
            PELICAN_ASSIGN(std::unique_ptr<cuda::CudaForward> f, cuda::CudaForward::create(gpu, opt));
            return std::unique_ptr<ForwardPass>(std::move(f));
#else
            (void)gpu;
            return cuda_usable().take_error();
#endif
        }
        case Device::kAuto:
            break;
    }
    return make_error("create_forward_pass: resolve device auto first");
}

Expected<std::unique_ptr<ForwardPass>> create_forward_pass(const Engine& engine, const ForwardOptions& opt,
                                                           Device session_device) {
    Device d = session_device == Device::kAuto ? engine.device() : session_device;
    if (d == Device::kCuda && engine.device() != Device::kCuda)
        return make_error(
            "a CUDA session needs an engine loaded for CUDA (EngineOptions.device = cuda or auto on a "
            "machine "
            "with a GPU); this engine runs on the CPU");
    return create_forward_pass(engine.model(), opt, d, engine.gpu_model());
}

}  // namespace pelican
