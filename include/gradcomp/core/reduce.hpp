#pragma once
// Per-group statistics in one fixed order, so every backend gets the same bits.
//
// tree_sum: the n values (n <= max_tree_sum) are padded with +0 to the next power of two P;
// then, while P > 1: P /= 2 and v[i] = v[i] + v[i + P] for i < P. This is the order of a
// shared-memory reduction that halves its stride, and on the CPU each level is one
// vectorisable loop. max_abs compares the bits of |x| (order-free; NaN ranks highest).

#include <cstddef>
#include <cstdint>

#include "bits.hpp"

namespace gradcomp {

inline constexpr std::size_t max_tree_sum = 4096;

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
  while (p > 1) {
    p /= 2;
    for (std::size_t i = 0; i < p; ++i) v[i] = v[i] + v[i + p];
  }
  return v[0];
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

}  // namespace gradcomp
