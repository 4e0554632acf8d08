#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator, so any element's random number is computed directly from
// (key, counter) in any order, on any backend, with the same result.
//
// gradcomp's convention (docs/design.md): key = {seed, low 32 bits of step}, counter =
// {q low, q high, chunk id, stream}, where q numbers the values of a chunk in blocks (of 4 for
// 32-bit numbers: philox_at; of 8 for the 16-bit numbers of stochastic rounding:
// random16_at) and the stream separates independent uses within a step.

#include <cstddef>
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
  permutation = 3, // round keys of the random-k permutation (core/permutation.hpp)
  transform = 4,   // the signs of the randomized Hadamard transform (transform/hadamard.hpp)
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

// The random number of value m for stochastic rounding: 16 random bits, in the high half
// (so unit_float() of it is a multiple of 2^-16). One Philox call serves 8 values: value m
// takes half m % 2 (0: low) of word (m / 2) % 4 of the call with counter m / 8.
GRADCOMP_HD inline std::uint32_t random16_at(std::uint32_t seed, std::uint64_t step, std::uint32_t chunk,
                                             random_stream stream, std::uint64_t m) {
  const std::uint64_t q = m / 8;
  const philox_u32x4 r = philox4x32_10({{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), chunk,
                                         static_cast<std::uint32_t>(stream)}},
                                       seed, static_cast<std::uint32_t>(step));
  const std::uint32_t w = r.v[(m / 2) % 4];
  return m % 2 ? (w & 0xffff0000u) : (w << 16);
}

// Host batch form of random16_at: out[i] = random16_at(seed, step, chunk, stream, m0 + i) for
// i < n, where m0 is a multiple of 8; out must hold n rounded up to a multiple of 64 values.
// Eight generators run side by side as plain arrays, which compilers turn into vector code
// (inlined, so it gets the instruction set of the loop that calls it: cpu/dispatch.hpp).
GRADCOMP_INLINE void random16_fill(std::uint32_t* out, std::uint64_t m0, std::size_t n, std::uint32_t seed,
                                   std::uint64_t step, std::uint32_t chunk, random_stream stream) {
  constexpr std::size_t lanes = 8;
  constexpr std::uint32_t m0k = 0xD2511F53u, m1k = 0xCD9E8D57u, w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  const std::uint64_t q0 = m0 / 8;
  for (std::size_t b = 0; 8 * b < n; b += lanes) {
    std::uint32_t c0[lanes], c1[lanes], c2[lanes], c3[lanes];
    for (std::size_t l = 0; l < lanes; ++l) {
      const std::uint64_t q = q0 + b + l;
      c0[l] = static_cast<std::uint32_t>(q);
      c1[l] = static_cast<std::uint32_t>(q >> 32);
      c2[l] = chunk;
      c3[l] = static_cast<std::uint32_t>(stream);
    }
    std::uint32_t k0 = seed, k1 = static_cast<std::uint32_t>(step);
    for (int round = 0; round < 10; ++round) {
      for (std::size_t l = 0; l < lanes; ++l) {
        const std::uint64_t p0 = static_cast<std::uint64_t>(m0k) * c0[l];
        const std::uint64_t p1 = static_cast<std::uint64_t>(m1k) * c2[l];
        const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
        const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
        c1[l] = static_cast<std::uint32_t>(p1);
        c3[l] = static_cast<std::uint32_t>(p0);
        c0[l] = n0;
        c2[l] = n2;
      }
      k0 += w0;
      k1 += w1;
    }
    for (std::size_t l = 0; l < lanes; ++l) {
      const std::uint32_t words[4] = {c0[l], c1[l], c2[l], c3[l]};
      for (std::size_t w = 0; w < 4; ++w) {
        out[8 * (b + l) + 2 * w] = words[w] << 16;
        out[8 * (b + l) + 2 * w + 1] = words[w] & 0xffff0000u;
      }
    }
  }
}

// The 24 high bits of u as a float in [0, 1); exact, no rounding involved.
GRADCOMP_HD inline float unit_float(std::uint32_t u) { return static_cast<float>(u >> 8) * 5.9604644775390625e-8f; }

}  // namespace gradcomp
