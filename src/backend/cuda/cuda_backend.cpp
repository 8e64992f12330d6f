// libpelican_cuda.so's entry point: the CUDA backend behind runtime/device_backend.h.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/cuda_hybrid_forward.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/gpu_model.h"
#include "model/model.h"
#include "runtime/device_backend.h"

namespace pelican::cuda {
namespace {

class CudaBackend final : public DeviceBackend {
public:
    Status usable() override {
        int n = 0;
        const cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return make_error("no usable CUDA device ({}: {})", cudaGetErrorName(e), cudaGetErrorString(e));
        }
        if (n == 0) return make_error("no usable CUDA device (the driver sees no GPU)");
        return {};
    }

    std::string description() override {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess) {
            cudaGetLastError();
            return {};
        }
        return device_description(dev);
    }

    Status supports(const Model& model) override { return gpu_supports_model(model); }

    Expected<std::shared_ptr<const DeviceModel>> upload(const Model& model) override {
        PELICAN_ASSIGN(std::unique_ptr<GpuModel> gm, GpuModel::upload(model));
        return std::shared_ptr<const DeviceModel>(std::move(gm));
    }

    Expected<std::unique_ptr<ForwardPass>> create_forward(const std::shared_ptr<const DeviceModel>& w,
                                                          const ForwardOptions& opt) override {
        auto gm = std::dynamic_pointer_cast<const GpuModel>(w);
        if (!gm) return make_error("CUDA forward pass: the weights were uploaded by another backend");
        // The Llama-family pass when every layer is {attention, SwiGLU} with plain norms, else the pass of
        // the gated attention / Gated DeltaNet stack.
        if (!gm->model().hparams().uniform_attention()) {
            PELICAN_ASSIGN(std::unique_ptr<CudaHybridForward> h, CudaHybridForward::create(gm, opt));
            return std::unique_ptr<ForwardPass>(std::move(h));
        }
        PELICAN_ASSIGN(std::unique_ptr<CudaForward> f, CudaForward::create(gm, opt));
        return std::unique_ptr<ForwardPass>(std::move(f));
    }

    Expected<std::unique_ptr<Executor>> create_executor(const std::shared_ptr<const DeviceModel>& w,
                                                        const ExecutorOptions& opt) override {
        auto gm = std::dynamic_pointer_cast<const GpuModel>(w);
        if (!gm) return make_error("CUDA executor: the weights were uploaded by another backend");
        CudaExecutorOptions o;
        o.max_batch_tokens = opt.max_batch_tokens;
        o.max_seqs = opt.max_seqs;
        o.max_seq_tokens = opt.max_seq_tokens;
        PELICAN_ASSIGN(std::unique_ptr<CudaExecutor> e, CudaExecutor::create(std::move(gm), o));
        return std::unique_ptr<Executor>(std::move(e));
    }

    double copy_bandwidth_gbps(size_t bytes, int passes) override {
        return measure_copy_bandwidth_gbps(bytes, passes);
    }
};

}  // namespace
}  // namespace pelican::cuda

extern "C" __attribute__((visibility("default"))) pelican::DeviceBackend* pelican_cuda_backend_v1() {
    static pelican::cuda::CudaBackend backend;
    return &backend;
}
