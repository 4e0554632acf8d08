#pragma once
// Per-group statistics in one fixed order, so every backend gets the same bits.
//
// tree_sum: the n values (n <= max_tree_sum) are padded with +0 to the next power of two P;
// then, while P > 1: P /= 2 and v[i] = v[i] + v[i + P] for i < P. This is the order of a
// shared-memory reduction that halves its stride. tree_sum runs the first level alone (it
// holds the padding), then three levels per pass (tree8: the same additions, operand for
// operand): one vectorisable loop per pass, whose partial sums stay in registers instead of
// being stored and reloaded after every level. max_abs compares the bits of |x| (order-free;
// NaN ranks highest).

#include <cstddef>
#include <cstdint>

#include "../cpu/dispatch.hpp"
#include "bits.hpp"

#if GRADCOMP_CPU_DISPATCH
#include <immintrin.h>
#endif

namespace gradcomp {

inline constexpr std::size_t max_tree_sum = 4096;

namespace detail {
// Three levels at once, of strides 4q, 2q and q: w[0] after them, from w[k * q] for k < 8.
GRADCOMP_HD GRADCOMP_INLINE float tree8(const float* w, std::size_t q) {
  return ((w[0] + w[4 * q]) + (w[2 * q] + w[6 * q])) + ((w[q] + w[5 * q]) + (w[3 * q] + w[7 * q]));
}

// tree_sum's levels after the first, over its result v[0, p) (p a power of two): three levels
// per pass, v[i] from v[i + k * p / 8] for k < 8 (no iteration reads what another writes), then
// the last one or two. Vectorised first levels (piecewise's AVX2 fit) end here too.
GRADCOMP_HD GRADCOMP_INLINE float tree_levels(float* v, std::size_t p) {
  for (; p >= 8; p /= 8)
    for (std::size_t i = 0; i < p / 8; ++i) v[i] = tree8(v + i, p / 8);
  if (p == 4) return (v[0] + v[2]) + (v[1] + v[3]);
  return p == 2 ? v[0] + v[1] : v[0];
}
}  // namespace detail

// Sum of f(x[i]) for i < n in the documented tree order. Precondition: n <= max_tree_sum.
template <class F>
GRADCOMP_HD GRADCOMP_INLINE float tree_sum(const float* x, std::size_t n, F f) {
  if (n == 0) return 0.0f;
  std::size_t p = 1;
  while (p < n) p *= 2;
  if (p == 1) return f(x[0]);
  float v[max_tree_sum / 2];
  p /= 2;
  // First level: v[i] = f(x[i]) + f(x[i + p]), with the padding (+0) only past n.
  const std::size_t full = n - p;  // i < full has a partner x[i + p]
  for (std::size_t i = 0; i < full; ++i) v[i] = f(x[i]) + f(x[i + p]);
  for (std::size_t i = full; i < p; ++i) v[i] = f(x[i]) + 0.0f;
  return detail::tree_levels(v, p);
}

GRADCOMP_HD GRADCOMP_INLINE float tree_sum(const float* x, std::size_t n) {
  return tree_sum(x, n, [](float a) { return a; });
}

// Largest |x[i]| (as a float; NaN if any x[i] is NaN), 0 for n == 0.
GRADCOMP_HD GRADCOMP_INLINE float max_abs(const float* x, std::size_t n) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) m = abs_key(x[i]) > m ? abs_key(x[i]) : m;
  return bits_float(m);
}

#if GRADCOMP_CPU_DISPATCH
namespace detail {
// Lane q of the result: op over the eight lanes of v[q] (op an associative, commutative
// integer max or min), by a transpose: three rounds of interleaving pairs.
template <class Op>
__attribute__((target("avx2"), always_inline)) inline __m256i reduce_lanes8_avx2(const __m256i (&v)[8], Op op) {
  __m256i pairs[4], quads[2];
  for (int k = 0; k < 4; ++k)
    pairs[k] = op(_mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]), _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
  for (int k = 0; k < 2; ++k)
    quads[k] = op(_mm256_unpacklo_epi64(pairs[2 * k], pairs[2 * k + 1]),
                  _mm256_unpackhi_epi64(pairs[2 * k], pairs[2 * k + 1]));
  // each 128-bit half of quads[k] now holds groups 4k .. 4k + 3, from its half of the lanes
  return op(_mm256_permute2x128_si256(quads[0], quads[1], 0x20), _mm256_permute2x128_si256(quads[0], quads[1], 0x31));
}

// Lane q: tree_levels(v[q], 8), i.e. the last three tree levels (strides 4, 2, 1) of eight
// sums side by side, each addition with the lower index first, as tree_levels has it.
__attribute__((target("avx2"), always_inline)) inline __m256 tree_levels8_avx2(const __m256 (&v)[8]) {
  __m256 stride4[4], stride2[2];
  for (int k = 0; k < 4; ++k)  // lanes i + 4 onto i: sums 2k | 2k + 1
    stride4[k] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x20),
                               _mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x31));
  for (int k = 0; k < 2; ++k) {  // i + 2 onto i: sums 4k, 4k + 2 | 4k + 1, 4k + 3
    const __m256d a = _mm256_castps_pd(stride4[2 * k]), b = _mm256_castps_pd(stride4[2 * k + 1]);
    stride2[k] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
  }
  const __m256 total =  // i + 1 onto i: sums 0, 2, 4, 6 | 1, 3, 5, 7
      _mm256_add_ps(_mm256_shuffle_ps(stride2[0], stride2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm256_shuffle_ps(stride2[0], stride2[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(total, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Lane q: max_abs(x + q * gs, gs) as float bits, for eight groups of gs values (gs a
// multiple of 8). The groups are read side by side: eight independent maxima in flight.
__attribute__((target("avx2"), always_inline)) inline __m256i max_abs8_avx2(const float* x, std::size_t gs) {
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  __m256i m[8];
  for (auto& v : m) v = _mm256_setzero_si256();
  for (std::size_t j = 0; j < gs; j += 8)
    for (std::size_t q = 0; q < 8; ++q) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + q * gs + j));
      m[q] = _mm256_max_epu32(m[q], _mm256_and_si256(magnitude, v));
    }
  return reduce_lanes8_avx2(m, [&](__m256i a, __m256i b)
                                   __attribute__((always_inline, target("avx2"))) { return _mm256_max_epu32(a, b); });
}
}  // namespace detail
#endif

}  // namespace gradcomp
