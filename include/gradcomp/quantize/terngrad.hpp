#pragma once
// quantize::terngrad (Wen et al., "TernGrad: Ternary Gradients to Reduce Communication in
// Distributed Deep Learning", NeurIPS 2017): each value becomes -s, 0 or +s, in 2 bits, with
// one scale per group of `group` consecutive sent values (default 128):
//
//   s = max|x|,   b = 1 with probability |x| / s (Philox random numbers), else 0,
//   decoded = sign(x) * b * s.
//
// Code (sign-magnitude, the layout of qsgd<2> with one level): bit 0 = b, bit 1 = x's float
// sign. 1 decodes to +s, 3 to -s, 0 and 2 to +0 and -0; every 2-bit code is a valid value,
// so a receiver needs no per-code check (a layout 0 / +s / -s would leave code 3 undefined).
// Always stochastic (16-bit Philox random numbers keyed by seed and step), unbiased to within
// the random numbers' resolution and float rounding: |E[decoded] - x| <= 2^-16 s + 2^-22 |x|;
// |x - decoded| <= s; per value E(decoded - x)^2 = s|x| - x^2 <= s^2/4, so per group
// E||Q(v) - v||^2 = s ||v||_1 - ||v||^2.
// The paper's scale is per layer, optionally after clipping at 2.5 standard deviations;
// per-group scales are finer, and clipping belongs before compression.
// An all-zero group has s = 0 and decodes to zeros. Metadata per group: f32 s. A group holding
// NaN or infinity gets a non-finite scale, and receivers reject the frame with
// errc::non_finite_value. Not summable: each rank's scales differ.

#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/byteio.hpp"
#include "../core/concepts.hpp"
#include "../core/ids.hpp"
#include "../core/options.hpp"
#include "../core/reduce.hpp"
#include "../core/rounding.hpp"
#include "group.hpp"

namespace gradcomp::quantize {
GRADCOMP_PRECISE_BEGIN

struct terngrad_config {
  std::size_t group = 128;  // values per scale: a power of two in [1, 4096]
  // The members a tool sets by name (core/options.hpp).
  static constexpr auto options() { return std::tuple{option{"group", &terngrad_config::group}}; }
};

struct terngrad : grouped_quantizer<terngrad_config> {
  struct meta {
    float scale = 0.0f;
    // Not sent: encode computes |x| / scale as (|x| * pre) * inv with pre a power of two
    // that puts scale * pre near 1 (no division, no branch per value).
    float pre = 1.0f;
    float inv = 0.0f;  // 0 for a zero or non-finite scale
  };
  static constexpr unsigned bits = 2;
  static constexpr std::uint8_t id = ids::quantizer::terngrad;
  static constexpr std::size_t meta_bytes = 4;

  static constexpr bool unbiased(const config&) { return true; }
  GRADCOMP_HD static constexpr bool stochastic(const config&) { return true; }

  // s = max|x| needs no nudge: +-1 * s is s itself, finite whenever the inputs are.
  GRADCOMP_HD GRADCOMP_INLINE static meta fit(const config&, const float* x, std::size_t n) {
    meta m;
    m.scale = max_abs(x, n);
    if (m.scale > 0.0f && is_finite_bits(float_bits(m.scale))) {
      m.pre = pow2_normalizer(m.scale);
      m.inv = 1.0f / (m.scale * m.pre);
    }
    return m;
  }

  // Branch-free, so loops over a group vectorise.
  GRADCOMP_HD static code_type encode(const config&, const meta& m, float x, std::uint32_t random) {
    const float ax = bits_float(abs_key(x));
    // The clamp also maps NaN (a poisoned group) to a valid code.
    const float p = clamp_float((ax * m.pre) * m.inv, 0.0f, 1.0f);
    const unsigned b = static_cast<unsigned>(round_stochastic(p, random));
    return static_cast<code_type>(((float_bits(x) >> 31) << 1) | b);
  }

  GRADCOMP_HD static float decode(const config&, const meta& m, code_type code) {
    const float magnitude = static_cast<float>(code & 1u) * m.scale;
    return bits_float(float_bits(magnitude) | (static_cast<std::uint32_t>((code >> 1) & 1u) << 31));
  }


  GRADCOMP_HD static void store_meta(const meta& m, std::byte* out) { store_le<std::uint32_t>(out, float_bits(m.scale)); }
  GRADCOMP_HD static meta load_meta(const std::byte* in) {
    meta m;
    m.scale = bits_float(load_le<std::uint32_t>(in));
    return m;
  }
  GRADCOMP_HD static status check_meta(const config&, const meta& m) { return check_scale(m.scale, 1.0f); }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize
