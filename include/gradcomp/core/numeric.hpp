#pragma once
// bf16 and fp16 value types. Conversions from float round to nearest even, keep subnormals,
// turn NaN into a quiet NaN of the same sign and saturate nothing (overflow gives infinity).
// Written with integer operations only, so host and device produce the same bits whatever
// the floating-point environment (flush-to-zero, fast-math) is.

#include <cstdint>
#include <type_traits>

#include "bits.hpp"

namespace gradcomp {

GRADCOMP_HD inline std::uint16_t bf16_bits_from_float(float x) {
  const std::uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

GRADCOMP_HD inline float float_from_bf16_bits(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

GRADCOMP_HD inline std::uint16_t fp16_bits_from_float(float x) {
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a >= 0x38800000u) {                                                    // normal fp16
    const std::uint32_t r = a - 0x38000000u;                                 // rebias 127 -> 15
    return static_cast<std::uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return static_cast<std::uint16_t>(sign);  // <= 2^-25 rounds to zero
  // Subnormal fp16: value / 2^-24 rounded to nearest even; may carry into the smallest normal.
  const std::uint32_t shift = 126u - (a >> 23);  // 14..24
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const std::uint32_t up = (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
  return static_cast<std::uint16_t>(sign | (q + up));
}

GRADCOMP_HD inline float float_from_fp16_bits(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return bits_float(sign | 0x7f800000u | (m << 13));
  if (e == 0u) {  // zero or subnormal: m * 2^-24 is exact in float
    return bits_float(sign | float_bits(static_cast<float>(m) * 5.9604644775390625e-8f));
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// Storage types for 16-bit gradients. Plain aggregates: trivially copyable, no implicit
// conversions, so a bf16 buffer is never mistaken for raw uint16_t data.
struct bf16_t {
  std::uint16_t bits;
  GRADCOMP_HD static bf16_t from_float(float x) { return {bf16_bits_from_float(x)}; }
  GRADCOMP_HD float to_float() const { return float_from_bf16_bits(bits); }
  friend bool operator==(bf16_t, bf16_t) = default;
};

struct fp16_t {
  std::uint16_t bits;
  GRADCOMP_HD static fp16_t from_float(float x) { return {fp16_bits_from_float(x)}; }
  GRADCOMP_HD float to_float() const { return float_from_fp16_bits(bits); }
  friend bool operator==(fp16_t, fp16_t) = default;
};

// Element types a gradient buffer may hold, and their id in the frame header.
enum class dtype : std::uint8_t { f32 = 1, bf16 = 2 };

template <class T>
inline constexpr bool is_gradient_element_v = false;
template <>
inline constexpr bool is_gradient_element_v<float> = true;
template <>
inline constexpr bool is_gradient_element_v<bf16_t> = true;

template <class T>
concept gradient_element = is_gradient_element_v<T>;

template <gradient_element T>
inline constexpr dtype dtype_of = std::is_same_v<T, float> ? dtype::f32 : dtype::bf16;

GRADCOMP_HD inline float to_float(float x) { return x; }
GRADCOMP_HD inline float to_float(bf16_t x) { return x.to_float(); }

template <gradient_element T>
GRADCOMP_HD inline T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return T::from_float(x);
  }
}

}  // namespace gradcomp
