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
#include "../core/ids.hpp"
#include "../core/options.hpp"
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

// Lee's factors of a block of b values, factors(b)[i], and the orthonormal scales sqrt(1/b)
// (c0) and sqrt(2/b) (ck). (One layout on the host and the device; only the host has tables.)
struct lee_factors {
  const float* f;
  std::size_t b;
  float c0, ck;
  GRADCOMP_HD float operator[](std::size_t i) const {
#if GRADCOMP_DEVICE_CODE
    return lee_factor_of(i, b);
#else
    return f[i];
#endif
  }
};

GRADCOMP_HD inline float scale_of(double numerator, std::size_t b) {
  return static_cast<float>(sqrt_of(numerator / static_cast<double>(b)));
}

GRADCOMP_HD inline lee_factors factors(std::size_t b) {
#if GRADCOMP_DEVICE_CODE
  return {nullptr, b, scale_of(1.0, b), scale_of(2.0, b)};
#else
  // Blocks of b = 2 .. 4096 values: the b / 2 factors of size b start at b / 2 - 1; the
  // scales of b = 2^m at m.
  struct table {
    float f[4095], c0[13], ck[13];
    table() {
      for (std::size_t h = 1; h <= 2048; h *= 2)
        for (std::size_t k = 0; k < h; ++k) f[h - 1 + k] = lee_factor_of(k, 2 * h);
      for (unsigned m = 0; m < 13; ++m) c0[m] = scale_of(1.0, std::size_t{1} << m), ck[m] = scale_of(2.0, std::size_t{1} << m);
    }
  };
  static const table t;
  const unsigned m = log2_of(b);
  return {t.f + (b > 1 ? b / 2 - 1 : 0), b, t.c0[m], t.ck[m]};
#endif
}

// Lee's factorisation level by level rather than by recursion, so that each level is one
// loop over the block that the compilers vectorise. Down: each sub-block of s values becomes
// the sums of its mirrored halves, then their differences times the factors (the even and the
// odd half of a DCT of s / 2 values each); up: each pair of finished halves is interleaved,
// the odd outputs the sums of neighbours. The operations and their operands are the
// recursion's, in the same order per value. No NaN is made canonical here: a NaN's payload
// may differ between the host and a device, so the callers' final pass makes every NaN
// canonical (NaN-ness itself is IEEE's on both).

// The last three levels of each direction on 8 values at y, in registers: the same operations
// on the same operands as the level loops.
GRADCOMP_HD inline void dct2_8(float* y, const lee_factors& f8, const lee_factors& f4, const lee_factors& f2) {
  float e[4], d[4];
  for (std::size_t i = 0; i < 4; ++i) e[i] = y[i] + y[7 - i];
  for (std::size_t i = 0; i < 4; ++i) d[i] = (y[i] - y[7 - i]) * f8[i];
  const auto four = [&](float* v) {  // a DCT of 4 values, in place
    const float p0 = v[0] + v[3], p1 = v[1] + v[2];
    const float q0 = (v[0] - v[3]) * f4[0], q1 = (v[1] - v[2]) * f4[1];
    const float r0 = p0 + p1, r1 = (p0 - p1) * f2[0], t0 = q0 + q1, t1 = (q0 - q1) * f2[0];
    v[0] = r0, v[1] = t0 + t1, v[2] = r1, v[3] = t1;
  };
  four(e);
  four(d);
  for (std::size_t i = 0; i < 4; ++i) y[2 * i] = e[i];
  for (std::size_t i = 0; i < 3; ++i) y[2 * i + 1] = d[i] + d[i + 1];
  y[7] = d[3];
}
GRADCOMP_HD inline void dct3_8(float* y, const lee_factors& f8, const lee_factors& f4, const lee_factors& f2) {
  float e[4] = {y[0], y[2], y[4], y[6]}, d[4] = {y[1], y[1] + y[3], y[3] + y[5], y[5] + y[7]};
  const auto four = [&](float* v) {  // the transpose of a DCT of 4 values, in place
    const float z0 = v[0], z1 = v[2], w0 = v[1], w1 = v[1] + v[3];
    const float zv = z1 * f2[0], wv = w1 * f2[0];
    const float a0 = z0 + zv, a1 = z0 - zv, b0 = w0 + wv, b1 = w0 - wv;
    const float v0 = b0 * f4[0], v1 = b1 * f4[1];
    v[0] = a0 + v0, v[3] = a0 - v0, v[1] = a1 + v1, v[2] = a1 - v1;
  };
  four(e);
  four(d);
  for (std::size_t i = 0; i < 4; ++i) {
    const float u = e[i], v = d[i] * f8[i];
    y[i] = u + v;
    y[7 - i] = u - v;
  }
}

// One level: f(a, o) from each sub-block of s values of `in` into the same place of `out`, then
// the two buffers swap roles.
template <class F>
GRADCOMP_HD inline void lee_level(float*& in, float*& out, std::size_t b, std::size_t s, F&& f) {
  for (std::size_t k = 0; k < b; k += s) f(in + k, out + k);
  float* t = in;
  in = out, out = t;
}

// In place: the unnormalised DCT-II of x[0, b) (X_k = sum_n x_n cos(pi (2n+1) k / (2b))), b a
// power of two; tmp holds b floats.
GRADCOMP_HD inline void dct2_unscaled(float* x, float* tmp, std::size_t b) {
  const std::size_t leaf = b >= 8 ? 8 : 1;
  float *in = x, *out = tmp;
  for (std::size_t s = b; s > leaf; s /= 2) {
    const std::size_t h = s / 2;
    const lee_factors f = factors(s);
    lee_level(in, out, b, s, [&](const float* a, float* o) {
      for (std::size_t i = 0; i < h; ++i) o[i] = a[i] + a[s - 1 - i];
      for (std::size_t i = 0; i < h; ++i) o[h + i] = (a[i] - a[s - 1 - i]) * f[i];
    });
  }
  if (leaf == 8)
    for (std::size_t k = 0; k < b; k += 8) dct2_8(in + k, factors(8), factors(4), factors(2));
  for (std::size_t s = 2 * leaf; s <= b; s *= 2) {
    const std::size_t h = s / 2;
    lee_level(in, out, b, s, [&](const float* a, float* o) {
      for (std::size_t i = 0; i < h; ++i) o[2 * i] = a[i];
      for (std::size_t i = 0; i + 1 < h; ++i) o[2 * i + 1] = a[h + i] + a[h + i + 1];
      o[s - 1] = a[s - 1];
    });
  }
  // as many levels up as down: the result is back in x
}

// In place: the transpose of dct2_unscaled, x_n = sum_k X_k cos(pi (2n+1) k / (2b)) (Lee's
// steps transposed and run backwards: down de-interleaves, up applies the factors).
GRADCOMP_HD inline void dct3_unscaled(float* x, float* tmp, std::size_t b) {
  const std::size_t leaf = b >= 8 ? 8 : 1;
  float *in = x, *out = tmp;
  for (std::size_t s = b; s > leaf; s /= 2) {
    const std::size_t h = s / 2;
    lee_level(in, out, b, s, [&](const float* a, float* o) {
      for (std::size_t i = 0; i < h; ++i) o[i] = a[2 * i];
      o[h] = a[1];
      for (std::size_t i = 1; i < h; ++i) o[h + i] = a[2 * i - 1] + a[2 * i + 1];
    });
  }
  if (leaf == 8)
    for (std::size_t k = 0; k < b; k += 8) dct3_8(in + k, factors(8), factors(4), factors(2));
  for (std::size_t s = 2 * leaf; s <= b; s *= 2) {
    const std::size_t h = s / 2;
    const lee_factors f = factors(s);
    lee_level(in, out, b, s, [&](const float* a, float* o) {
      for (std::size_t i = 0; i < h; ++i) {
        const float u = a[i], v = a[h + i] * f[i];
        o[i] = u + v;
        o[s - 1 - i] = u - v;
      }
    });
  }
}

struct dct_config {
  std::uint32_t block = 64;  // values per block: a power of two, 2 to 4096
  static constexpr auto options() { return std::tuple{option{"dct_block", &dct_config::block}}; }
};

// The transform policy (compressor<..., transform::dct>): DCT-II of `block` values.
struct dct : blocked_transform<dct_config, ids::transform::dct> {
  // One block of b values at x (tmp: b floats), forward (orthonormal DCT-II) or inverse.
  GRADCOMP_HD static void forward_block(const config&, std::uint32_t, std::size_t, float* x, float* tmp, std::size_t b) {
    dct2_unscaled(x, tmp, b);
    const lee_factors f = factors(b);
    const float c0 = f.c0, ck = f.ck;
    x[0] = canonical_nan(x[0] * c0);
    for (std::size_t k = 1; k < b; ++k) x[k] = canonical_nan(x[k] * ck);
  }
  GRADCOMP_HD static void inverse_block(const config&, std::uint32_t, std::size_t, float* x, float* tmp, std::size_t b) {
    // The DCT-II matrix C has C C^T = diag(b, b/2, ..., b/2), so the inverse of X = D C x with
    // D = diag(c_k) is x = C^T D X.
    const lee_factors f = factors(b);
    const float d0 = f.c0, dk = f.ck;
    x[0] *= d0;
    for (std::size_t k = 1; k < b; ++k) x[k] *= dk;
    dct3_unscaled(x, tmp, b);
    for (std::size_t k = 0; k < b; ++k) x[k] = canonical_nan(x[k]);
  }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::transform
