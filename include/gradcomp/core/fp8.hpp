#pragma once
// The two OCP 8-bit floating-point formats (OFP8, rev 1.0), as bit conversions to and from float.
//
// E4M3: bias 7, subnormals down to 2^-9, max finite 448, no infinities, NaN = S.1111.111.
// E5M2: bias 15, subnormals down to 2^-16, max finite 57344, IEEE-like infinities and NaNs.
//
// Encoding rounds to nearest, ties to even, and keeps subnormals (no flush).
// - E4M3 has no infinity, so a finite value whose rounded magnitude exceeds 448 saturates to
//   +-448 (0x7e / 0xfe) rather than becoming NaN. +-infinity is no finite value: it becomes
//   NaN with its sign (0x7f / 0xff), so an overflow upstream stays visible. NaN -> 0x7f / 0xff.
// - E5M2 overflows as IEEE round-to-nearest-even does: |x| >= 61440 (halfway from 57344 to
//   2^16) becomes infinity (0x7c / 0xfc); infinities stay infinities; NaN becomes the quiet
//   NaN 0x7e / 0xfe (sign kept, payload dropped).
// Decoding is exact. Every NaN code decodes to the canonical quiet NaN 0x7fc00000 whatever its
// sign, like canonical_nan() in bits.hpp.
//
// As in numeric.hpp, every case is computed and one selected, so loops over many values
// vectorise. Decoding uses integer operations only; encoding rounds subnormal results with
// one float addition whose operands and result are normal floats wherever the result
// matters (flush-to-zero and denormals-are-zero modes change no bit: tests run with them
// set), so host and device produce the same bits.

#include <cstddef>
#include <cstdint>

#include "bits.hpp"


namespace gradcomp {
GRADCOMP_PRECISE_BEGIN

inline constexpr float fp8_e4m3_max = 448.0f;
inline constexpr float fp8_e5m2_max = 57344.0f;

namespace detail {
// |x| (float bits a, sign cleared) rounded to nearest even in a small binary format with
// M mantissa bits and exponent bias B, as the code's magnitude bits. Exact for every finite
// |x| below the format's top binade boundary; above it the result runs past the format's
// codes and the caller replaces it (saturation or infinity). NaN/inf are the caller's, too.
template <unsigned M, unsigned B>
GRADCOMP_HD inline std::uint32_t small_float_magnitude(std::uint32_t a) {
  constexpr unsigned drop = 23u - M;  // float mantissa bits that do not fit
  // Normal: rebias the exponent (127 -> B) and round the dropped bits to even; a carry out of
  // the mantissa moves to the next exponent, as it should.
  const std::uint32_t normal =
      (a - ((127u - B) << 23) + ((1u << (drop - 1u)) - 1u) + ((a >> drop) & 1u)) >> drop;
  // Subnormal: the code is |x| / 2^(1 - B - M) rounded to even (a carry gives the smallest
  // normal code), read off |x| + C with C = 2^(24 - B - M), whose ulp is that step: the add
  // rounds (to nearest even, the default mode) and leaves the code in the low bits. A
  // flush-to-zero mode only touches |x| below 2^-126, which rounds to code 0 either way.
  static_assert(B + M <= 24);
  constexpr float c = static_cast<float>(1u << (24u - B - M));
  const std::uint32_t magnitude = float_bits(bits_float(a) + c) - float_bits(c);
  return select(a >= ((128u - B) << 23), normal, magnitude);  // normal from 2^(1 - B) up
}
}  // namespace detail

GRADCOMP_HD inline std::uint8_t fp8_e4m3_bits_from_float(float x) {
  using detail::select;
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::uint32_t a = u & 0x7fffffffu;
  std::uint32_t magnitude = detail::small_float_magnitude<3, 7>(a);
  magnitude = select(a >= 0x43e00000u, 0x7eu, magnitude);  // finite >= 448: saturate
  magnitude = select(a >= 0x7f800000u, 0x7fu, magnitude);  // infinity and NaN: NaN
  return static_cast<std::uint8_t>(sign | magnitude);
}

GRADCOMP_HD inline float float_from_fp8_e4m3_bits(std::uint8_t c) {
  using detail::select;
  const std::uint32_t sign = (static_cast<std::uint32_t>(c) & 0x80u) << 24;
  const std::uint32_t a = c & 0x7fu;
  // Normal codes: the exponent rebiased (7 -> 127) by one add. Subnormal codes (a < 8) are
  // a * 2^-9: an integer conversion and a product, both exact and normal (FTZ/DAZ-proof).
  const std::uint32_t normal = (a << 20) + (120u << 23);
  const std::uint32_t subnormal = float_bits(static_cast<float>(static_cast<std::int32_t>(a)) * 0x1p-9f);
  const std::uint32_t value = sign | select(a < 8u, subnormal, normal);
  return bits_float(select(a == 0x7fu, 0x7fc00000u, value));
}

GRADCOMP_HD inline std::uint8_t fp8_e5m2_bits_from_float(float x) {
  using detail::select;
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::uint32_t a = u & 0x7fffffffu;
  std::uint32_t magnitude = detail::small_float_magnitude<2, 15>(a);
  magnitude = select(a >= 0x47700000u, 0x7cu, magnitude);  // >= 61440 (and inf): infinity
  magnitude = select(a > 0x7f800000u, 0x7eu, magnitude);   // NaN: quiet NaN
  return static_cast<std::uint8_t>(sign | magnitude);
}

GRADCOMP_HD inline float float_from_fp8_e5m2_bits(std::uint8_t c) {
  using detail::select;
  const std::uint32_t sign = (static_cast<std::uint32_t>(c) & 0x80u) << 24;
  const std::uint32_t a = c & 0x7fu;
  const std::uint32_t normal = (a << 21) + (112u << 23);  // as for E4M3: rebias 15 -> 127
  const std::uint32_t subnormal = float_bits(static_cast<float>(static_cast<std::int32_t>(a)) * 0x1p-16f);
  std::uint32_t value = sign | select(a < 4u, subnormal, normal);
  value = select(a == 0x7cu, sign | 0x7f800000u, value);  // infinity
  return bits_float(select(a > 0x7cu, 0x7fc00000u, value));
}


GRADCOMP_PRECISE_END
}  // namespace gradcomp
