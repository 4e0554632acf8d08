#pragma once
// Rounding a float to an integer-valued float, in plain IEEE arithmetic: the same bits on
// every backend, independent of the rounding-mode register and of library calls, and
// vectorisable. Valid for |y| < 2^22 (quantizers round scaled values of at most a few
// hundred); needs IEEE semantics (no fast-math, which could fold the additions away).

#include <cstdint>

#include "bits.hpp"
#include "config.hpp"
#include "philox.hpp"

namespace gradcomp {
GRADCOMP_PRECISE_BEGIN

// 1.5 * 2^23: adding it to |y| < 2^22 leaves no fraction bits, and the sum's low mantissa
// bits hold the rounded integer (two's complement, offset from the constant's bits).
inline constexpr float round_shift = 12582912.0f;

// y rounded to the nearest integer, ties to even.
GRADCOMP_HD inline float round_even(float y) { return (y + round_shift) - round_shift; }

// round_even(y) as an integer, read off the sum's bits: no float-to-int conversion.
GRADCOMP_HD inline std::int32_t round_even_int(float y) {
  return static_cast<std::int32_t>(float_bits(y + round_shift) - float_bits(round_shift));
}

// a * b rounded once, never fused into a following addition: on the device __fmul_rn is
// exempt from FMA contraction whatever --fmad says (host builds use -ffp-contract=off).
GRADCOMP_HD inline float mul_rn(float a, float b) {
#if GRADCOMP_DEVICE_CODE
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// 1.0f if c, else 0.0f, selected as bits: compilers otherwise turn `x - (c ? 1 : 0)` into a
// conditional subtraction, which they may not vectorise under IEEE exception semantics.
GRADCOMP_HD inline float one_if(bool c) { return bits_float(detail::select(c, 0x3f800000u, 0u)); }

// The largest integer <= y.
GRADCOMP_HD inline float floor_small(float y) {
  const float r = round_even(y);
  return r - one_if(r > y);
}

// floor(y) + 1 with probability y - floor(y), else floor(y), drawn with a uniform `random`
// (from random16_at: 16 random bits). Unbiased to within 2^-16: the fraction is compared with
// unit_float(random), a multiple of 2^-16.
GRADCOMP_HD inline float round_stochastic(float y, std::uint32_t random) {
  const float f = floor_small(y);
  return f + one_if(unit_float(random) < y - f);
}

// c ? a : b on the bits, for floats computed unconditionally (a branch-free select).
GRADCOMP_HD inline float select_float(bool c, float a, float b) {
  return bits_float(detail::select(c, float_bits(a), float_bits(b)));
}

// y limited to [lo, hi]; NaN gives lo. Selects on bits, so that a compiler does not move the
// arithmetic that follows into branches.
GRADCOMP_HD inline float clamp_float(float y, float lo, float hi) {
  y = select_float(y >= lo, y, lo);
  return select_float(y <= hi, y, hi);
}

GRADCOMP_PRECISE_END
}  // namespace gradcomp
