#pragma once
// The chunked DCT-II (DeMo sends the largest DCT coefficients of chunks of the momentum): per
// block of b = 2^m values (transform/policy.hpp) the orthonormal DCT-II,
//   X_k = c_k sum_n x_n cos(pi (2n + 1) k / (2b)),   c_0 = sqrt(1/b), c_k = sqrt(2/b),
// by Lee's recursive factorisation (b/2 log2 b multiplications, no matrix), and its inverse, the
// orthonormal DCT-III. Smooth signals (a momentum's slow components) gather in the low
// coefficients, which a top-k keeps.
//
// Bits: the cosines come from cos_pi (a fixed polynomial in double arithmetic), never from a
// math library, and every sum is in a fixed order (GRADCOMP_HD), so the host and a device give
// the same bits.

#include <cstddef>
#include <cstdint>
#include <tuple>

#include "../core/bits.hpp"
#include "../core/config.hpp"
#include "../core/options.hpp"
#include "../core/status.hpp"
#include "policy.hpp"

namespace gradcomp::transform {
GRADCOMP_PRECISE_BEGIN

// cos(pi * p / q) for 0 <= p <= q / 2 (an angle in [0, pi/2]), in double, by a fixed polynomial.
GRADCOMP_HD inline double cos_pi(std::uint64_t p, std::uint64_t q) {
  constexpr double pi = 3.141592653589793238462643383279502884;
  const bool use_sin = 4 * p > q;  // cos(a) = sin(pi/2 - a) on [pi/4, pi/2]
  const double a = use_sin ? pi * static_cast<double>(q - 2 * p) / static_cast<double>(2 * q) : pi * static_cast<double>(p) / static_cast<double>(q);
  const double a2 = a * a;
  double term = use_sin ? a : 1.0, sum = term;
  int power = use_sin ? 1 : 0;
  for (int i = 0; i < 12; ++i) {  // a <= pi/4: the 13th term is below double precision
    term = -term * a2 / static_cast<double>((power + 1) * (power + 2));
    power += 2;
    sum += term;
  }
  return sum;
}

// sqrt(x) for x > 0 in double, by Newton's iteration from a power-of-two start (no library).
GRADCOMP_HD inline double sqrt_of(double x) {
  double r = 1.0;
  while (r * r > 4.0 * x) r *= 0.5;
  while (r * r < 0.25 * x) r *= 2.0;
  for (int i = 0; i < 8; ++i) r = 0.5 * (r + x / r);
  return r;
}

// The factor of Lee's step i of a block of b values, 1 / (2 cos(pi (2i + 1) / (2b))), rounded to
// float from double. The host reads it from a table filled once by the same expression (the
// polynomial per element would dominate the transform), the device computes it.
GRADCOMP_HD inline float lee_factor_of(std::size_t i, std::size_t b) { return static_cast<float>(0.5 / cos_pi(2 * i + 1, 2 * b)); }

// Lee's factors of a block of b values: factors(b)[i]. (One layout on the host and the device;
// only the host has the table.)
struct lee_factors {
  const float* f;
  std::size_t b;
  GRADCOMP_HD float operator[](std::size_t i) const {
#if GRADCOMP_DEVICE_CODE
    return lee_factor_of(i, b);
#else
    return f[i];
#endif
  }
};

GRADCOMP_HD inline lee_factors factors(std::size_t b) {
#if GRADCOMP_DEVICE_CODE
  return {nullptr, b};
#else
  // Blocks of b = 2 .. 4096 values: the b / 2 factors of size b start at b / 2 - 1.
  struct table {
    float f[4095];
    table() {
      for (std::size_t h = 1; h <= 2048; h *= 2)
        for (std::size_t k = 0; k < h; ++k) f[h - 1 + k] = lee_factor_of(k, 2 * h);
    }
  };
  static const table t;
  return {t.f + b / 2 - 1, b};
#endif
}

// In place: the unnormalised DCT-II of x[0, b) (X_k = sum_n x_n cos(pi (2n+1) k / (2b))), b a
// power of two; tmp holds b floats.
GRADCOMP_HD_CALL inline void dct2_unscaled(float* x, float* tmp, std::size_t b) {
  if (b == 1) return;
  const std::size_t h = b / 2;
  const lee_factors f = factors(b);
  for (std::size_t i = 0; i < h; ++i) {
    const float u = x[i], v = x[b - 1 - i];
    tmp[i] = canonical_nan(u + v);
    tmp[h + i] = canonical_nan((u - v) * f[i]);
  }
  dct2_unscaled(tmp, x, h);
  dct2_unscaled(tmp + h, x, h);
  for (std::size_t i = 0; i < h; ++i) {
    x[2 * i] = tmp[i];
    x[2 * i + 1] = i + 1 < h ? canonical_nan(tmp[h + i] + tmp[h + i + 1]) : tmp[h + i];
  }
}

// In place: the transpose of dct2_unscaled, x_n = sum_k X_k cos(pi (2n+1) k / (2b)) (Lee's
// steps transposed and run backwards).
GRADCOMP_HD_CALL inline void dct3_unscaled(float* x, float* tmp, std::size_t b) {
  if (b == 1) return;
  const std::size_t h = b / 2;
  const lee_factors f = factors(b);
  tmp[0] = x[0];
  tmp[h] = x[1];
  for (std::size_t i = 1; i < h; ++i) {
    tmp[i] = x[2 * i];
    tmp[h + i] = canonical_nan(x[2 * i - 1] + x[2 * i + 1]);
  }
  dct3_unscaled(tmp, x, h);
  dct3_unscaled(tmp + h, x, h);
  for (std::size_t i = 0; i < h; ++i) {
    const float u = tmp[i], v = canonical_nan(tmp[h + i] * f[i]);
    x[i] = canonical_nan(u + v);
    x[b - 1 - i] = canonical_nan(u - v);
  }
}

// The transform policy (compressor<..., transform::dct>): DCT-II of `block` values.
struct dct {
  using policy_kind = transform_tag;
  static constexpr bool is_identity = false;
  static constexpr std::uint32_t id = 2;
  struct config {
    std::uint32_t block = 64;  // values per block: a power of two, 2 to 4096
    static constexpr auto options() { return std::tuple{option{"dct_block", &config::block}}; }
  };
  static status validate(const config& c) {
    return valid_block(c.block) ? status{} : status{errc::invalid_argument, "dct: block is a power of two from 2 to 4096"};
  }
  GRADCOMP_HD static std::uint32_t word(const config& c) { return transform_word(id, c.block); }
  GRADCOMP_HD static std::uint32_t seed(const config&) { return 0; }
  GRADCOMP_HD static std::size_t block(const config& c) { return c.block; }

  // One block of b values at x (tmp: b floats), forward (orthonormal DCT-II) or inverse.
  GRADCOMP_HD static void forward_block(const config&, std::uint32_t, std::size_t, float* x, float* tmp, std::size_t b) {
    dct2_unscaled(x, tmp, b);
    const float c0 = static_cast<float>(sqrt_of(1.0 / static_cast<double>(b)));
    const float ck = static_cast<float>(sqrt_of(2.0 / static_cast<double>(b)));
    x[0] *= c0;
    for (std::size_t k = 1; k < b; ++k) x[k] *= ck;
  }
  GRADCOMP_HD static void inverse_block(const config&, std::uint32_t, std::size_t, float* x, float* tmp, std::size_t b) {
    // The DCT-II matrix C has C C^T = diag(b, b/2, ..., b/2), so the inverse of X = D C x with
    // D = diag(c_k) is x = C^T D X.
    const float d0 = static_cast<float>(sqrt_of(1.0 / static_cast<double>(b)));
    const float dk = static_cast<float>(sqrt_of(2.0 / static_cast<double>(b)));
    x[0] *= d0;
    for (std::size_t k = 1; k < b; ++k) x[k] *= dk;
    dct3_unscaled(x, tmp, b);
  }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::transform
