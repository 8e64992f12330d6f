// Loading device backends at run time (runtime/device_backend.h).
#include "runtime/device_backend.h"

#include <dlfcn.h>

#include <atomic>
#include <filesystem>
#include <mutex>

namespace pelican {
namespace {

std::atomic<bool> g_cuda_loaded{false};

#ifdef PELICAN_CUDA_BACKEND
constexpr const char* kCudaLibrary = "libpelican_cuda.so";

// The folder holding the library this function is in (libpelican.so), or "".
std::filesystem::path own_folder() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&own_folder), &info) == 0 || !info.dli_fname) return {};
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::canonical(info.dli_fname, ec);
    return ec ? std::filesystem::path() : p.parent_path();
}

bool nvidia_device_present() {
    std::error_code ec;
    return std::filesystem::exists("/dev/nvidiactl", ec) ||
           std::filesystem::exists("/proc/driver/nvidia", ec);
}

Expected<DeviceBackend*> load_cuda() {
    if (!nvidia_device_present())
        return make_error("no NVIDIA GPU on this machine (no /dev/nvidiactl, no /proc/driver/nvidia)");
    const std::filesystem::path next_to = own_folder() / kCudaLibrary;
    std::error_code ec;
    const std::string path =
        std::filesystem::exists(next_to, ec) ? next_to.string() : std::string(kCudaLibrary);
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char* why = dlerror();
        return make_error("the CUDA backend {} could not be loaded: {}", path, why ? why : "unknown reason");
    }
    auto entry = reinterpret_cast<BackendEntry>(dlsym(h, kCudaBackendEntry));
    if (!entry)
        return make_error("{} has no entry point {} (a library from another build?)", path,
                          kCudaBackendEntry);
    DeviceBackend* b = entry();
    if (!b) return make_error("{}: the CUDA backend did not start", path);
    g_cuda_loaded.store(true);
    return b;
}
#else
Expected<DeviceBackend*> load_cuda() {
    return make_error("this pelican was built without the CUDA backend (configure with -DPELICAN_CUDA=ON)");
}
#endif

}  // namespace

Expected<DeviceBackend*> cuda_backend() {
    static std::once_flag once;
    static Expected<DeviceBackend*> result = make_error("not loaded");
    std::call_once(once, [] { result = load_cuda(); });
    return result;
}

bool cuda_backend_loaded() { return g_cuda_loaded.load(); }

}  // namespace pelican
