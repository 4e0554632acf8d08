#pragma once
// The seeded randomized Hadamard transform (THC; the rotations of QuaRot-style quantizers): per
// block of b = 2^m values (transform/blocks.hpp), y = 2^-ceil(m/2) H D x, with D a diagonal of
// random signs and H the Walsh-Hadamard matrix (entries +-1, H H = b I), computed by the
// butterfly (m passes of sums and differences, b log2 b additions, no matrix). The inverse is
// x = 2^-floor(m/2) D H y. Both scales are powers of two, so they round nothing: the inverse
// returns x to the rounding of the butterflies. The transform is orthogonal up to the factor
// 2^(m/2 - ceil(m/2)) (1, or 1/sqrt(2) for odd m), which a quantizer's per-group scale absorbs.
//
// It spreads a block's energy evenly: an outlier becomes b values of magnitude |x| / sqrt(b),
// so a group scale set by max |y| wastes far fewer levels on heavy-tailed data.
//
// The signs come from Philox (core/philox.hpp) with key (seed, step) and counter (element
// index, chunk, stream transform): every rank and both backends draw the same D for a chunk of
// a step. The arithmetic is adds and subtracts in a fixed order (GRADCOMP_HD): the same bits
// on the host and the device.

#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/config.hpp"
#include "../core/philox.hpp"
#include "blocks.hpp"

namespace gradcomp::transform {
GRADCOMP_PRECISE_BEGIN

inline constexpr std::uint32_t transform_stream = 4;  // the Philox stream of the signs

// The sign of element j of a chunk: bit j % 32 of Philox word j / 32.
GRADCOMP_HD inline bool negated(std::uint32_t seed, std::uint64_t step, std::uint32_t chunk, std::uint64_t j) {
  const std::uint32_t word = philox_at(seed, step, chunk, static_cast<random_stream>(transform_stream), j / 32);
  return ((word >> (j % 32)) & 1u) != 0;
}

// 2^-e as a float (e < 64).
GRADCOMP_HD inline float pow2_neg(unsigned e) { return bits_float(static_cast<std::uint32_t>(127 - e) << 23); }

GRADCOMP_HD inline unsigned log2_of(std::size_t b) {
  unsigned m = 0;
  while ((std::size_t{1} << m) < b) ++m;
  return m;
}

// In place: the unnormalised Walsh-Hadamard transform of x[0, b), b a power of two.
GRADCOMP_HD inline void walsh_hadamard(float* x, std::size_t b) {
  for (std::size_t h = 1; h < b; h <<= 1)
    for (std::size_t i = 0; i < b; i += 2 * h)
      for (std::size_t j = i; j < i + h; ++j) {
        const float u = x[j], v = x[j + h];
        x[j] = canonical_nan(u + v);
        x[j + h] = canonical_nan(u - v);
      }
}

struct hadamard {
  struct config {
    std::uint32_t block = 256;  // values per block: a power of two, 2 to 4096
    std::uint32_t seed = 0;     // the signs' key (with the step)
  };
  static constexpr bool valid_block(std::size_t b) { return is_power_of_two(b) && b >= 2 && b <= 4096; }

  // One block at `offset` of chunk `chunk` (b values at x), forward (y = s H D x) or inverse.
  GRADCOMP_HD static void forward_block(const config& c, std::uint64_t step, std::uint32_t chunk, std::size_t offset, float* x,
                                        std::size_t b) {
    for (std::size_t j = 0; j < b; ++j)
      if (negated(c.seed, step, chunk, offset + j)) x[j] = -x[j];
    walsh_hadamard(x, b);
    const float s = pow2_neg((log2_of(b) + 1) / 2);
    for (std::size_t j = 0; j < b; ++j) x[j] *= s;
  }
  GRADCOMP_HD static void inverse_block(const config& c, std::uint64_t step, std::uint32_t chunk, std::size_t offset, float* x,
                                        std::size_t b) {
    walsh_hadamard(x, b);
    const float s = pow2_neg(log2_of(b) / 2);
    for (std::size_t j = 0; j < b; ++j) {
      x[j] *= s;
      if (negated(c.seed, step, chunk, offset + j)) x[j] = -x[j];
    }
  }

  // A whole chunk of n values, in place (host; the device runs a block per thread group).
  static void forward(const config& c, std::uint64_t step, std::uint32_t chunk, float* x, std::size_t n) {
    for_each_block(n, c.block, [&](std::size_t at, std::size_t b) { forward_block(c, step, chunk, at, x + at, b); });
  }
  static void inverse(const config& c, std::uint64_t step, std::uint32_t chunk, float* x, std::size_t n) {
    for_each_block(n, c.block, [&](std::size_t at, std::size_t b) { inverse_block(c, step, chunk, at, x + at, b); });
  }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::transform
