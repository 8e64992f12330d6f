// Forward-pass selection (runtime/forward_factory.h).
#include "runtime/forward_factory.h"

#include <algorithm>

#include "backend/cpu/cpu_executor.h"
#include "model/model.h"
#include "runtime/sequence_pass.h"

namespace pelican {

bool cuda_built() {
#ifdef PELICAN_CUDA_BACKEND
    return true;
#else
    return false;
#endif
}

Status cuda_usable() {
    PELICAN_ASSIGN(DeviceBackend * b, cuda_backend());
    return b->usable();
}

std::string gpu_description() {
    auto b = cuda_backend();
    return b ? (*b)->description() : std::string();
}

Status gpu_supports(const Model& model) {
    PELICAN_ASSIGN(DeviceBackend * b, cuda_backend());
    return b->supports(model);
}

Expected<std::shared_ptr<const DeviceModel>> upload_gpu_model(const Model& model) {
    PELICAN_ASSIGN(DeviceBackend * b, cuda_backend());
    PELICAN_TRY(b->usable());
    return b->upload(model);
}

Expected<std::unique_ptr<SequencePass>> create_cpu_pass(const Model& model, const ForwardOptions& opt,
                                                        TapFn tap) {
    if (opt.n_ctx <= 0) return make_error("context size must be positive, got {}", opt.n_ctx);
    if (opt.n_batch <= 0) return make_error("batch size must be positive, got {}", opt.n_batch);
    PELICAN_ASSIGN(std::unique_ptr<cpu::CpuExecutor> exec,
                   cpu::CpuExecutor::create(
                       model, {.max_batch_tokens = std::min(opt.n_batch, opt.n_ctx), .tap = std::move(tap)}));
    return SequencePass::create(std::move(exec), opt);
}

Expected<std::unique_ptr<ForwardPass>> create_forward_pass(const Model& model, const ForwardOptions& opt,
                                                           Device device,
                                                           const std::shared_ptr<const DeviceModel>& gpu) {
    switch (device) {
        case Device::kCpu: {
            // Every architecture, dense and hybrid, runs on the CPU executor.
            PELICAN_ASSIGN(std::unique_ptr<SequencePass> p, create_cpu_pass(model, opt));
            return std::unique_ptr<ForwardPass>(std::move(p));
        }
        case Device::kCuda: {
            PELICAN_ASSIGN(DeviceBackend * b, cuda_backend());
            if (!gpu) return make_error("CUDA forward pass: the model's weights are not on the GPU");
            return b->create_forward(gpu, opt);
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
            "machine with a GPU); this engine runs on the CPU");
    return create_forward_pass(engine.model(), opt, d, engine.gpu_model());
}

Expected<std::unique_ptr<Executor>> create_executor(const Engine& engine, const ExecutorOptions& opt) {
    if (opt.max_batch_tokens <= 0 || opt.max_seqs <= 0 || opt.max_seq_tokens <= 0)
        return make_error("executor: {} rows per step, {} sequences of {} tokens", opt.max_batch_tokens,
                          opt.max_seqs, opt.max_seq_tokens);
    if (engine.device() == Device::kCuda) {
        PELICAN_ASSIGN(DeviceBackend * b, cuda_backend());
        if (!engine.gpu_model()) return make_error("CUDA executor: the model's weights are not on the GPU");
        return b->create_executor(engine.gpu_model(), opt);
    }
    PELICAN_ASSIGN(std::unique_ptr<cpu::CpuExecutor> e,
                   cpu::CpuExecutor::create(engine.model(), {.max_batch_tokens = opt.max_batch_tokens}));
    return std::unique_ptr<Executor>(std::move(e));
}

}  // namespace pelican
