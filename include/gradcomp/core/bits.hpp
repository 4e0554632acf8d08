#pragma once
// Bit reinterpretation of floats, usable on host and device.

#include <cstdint>
#include <cstring>

#include "../cpu/dispatch.hpp"
#include "config.hpp"

#if GRADCOMP_CPU_DISPATCH
#include <immintrin.h>
#endif

namespace gradcomp {

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

#if GRADCOMP_CPU_DISPATCH
namespace detail {
// canonical_nan of eight floats (the AVX2 accumulate hooks).
__attribute__((target("avx2"), always_inline)) inline __m256 canonical_nan_avx2(__m256 v) {
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), _mm256_castsi256_ps(nan));
}

// Stores four floats at p: plainly, or (Streaming) with a non-temporal store, p 16-byte
// aligned, for the decode hooks' output to a buffer larger than the cache.
template <bool Streaming>
__attribute__((target("avx2"), always_inline)) inline void store4_avx2(float* p, __m128 v) {
  if constexpr (Streaming) {
    _mm_stream_ps(p, v);
  } else {
    _mm_storeu_ps(p, v);
  }
}

// Eight floats, likewise (two 16-byte non-temporal stores when Streaming).
template <bool Streaming>
__attribute__((target("avx2"), always_inline)) inline void store8_avx2(float* p, __m256 v) {
  if constexpr (Streaming) {
    store4_avx2<true>(p, _mm256_castps256_ps128(v));
    store4_avx2<true>(p + 4, _mm256_extractf128_ps(v, 1));
  } else {
    _mm256_storeu_ps(p, v);
  }
}
}  // namespace detail
#endif

}  // namespace gradcomp
