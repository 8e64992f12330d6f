// cpu::gated_delta_rule (deltanet_cpu.h): the value heads over the pool, each through the AVX-512 build of
// deltanet_kernels.h when active, else its portable build.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/deltanet_cpu.h"
#include "backend/cpu/deltanet_kernels.h"

namespace pelican::cpu {

void gated_delta_rule(const float* q, const float* k, const float* v, const float* g, const float* beta,
                      int64_t n_tok, const DeltaNetShape& s, float* state, float* out, bool chunked,
                      ThreadPool& pool, const float* state_in) {
    if (state_in == state) state_in = nullptr;
    if (n_tok <= 0 && state_in) std::copy(state_in, state_in + s.state_floats(), state);
    if (n_tok <= 0) return;
    const int nk = s.n_k_heads, nv = s.n_v_heads, dk = s.d_k, dv = s.d_v;
    if (nk <= 0 || nv % nk != 0 || dk <= 0 || dv <= 0 || dv > 512)
        throw std::invalid_argument("gated_delta_rule: unsupported head shape");
    const bool avx512 = active_isa() == Isa::kAvx512;
    const int64_t scratch_floats = detail::dn_scratch_floats(dk, dv);
    pool.parallel_for(nv, [&](int64_t hv, int) {
        const int h = static_cast<int>(hv);
        detail::DnHead d;
        d.q = q + int64_t{s.key_head(h)} * dk;
        d.k = k + int64_t{s.key_head(h)} * dk;
        d.qk_stride = int64_t{nk} * dk;
        d.v = v + int64_t{h} * dv;
        d.v_stride = int64_t{nv} * dv;
        d.g = g + h;
        d.beta = beta + h;
        d.gb_stride = nv;
        d.out = out + int64_t{h} * dv;
        d.out_stride = int64_t{nv} * dv;
        d.S = state + int64_t{h} * dk * dv;
        if (state_in) {
            const float* src = state_in + int64_t{h} * dk * dv;
            if (chunked) {  // the chunked form updates in place: start from a copy
                for (int64_t i = 0; i < int64_t{dk} * dv; ++i) d.S[i] = src[i];
            } else {
                d.S_in = src;
            }
        }
        d.dk = dk;
        d.dv = dv;
        d.n_tok = n_tok;
        if (!chunked) {
            if (avx512)
                detail::dn_recurrent_head_avx512(d);
            else
                detail::dn_recurrent_head(d);
            return;
        }
        thread_local std::vector<float> scratch;
        if (static_cast<int64_t>(scratch.size()) < scratch_floats)
            scratch.resize(static_cast<size_t>(scratch_floats));
        if (avx512)
            detail::dn_chunked_head_avx512(d, scratch.data());
        else
            detail::dn_chunked_head(d, scratch.data());
    });
}

}  // namespace pelican::cpu
