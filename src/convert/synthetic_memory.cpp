// write_synthetic_to_memory (convert/synthetic.h): plan_synthetic, then the GGUF written into a memfd.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "convert/synthetic.h"

namespace pelican {

Expected<MemoryModel> write_synthetic_to_memory(const SyntheticOptions& s, const ConvertOptions& opt) {
    PELICAN_ASSIGN(ConvertJob job, plan_synthetic(s, opt));
    const int fd = ::memfd_create("pelican-synthetic", 0);
    if (fd < 0) return make_error("cannot create an in-memory file (memfd_create): {}", std::strerror(errno));
    MemoryModel m{fd, fmt::format("/proc/self/fd/{}", fd)};
    EmitOptions e = opt.emit;
    e.fd = fd;
    auto st = write_job(job, fmt::format("synthetic {} model in memory", s.arch), e);
    if (!st.ok()) {
        ::close(fd);
        return make_error("{} (writing the synthetic model into memory: is there enough RAM?)",
                          st.error().message);
    }
    return m;
}

}  // namespace pelican
