#pragma once
// The seeded randomized Hadamard transform (THC; the rotations of QuaRot-style quantizers): per
// block of b = 2^m values (transform/policy.hpp), y = 2^-ceil(m/2) H D x, with D a diagonal of
// random signs and H the Walsh-Hadamard matrix (entries +-1, H H = b I), computed by the
// butterfly (m passes of sums and differences, b log2 b additions, no matrix). The inverse is
// x = 2^-floor(m/2) D H y. Both scales are powers of two, so they round nothing: the inverse
// returns x to the rounding of the butterflies. The transform is orthogonal up to the factor
// 2^(m/2 - ceil(m/2)) (1, or 1/sqrt(2) for odd m), which a quantizer's per-group scale absorbs.
//
// It spreads a block's energy evenly: an outlier becomes b values of magnitude |x| / sqrt(b),
// so a group scale set by max |y| wastes far fewer levels on heavy-tailed data.
//
// The signs come from Philox (core/philox.hpp) with key (seed, 0) and counter (element index,
// chunk, stream transform): every rank, every step and both backends draw the same D for a
// chunk, so a residual or momentum kept in the rotated domain stays in it. The arithmetic is
// adds and subtracts in a fixed order (GRADCOMP_HD): the same bits on the host and the device.

#include <cstddef>
#include <cstdint>
#include <tuple>

#include "../core/bits.hpp"
#include "../core/config.hpp"
#include "../core/ids.hpp"
#include "../core/philox.hpp"
#include "../core/options.hpp"
#include "policy.hpp"

namespace gradcomp::transform {
GRADCOMP_PRECISE_BEGIN

// The sign of element j of a chunk: bit j % 32 of Philox word j / 32.
GRADCOMP_HD inline bool negated(std::uint32_t seed, std::uint32_t chunk, std::uint64_t j) {
  const std::uint32_t word = philox_at(seed, 0, chunk, random_stream::transform, j / 32);
  return ((word >> (j % 32)) & 1u) != 0;
}

// 2^-e as a float (e < 64).
GRADCOMP_HD inline float pow2_neg(unsigned e) { return bits_float(static_cast<std::uint32_t>(127 - e) << 23); }

// In place: the unnormalised Walsh-Hadamard transform of x[0, b), b a power of two. Plain sums
// and differences, which the compiler vectorises; a NaN's payload may differ between the host
// and a device here, so the callers' final pass makes every NaN canonical.
GRADCOMP_HD inline void walsh_hadamard(float* x, std::size_t b) {
  std::size_t h = 1;
  if (b >= 8) {  // passes h = 1, 2, 4 on 8 values at a time in registers (the same sums in the same order)
    for (std::size_t i = 0; i < b; i += 8) {
      float* y = x + i;
      const float a0 = y[0] + y[1], a1 = y[0] - y[1], a2 = y[2] + y[3], a3 = y[2] - y[3];
      const float a4 = y[4] + y[5], a5 = y[4] - y[5], a6 = y[6] + y[7], a7 = y[6] - y[7];
      const float b0 = a0 + a2, b1 = a1 + a3, b2 = a0 - a2, b3 = a1 - a3;
      const float b4 = a4 + a6, b5 = a5 + a7, b6 = a4 - a6, b7 = a5 - a7;
      y[0] = b0 + b4, y[1] = b1 + b5, y[2] = b2 + b6, y[3] = b3 + b7;
      y[4] = b0 - b4, y[5] = b1 - b5, y[6] = b2 - b6, y[7] = b3 - b7;
    }
    h = 8;
  }
  for (; h < b; h <<= 1)
    for (std::size_t i = 0; i < b; i += 2 * h)
      for (std::size_t j = i; j < i + h; ++j) {
        const float u = x[j], v = x[j + h];
        x[j] = u + v;
        x[j + h] = u - v;
      }
}

// x[j] = -x[j] where element offset + j of the chunk is negated (one Philox word per 32
// elements; the inner loop has no carried dependency, so it vectorises), every NaN made
// canonical when Canonical (the inverse's last pass).
template <bool Canonical>
GRADCOMP_HD inline void apply_signs(std::uint32_t seed, std::uint32_t chunk, std::size_t offset, float* x, std::size_t b) {
  for (std::size_t j = 0; j < b;) {
    const std::uint64_t at = offset + j;
    const std::uint32_t word = philox_at(seed, 0, chunk, random_stream::transform, at / 32);
    const std::size_t first = at % 32, count = 32 - first < b - j ? 32 - first : b - j;
    const std::uint32_t w = word >> first;
    float* const y = x + j;
    for (std::size_t k = 0; k < count; ++k) {  // -x: the sign bit flipped
      const float v = bits_float(float_bits(y[k]) ^ (((w >> k) & 1u) << 31));
      y[k] = Canonical ? canonical_nan(v) : v;
    }
    j += count;
  }
}

struct hadamard_config {
  std::uint32_t block = 256;  // values per block: a power of two, 2 to 4096
  std::uint32_t seed = 0;     // the signs' key
  static constexpr auto options() {
    return std::tuple{option{"rotation_block", &hadamard_config::block}, option{"rotation_seed", &hadamard_config::seed}};
  }
};

// The transform policy (compressor<..., transform::hadamard>): rotations of `block` values.
struct hadamard : blocked_transform<hadamard_config, ids::transform::hadamard> {
  GRADCOMP_HD static std::uint32_t seed(const config& c) { return c.seed; }

  // One block at `offset` of chunk `chunk` (b values at x), forward (y = s H D x) or inverse.
  GRADCOMP_HD static void forward_block(const config& c, std::uint32_t chunk, std::size_t offset, float* x, float*,
                                        std::size_t b) {
    apply_signs<false>(c.seed, chunk, offset, x, b);
    walsh_hadamard(x, b);
    const float s = pow2_neg((log2_of(b) + 1) / 2);
    for (std::size_t j = 0; j < b; ++j) x[j] = canonical_nan(x[j] * s);
  }
  GRADCOMP_HD static void inverse_block(const config& c, std::uint32_t chunk, std::size_t offset, float* x, float*,
                                        std::size_t b) {
    walsh_hadamard(x, b);
    const float s = pow2_neg(log2_of(b) / 2);
    for (std::size_t j = 0; j < b; ++j) x[j] *= s;
    apply_signs<true>(c.seed, chunk, offset, x, b);
  }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::transform
