#pragma once
// Rounding a float to an integer-valued float, in plain IEEE arithmetic: the same bits on
// every backend, independent of the rounding-mode register and of library calls, and
// vectorisable. Valid for |y| < 2^22 (quantizers round scaled values of at most a few
// hundred); needs IEEE semantics (no fast-math, which could fold the additions away).

#include <cstdint>

#include "config.hpp"
#include "philox.hpp"

namespace gradcomp {

// y rounded to the nearest integer, ties to even: adding 1.5 * 2^23 leaves no fraction bits.
GRADCOMP_HD inline float round_even(float y) {
  constexpr float shift = 12582912.0f;
  return (y + shift) - shift;
}

// The largest integer <= y.
GRADCOMP_HD inline float floor_small(float y) {
  const float r = round_even(y);
  return r > y ? r - 1.0f : r;
}

// floor(y) + 1 with probability y - floor(y), else floor(y), drawn with a uniform 32-bit
// `random`. Unbiased to within 2^-24: the fraction is compared with the 24-bit unit_float.
GRADCOMP_HD inline float round_stochastic(float y, std::uint32_t random) {
  const float f = floor_small(y);
  return f + (unit_float(random) < y - f ? 1.0f : 0.0f);
}

}  // namespace gradcomp
