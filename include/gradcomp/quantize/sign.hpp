#pragma once
// quantize::sign: one bit per value, its sign, times one scale per group of `group`
// consecutive sent values (default 128): the scaled sign of EF-signSGD (Karimireddy et al.,
// "Error Feedback Fixes SignSGD and other Gradient Compression Schemes", ICML 2019) and of
// 1-bit Adam (Tang et al., ICML 2021).
//
//   scale = mean |x| = tree_sum(|x|) / n    (core/reduce.hpp order; one correctly rounded division),
//   code = 1 if x < 0 else 0 (x == 0, -0 included, encodes as +),   decoded = code ? -scale : +scale.
//
// Deterministic and biased. Per group of n values, exactly up to float rounding:
//   ||Q(v) - v||^2 = ||v||^2 - ||v||_1^2 / n <= (1 - 1/n) ||v||^2,
// a contraction (a delta-compressor with delta = ||v||_1^2 / (n ||v||^2) >= 1/n), so it is
// meant for feedback::residual, which carries what each step lost into the next and is what
// makes sign compression converge; without it the error is never corrected.
// Codes are packed LSB first, 8 values per byte. An all-zero group has scale 0 and decodes to
// zeros. A finite group whose sum of |x| overflows is summed again scaled by 2^-12 (exact
// for every value that matters) and its mean capped at max|x|, which it never exceeds.
// Metadata per group: f32 scale. A group holding NaN or infinity gets a non-finite scale,
// and receivers reject the frame with errc::non_finite_value. Not summable.

#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/byteio.hpp"
#include "../core/concepts.hpp"
#include "../core/ids.hpp"
#include "../core/options.hpp"
#include "../core/reduce.hpp"
#include "group.hpp"


namespace gradcomp::quantize {
GRADCOMP_PRECISE_BEGIN

struct sign_config {
  std::size_t group = 128;  // values per scale: a power of two in [1, 4096]
  // The members a tool sets by name (core/options.hpp).
  static constexpr auto options() { return std::tuple{option{"group", &sign_config::group}}; }
};

struct sign : grouped_quantizer<sign_config> {
  struct meta {
    float scale = 0.0f;
  };
  static constexpr unsigned bits = 1;
  static constexpr std::uint8_t id = ids::quantizer::sign;
  static constexpr std::size_t meta_bytes = 4;

  GRADCOMP_HD GRADCOMP_INLINE static meta fit(const config&, const float* x, std::size_t n) {
    const float count = static_cast<float>(n);  // n <= 4096: exact
    meta m;
    m.scale = tree_sum(x, n, [](float v) { return bits_float(abs_key(v)); }) / count;
    if (!is_finite_bits(float_bits(m.scale))) {
      const float amax = max_abs(x, n);
      if (is_finite_bits(float_bits(amax))) {
        const float sum = tree_sum(x, n, [](float v) { return bits_float(abs_key(v)) * 0x1p-12f; });
        const float mean = sum / count * 4096.0f;
        m.scale = mean < amax ? mean : amax;
      }
    }
    return m;
  }


  GRADCOMP_HD static code_type encode(const config&, const meta&, float x, std::uint32_t) {
    return static_cast<code_type>(x < 0.0f ? 1u : 0u);
  }

  GRADCOMP_HD static float decode(const config&, const meta& m, code_type code) {
    return bits_float(float_bits(m.scale) | (static_cast<std::uint32_t>(code & 1u) << 31));
  }


  // NaN canonical: a poisoned group's mean is NaN arithmetic, whose bits differ by backend.
  GRADCOMP_HD static void store_meta(const meta& m, std::byte* out) {
    store_le<std::uint32_t>(out, float_bits(canonical_nan(m.scale)));
  }
  GRADCOMP_HD static meta load_meta(const std::byte* in) {
    meta m;
    m.scale = bits_float(load_le<std::uint32_t>(in));
    return m;
  }
  GRADCOMP_HD static status check_meta(const config&, const meta& m) { return check_scale(m.scale, 1.0f); }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize
