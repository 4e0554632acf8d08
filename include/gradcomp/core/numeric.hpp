#pragma once
// bf16 and fp16 value types. Conversions from float round to nearest even, keep subnormals,
// turn NaN into a quiet NaN of the same sign and saturate nothing (overflow gives infinity).
// Written with integer operations only, so host and device produce the same bits whatever
// the floating-point environment (flush-to-zero, fast-math) is.

#include <cstdint>
#include <type_traits>

#include "bits.hpp"

namespace gradcomp {
GRADCOMP_PRECISE_BEGIN

GRADCOMP_HD inline std::uint16_t bf16_bits_from_float(float x) {
  const std::uint32_t u = float_bits(x);
  // NaN (|x| as a signed integer above +inf) is truncated and quieted instead of rounded,
  // written as masks so that vector code narrows to 16 bits once, at the end.
  const std::uint32_t nan = 0u - static_cast<std::uint32_t>(static_cast<std::int32_t>(u & 0x7fffffffu) > 0x7f800000);
  const std::uint32_t bias = (0x7fffu + ((u >> 16) & 1u)) & ~nan;
  return static_cast<std::uint16_t>(((u + bias) >> 16) | (0x0040u & nan));
}

GRADCOMP_HD inline float float_from_bf16_bits(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

// Every case is computed and one is selected, so loops over many values vectorise.
GRADCOMP_HD inline std::uint16_t fp16_bits_from_float(float x) {
  using detail::select;
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  const std::uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  // Normal fp16: rebias the exponent (127 -> 15) and round the 13 dropped bits to even.
  const std::uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // Subnormal fp16: |x| / 2^-24 rounded to even (may carry into the smallest normal), read
  // off |x| + 0.5, whose ulp is 2^-24: the add rounds (to nearest even, the default mode) and
  // leaves the code in the low bits. Flush-to-zero only touches |x| < 2^-126, code 0 anyway.
  std::uint32_t magnitude = float_bits(bits_float(a) + 0.5f) - 0x3f000000u;
  magnitude = select(a >= 0x38800000u, normal, magnitude);
  magnitude = select(a >= 0x477ff000u, 0x7c00u, magnitude);  // >= 65520 rounds to infinity
  magnitude = select(a > 0x7f800000u, nan, magnitude);
  return static_cast<std::uint16_t>(sign | magnitude);
}

GRADCOMP_HD inline float float_from_fp16_bits(std::uint16_t h) {
  using detail::select;
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  const std::uint32_t special = 0x7f800000u | (m << 13);
  const std::uint32_t subnormal = float_bits(static_cast<float>(m) * 5.9604644775390625e-8f);  // m * 2^-24, exact
  const std::uint32_t normal = ((e + 112u) << 23) | (m << 13);
  return bits_float(sign | select(e == 0x1fu, special, select(e == 0u, subnormal, normal)));
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

GRADCOMP_PRECISE_END
}  // namespace gradcomp
