// core/philox.h: Philox4x32-10 against Random123's known-answer vectors, and the sampler's uniform
// sample_uniform(seed, counter): a pure function, in [0, 1) on a 2^-24 grid, every input bit used,
// uniform (chi-square over bins, per-bit balance), independent consecutive draws.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "core/philox.h"

namespace pelican {
namespace {

bool same(const Philox4x32& a, const Philox4x32& b) {
    for (int i = 0; i < 4; ++i)
        if (a.v[i] != b.v[i]) return false;
    return true;
}

// Random123 tests/kat_vectors, "philox4x32 10" lines: counter, key -> output.
constexpr Philox4x32 kZero = philox4x32_10({{0, 0, 0, 0}}, 0, 0);
static_assert(kZero.v[0] == 0x6627e8d5u && kZero.v[3] == 0x9b00dbd8u, "philox4x32_10 is constexpr");

TEST(Philox, KnownAnswers) {
    EXPECT_TRUE(
        same(philox4x32_10({{0, 0, 0, 0}}, 0, 0), {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}));
    EXPECT_TRUE(
        same(philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu),
             {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}));
    EXPECT_TRUE(
        same(philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u),
             {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}));
}

TEST(Philox, UniformIsTheTopBitsOfTheFirstWord) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{1234}, uint64_t{0x0123456789abcdefull}, ~uint64_t{1}})
        for (uint64_t c : {uint64_t{0}, uint64_t{7}, uint64_t{0xfffffffful}, uint64_t{0x100000000ull} + 3}) {
            const Philox4x32 r =
                philox4x32_10({{static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0, 0}},
                              static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
            EXPECT_EQ(sample_uniform(seed, c), static_cast<float>(r.v[0] >> 8) / 16777216.0f);
        }
}

TEST(Philox, DeterministicRangeAndGrid) {
    float lo = 1, hi = 0;
    for (uint64_t seed = 0; seed < 64; ++seed)
        for (uint64_t c = 0; c < 2000; ++c) {
            const float u = sample_uniform(seed * 0x9e3779b97f4a7c15ull, c);
            ASSERT_EQ(u, sample_uniform(seed * 0x9e3779b97f4a7c15ull, c));
            ASSERT_GE(u, 0.0f);
            ASSERT_LT(u, 1.0f);
            const double scaled = static_cast<double>(u) * 16777216.0;
            ASSERT_EQ(scaled, std::floor(scaled)) << "u is a multiple of 2^-24";
            lo = std::min(lo, u);
            hi = std::max(hi, u);
        }
    EXPECT_LT(lo, 1e-4f);
    EXPECT_GT(hi, 1 - 1e-4f);
}

TEST(Philox, EveryInputBitMatters) {
    // Flipping any one bit of the seed or of the counter changes the draw (a collision of two 24-bit
    // values has probability 2^-24 per pair; these 128 pairs are fixed, so the test is deterministic).
    const uint64_t seed = 0x243f6a8885a308d3ull, counter = 0x13198a2e03707344ull;
    const float u = sample_uniform(seed, counter);
    for (int b = 0; b < 64; ++b) {
        EXPECT_NE(sample_uniform(seed ^ (uint64_t{1} << b), counter), u) << "seed bit " << b;
        EXPECT_NE(sample_uniform(seed, counter ^ (uint64_t{1} << b)), u) << "counter bit " << b;
    }
    // Streams of nearby seeds are different sequences.
    std::set<uint32_t> firsts;
    for (uint64_t s = 0; s < 1000; ++s)
        firsts.insert(static_cast<uint32_t>(sample_uniform(s, 0) * 16777216.0f));
    EXPECT_GE(firsts.size(), 990u);
}

// Upper critical value of chi-square with df degrees of freedom at z standard deviations
// (Wilson-Hilferty); z = 4.75 is a one-sided tail of about 1e-6.
double chi2_critical(int df, double z = 4.75) {
    const double a = 2.0 / (9.0 * df);
    return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

TEST(Philox, Uniformity) {
    // One stream (consecutive counters, what one sequence draws) and one draw per seed across seeds
    // (what a batch of fresh sequences draws): 1024 equal bins, each bit of the 24 balanced, and
    // pairs of consecutive draws uniform on a 32 x 32 grid.
    constexpr int kN = 1 << 20, kBins = 1024;
    for (int mode = 0; mode < 2; ++mode) {
        SCOPED_TRACE(mode == 0 ? "consecutive counters" : "consecutive seeds");
        std::vector<int64_t> bins(kBins, 0), pairs(kBins, 0);
        int64_t ones[24] = {};
        double sum = 0;
        int prev = -1;
        for (int i = 0; i < kN; ++i) {
            const float u = mode == 0 ? sample_uniform(42, static_cast<uint64_t>(i))
                                      : sample_uniform(static_cast<uint64_t>(i), 5);
            sum += u;
            ++bins[static_cast<int>(u * kBins)];
            const uint32_t bits = static_cast<uint32_t>(u * 16777216.0f);
            for (int b = 0; b < 24; ++b) ones[b] += (bits >> b) & 1;
            const int cell = static_cast<int>(u * 32);
            if (prev >= 0 && i % 2 == 1) ++pairs[prev * 32 + cell];
            prev = cell;
        }
        EXPECT_NEAR(sum / kN, 0.5, 5 * std::sqrt(1.0 / 12 / kN));
        const auto chi2 = [](const std::vector<int64_t>& c, double e) {
            double x = 0;
            for (int64_t v : c) x += (v - e) * (v - e) / e;
            return x;
        };
        EXPECT_LT(chi2(bins, static_cast<double>(kN) / kBins), chi2_critical(kBins - 1));
        EXPECT_LT(chi2(pairs, static_cast<double>(kN / 2) / kBins), chi2_critical(kBins - 1));
        const double sigma = std::sqrt(kN * 0.25);
        for (int b = 0; b < 24; ++b) EXPECT_LE(std::fabs(ones[b] - kN / 2.0), 5 * sigma) << "bit " << b;
    }
}

}  // namespace
}  // namespace pelican
