// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC11;
// the Random123 reference): a counter-based RNG, a pure function of (key, counter) built from 32-bit
// multiplies and xors, so the host and the device compute the same bits. Host- and device-includable.
//
// The sampler's stream: the draw number `counter` of a sequence with seed `seed` is
//   u = sample_uniform(seed, counter)   in [0, 1), a multiple of 2^-24 (exact in fp32)
// runtime/sampler.h uses it on the CPU, backend/cuda/sampling_batch.h on the device; no state is
// carried from one draw to the next, so a device kernel needs only (seed, counter) per row.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PELICAN_HOST_DEVICE __host__ __device__
#else
#define PELICAN_HOST_DEVICE
#endif

namespace pelican {

struct Philox4x32 {
    uint32_t v[4];
};

// Philox4x32 with 10 rounds: counter ctr, key (k0, k1).
PELICAN_HOST_DEVICE constexpr Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
    constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (Weyl) increments
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += kW0;
            k1 += kW1;
        }
        const uint64_t p0 = uint64_t{kM0} * ctr.v[0];
        const uint64_t p1 = uint64_t{kM1} * ctr.v[2];
        ctr = Philox4x32{{static_cast<uint32_t>(p1 >> 32) ^ ctr.v[1] ^ k0, static_cast<uint32_t>(p1),
                          static_cast<uint32_t>(p0 >> 32) ^ ctr.v[3] ^ k1, static_cast<uint32_t>(p0)}};
    }
    return ctr;
}

// The uniform of draw `counter` of the stream `seed`: the top 24 bits of the first output word of
// Philox4x32-10 with key = seed (low word first) and counter = (counter low, counter high, 0, 0).
// Words 2 and 3 of the counter stay 0, free for other streams of the same seed.
PELICAN_HOST_DEVICE constexpr float sample_uniform(uint64_t seed, uint64_t counter) {
    const Philox4x32 r = philox4x32_10(
        Philox4x32{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u}},
        static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    return static_cast<float>(r.v[0] >> 8) * 0x1.0p-24f;
}

}  // namespace pelican
