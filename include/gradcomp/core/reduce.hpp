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

#include "bits.hpp"


namespace gradcomp {
GRADCOMP_PRECISE_BEGIN

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


GRADCOMP_PRECISE_END
}  // namespace gradcomp
