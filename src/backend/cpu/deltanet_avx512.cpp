// The delta-rule kernels of deltanet_kernels.h compiled for AVX-512 (deltanet_cpu.h).
#include "backend/cpu/deltanet_kernels.h"

// Declared in deltanet_cpu.h (not included here: it pulls in headers with inline templates).

namespace pelican::cpu::detail {

void dn_recurrent_head_avx512(const DnHead& h) { dn_recurrent_head(h); }
void dn_chunked_head_avx512(const DnHead& h, float* scratch) { dn_chunked_head(h, scratch); }

}  // namespace pelican::cpu::detail
