#pragma once
// Bit reinterpretation of floats, usable on host and device.

#include <cstdint>
#include <cstring>

#include "config.hpp"


namespace gradcomp {
GRADCOMP_PRECISE_BEGIN

GRADCOMP_HD inline std::uint32_t float_bits(float x) {
#if GRADCOMP_DEVICE_CODE
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

GRADCOMP_HD inline float bits_float(std::uint32_t u) {
#if GRADCOMP_DEVICE_CODE
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

namespace detail {
// c ? x : y as bit operations: compilers keep it branch-free, so loops of it vectorise (in
// this and/or form GCC emits one blend per select).
GRADCOMP_HD constexpr std::uint32_t select(bool c, std::uint32_t x, std::uint32_t y) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return (x & m) | (y & ~m);
}
}  // namespace detail

// x as a signed key whose integer order is the order of x (-0 below +0, NaN beyond the
// infinity of its sign); from_order_key inverts it.
GRADCOMP_HD inline std::int32_t order_key(float x) {
  const auto b = static_cast<std::int32_t>(float_bits(x));
  return b ^ ((b >> 31) & 0x7fffffff);
}
GRADCOMP_HD inline float from_order_key(std::int32_t k) {
  return bits_float(static_cast<std::uint32_t>(k ^ ((k >> 31) & 0x7fffffff)));
}

// |x| as an unsigned key whose integer order is the order of |x| (NaN above +inf).
GRADCOMP_HD inline std::uint32_t abs_key(float x) { return float_bits(x) & 0x7fffffffu; }

GRADCOMP_HD inline bool is_finite_bits(std::uint32_t u) { return (u & 0x7f800000u) != 0x7f800000u; }
// Neither zero, subnormal, infinite nor NaN.
GRADCOMP_HD inline bool is_normal_bits(std::uint32_t u) { return is_finite_bits(u) && (u & 0x7f800000u) != 0; }

// x, with any NaN replaced by the quiet NaN 0x7fc00000. Arithmetic on NaN keeps an operand's
// payload on x86 but returns 0x7fffffff on CUDA; results of shared arithmetic pass through
// here so both backends produce the same bits. (An integer test: fast-math cannot remove it.)
GRADCOMP_HD inline float canonical_nan(float x) {
  const std::uint32_t u = float_bits(x);
  return bits_float(detail::select((u & 0x7fffffffu) > 0x7f800000u, 0x7fc00000u, u));
}


GRADCOMP_PRECISE_END
}  // namespace gradcomp
