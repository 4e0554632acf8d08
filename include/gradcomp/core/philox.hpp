#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator, so any element's random number is computed directly from
// (key, counter) in any order, on any backend, with the same result.
//
// gradcomp's convention (docs/design.md): key = {seed, low 32 bits of step}, counter =
// {m / 4 low, m / 4 high, chunk id, stream}; value m of a chunk takes lane m % 4 of the
// result, and the stream separates independent uses within a step.

#include <cstdint>

#include "config.hpp"

namespace gradcomp {

struct philox_u32x4 {
  std::uint32_t v[4];
};

namespace detail {
GRADCOMP_HD inline void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}
}  // namespace detail

GRADCOMP_HD inline philox_u32x4 philox4x32_10(philox_u32x4 ctr, std::uint32_t key0, std::uint32_t key1) {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    detail::mulhilo32(m0, ctr.v[0], hi0, lo0);
    detail::mulhilo32(m1, ctr.v[2], hi1, lo1);
    ctr = {{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    key0 += w0;
    key1 += w1;
  }
  return ctr;
}

enum class random_stream : std::uint32_t {
  quantizer = 1,   // stochastic rounding of the sent values
  sparsifier = 2,  // sampling and random selection
};

// The 32-bit random number of value m of a chunk (see the convention above).
GRADCOMP_HD inline std::uint32_t philox_at(std::uint32_t seed, std::uint64_t step, std::uint32_t chunk,
                                           random_stream stream, std::uint64_t m) {
  const std::uint64_t q = m / 4;
  const philox_u32x4 r = philox4x32_10({{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), chunk,
                                         static_cast<std::uint32_t>(stream)}},
                                       seed, static_cast<std::uint32_t>(step));
  return r.v[m % 4];
}

// The 24 high bits of u as a float in [0, 1); exact, no rounding involved.
GRADCOMP_HD inline float unit_float(std::uint32_t u) { return static_cast<float>(u >> 8) * 5.9604644775390625e-8f; }

}  // namespace gradcomp
