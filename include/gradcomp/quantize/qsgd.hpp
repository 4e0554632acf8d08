#pragma once
// quantize::qsgd<Bits> (Alistarh et al., "QSGD: Communication-Efficient SGD via Gradient
// Quantization and Encoding", NeurIPS 2017): stochastic quantization onto s uniform levels of
// the bucket's L2 norm. Per group ("bucket") of n <= `group` consecutive sent values v
// (default 512) and s = `levels` (default 2^(Bits-1) - 1, valid 1 .. 2^(Bits-1) - 1):
//
//   y = |x| / ||v|| * s in [0, s],   level = floor(y) + Bernoulli(y - floor(y)),
//   code = sign bit (the top bit of the Bits-bit code: x's float sign) | level,
//   decoded = sign * level * (||v|| / s).
//
// Always stochastic (16-bit Philox random numbers keyed by seed and step), unbiased to within
// the random numbers' resolution and float rounding: |E[decoded] - x| <= 2^-16 ||v||/s +
// 2^-20 |x|, and |x - decoded| < ||v||/s + 2^-20 ||v||.
// Variance (Lemma 3.1 of the paper), per bucket of n values:
//   E||Q(v) - v||^2 <= min(n/s^2, sqrt(n)/s) ||v||^2
// (each value contributes (||v||/s)^2 p(1 - p), p = y - floor(y), so n/(4s^2) also holds);
// up to float rounding of the computed norm, which is within a few ulps of ||v||.
//
// The norm, in a fixed order: with k the power of two that puts k max|x| in [1, 4) (clamped
// to normal powers of two for the extreme exponents; k x and the final / k are exact),
//   ||v|| = sqrt(tree_sum((k x_i)^2)) / k     (tree_sum: core/reduce.hpp; sqrt correctly rounded),
// so squares neither overflow nor underflow. A finite group whose norm exceeds the float
// range sends the largest float instead (an ulp lower if s * (norm / s) would round to
// infinity): still max|x| or more (to within that ulp), so still unbiased and within the
// bound. A group holding NaN or infinity gets a non-finite norm, and receivers reject the
// frame (errc::non_finite_value).
// Metadata per group: f32 norm. A code whose level exceeds s (no encoder writes one) decodes
// as level s, so every code of a frame whose norms passed check_meta decodes finite.
// Not summable: each rank's norms differ.

#include <cmath>
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

template <unsigned Bits>
struct qsgd_config {
  std::size_t group = 512;                   // bucket size: a power of two in [1, 4096]
  unsigned levels = (1u << (Bits - 1)) - 1;  // s, in [1, 2^(Bits-1) - 1]
  // The members a tool sets by name (core/options.hpp).
  static constexpr auto options() {
    return std::tuple{option{"group", &qsgd_config::group}, option{"levels", &qsgd_config::levels}};
  }
};

template <unsigned Bits = 4>
struct qsgd : grouped_quantizer<qsgd_config<Bits>> {
  static_assert(Bits >= 2 && Bits <= 8, "qsgd: Bits must be in [2, 8] (a sign bit and at least one level bit)");
  using base = grouped_quantizer<qsgd_config<Bits>>;  // depends on Bits: the names used below are brought in
  using typename base::config;
  using typename base::code_type;
  // Most levels the code holds: 2^(Bits-1) - 1.
  static constexpr unsigned max_levels = (1u << (Bits - 1)) - 1;
  struct meta {
    float norm = 0.0f;
    // Not sent: encode computes |x| / norm * s as (|x| * pre) * inv with pre a power of two
    // that keeps inv = s / (norm * pre) a normal number (no division, no branch per value).
    float pre = 1.0f;
    float inv = 0.0f;  // 0 for a zero or non-finite norm
  };
  static constexpr unsigned bits = Bits;
  static constexpr std::uint8_t id = ids::quantizer::qsgd;
  static constexpr std::size_t meta_bytes = 4;

  static status validate(const config& c) {
    if (auto s = check_group_size(c.group); !s) return s;
    if (c.levels < 1 || c.levels > max_levels) return {errc::invalid_argument, "qsgd levels must be in [1, 2^(Bits-1) - 1]"};
    return {};
  }
  static constexpr std::uint16_t format_param(const config& c) {
    return static_cast<std::uint16_t>(group_param(c.group) | (c.levels & 0xfffu));
  }
  static constexpr bool unbiased(const config&) { return true; }
  GRADCOMP_HD static constexpr bool stochastic(const config&) { return true; }

  GRADCOMP_HD GRADCOMP_INLINE static meta fit(const config& c, const float* x, std::size_t n) {
    const float amax = max_abs(x, n);
    const float k = pow2_normalizer(amax);  // k * x exact, squares neither overflow nor vanish
    const float sum = tree_sum(x, n, [k](float v) { return square_rn(v * k); });
    meta m;
    m.norm = sqrt_rn(sum) * (1.0f / k);
    if (is_finite_bits(float_bits(amax)) && !is_finite_bits(float_bits(m.norm))) m.norm = bits_float(0x7f7fffffu);
    // Level s must decode finite: near the largest float, s * (norm / s) may round up to
    // infinity; one ulp less fixes that for every s <= 4095 (two steps, to be safe).
    const float s = levels(c);
    for (int i = 0; i < 2 && m.norm > 0.0f && is_finite_bits(float_bits(m.norm)) &&
                    !is_finite_bits(float_bits(s * (m.norm / s)));
         ++i)
      m.norm = bits_float(float_bits(m.norm) - 1);
    // k * norm is in [2^-23, 256) (below 1 only for subnormal groups), so s / (k * norm) is a
    // normal number; k * norm and k * x are exact.
    if (m.norm > 0.0f && is_finite_bits(float_bits(m.norm))) {
      m.pre = k;
      m.inv = s / (m.norm * k);
    }
    return m;
  }

  // Branch-free, so loops over a group vectorise.
  GRADCOMP_HD static code_type encode(const config& c, const meta& m, float x, std::uint32_t random) {
    const float ax = bits_float(abs_key(x));
    // The clamp also maps NaN (a poisoned group) to a valid code.
    const float y = clamp_float((ax * m.pre) * m.inv, 0.0f, levels(c));
    const unsigned level = static_cast<unsigned>(round_stochastic(y, random));
    return static_cast<code_type>(((float_bits(x) >> 31) << (Bits - 1)) | level);
  }

  GRADCOMP_HD static float decode(const config& c, const meta& m, code_type code) {
    const float s = levels(c);
    const float level = static_cast<float>(code & max_levels);
    const float magnitude = select_float(level <= s, level, s) * (m.norm / s);
    return bits_float(float_bits(magnitude) | (static_cast<std::uint32_t>(code >> (Bits - 1)) << 31));
  }


  // NaN canonical: a poisoned group's norm is NaN arithmetic, whose bits differ by backend.
  GRADCOMP_HD static void store_meta(const meta& m, std::byte* out) {
    store_le<std::uint32_t>(out, float_bits(canonical_nan(m.norm)));
  }
  GRADCOMP_HD static meta load_meta(const std::byte* in) {
    meta m;
    m.norm = bits_float(load_le<std::uint32_t>(in));
    return m;
  }
  // The norm: finite, not negative (+0: an all-zero group), and level s decodes finite.
  GRADCOMP_HD static status check_meta(const config& c, const meta& m) {
    const float s = levels(c);
    return check_scale(m.norm / s, s);
  }

 private:
  GRADCOMP_HD static float levels(const config& c) { return static_cast<float>(c.levels); }

  // Correctly rounded square root (IEEE 754 requires it of sqrt, so host and device agree):
  // std::sqrt compiles to the hardware instruction without fast-math; __fsqrt_rn rounds to
  // nearest whatever -prec-sqrt says.
  GRADCOMP_HD static float sqrt_rn(float x) {
#if GRADCOMP_DEVICE_CODE
    return __fsqrt_rn(x);
#else
    return std::sqrt(x);
#endif
  }

  // y * y, never fused into the tree's additions: on the device __fmul_rn is exempt from
  // FMA contraction whatever --fmad says (the host builds with -ffp-contract=off).
  GRADCOMP_HD static float square_rn(float y) {
#if GRADCOMP_DEVICE_CODE
    return __fmul_rn(y, y);
#else
    return y * y;
#endif
  }

};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize
