#pragma once
// quantize::int_block<Bits, Range>: Bits-bit integers (8, 4 or 2) with one scale per group of
// `group` consecutive sent values (default 128; ZeRO++ and CGX quantize in blocks this way).
//
//   symmetric  (absmax, ZeRO++):  L = 2^(Bits-1) - 1, s = max|x| / L,
//              q = round(x / s) in [-L, L], code = q + L,        decoded = q * s
//   asymmetric (min-max, CGX):    Q = 2^Bits - 1, s = max/Q - min/Q, lo = min (-0 below +0),
//              q = round((x - lo) / s) in [0, Q], code = q,      decoded = lo + q * s
//
// Rounding (config): nearest, ties to even, with |x - decoded| <= s/2 + 2^-20 max|x| (the
// second term covers the float arithmetic: x / s is computed with a reciprocal, see
// pow2_normalizer in group.hpp); or stochastic (floor or ceiling, up with probability equal to
// the fraction, Philox random numbers keyed by seed and step), unbiased to within 2^-16 s,
// |x - decoded| < s + 2^-20 max|x|.
// An all-zero group has s = 0 and decodes to zeros. Metadata per group: f32 s
// (symmetric), f32 s then f32 lo (asymmetric). A group holding NaN or infinity gets a
// non-finite scale, and receivers reject the frame with errc::non_finite_value; so does an
// asymmetric group whose range max - min exceeds the float range.
// Not summable: each rank's scales differ (the agreed-scale path is a later codec).

#include <array>
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

enum class int_range : std::uint8_t {
  symmetric = 0,   // [-max|x|, max|x|], zero exact
  asymmetric = 1,  // [min x, max x], one more level, 8 metadata bytes per group
};

struct int_block_config {
  std::size_t group = 128;  // values per scale: a power of two in [1, 4096]
  rounding round = rounding::nearest;
  // The members a tool sets by name (core/options.hpp).
  static constexpr auto options() {
    return std::tuple{option{"group", &int_block_config::group}, option{"rounding", &int_block_config::round}};
  }
};

template <unsigned Bits, int_range Range = int_range::symmetric>
struct int_block : grouped_quantizer<int_block_config> {
  static_assert(Bits == 2 || Bits == 4 || Bits == 8, "int_block: Bits must be 8, 4 or 2");
  struct meta {
    float scale = 0.0f;
    float lo = 0.0f;   // asymmetric only
    // Not sent: encode computes x / scale as (x * pre) * inv, pre = pow2_normalizer(scale),
    // inv = 1 / (scale * pre) (no division per value, no overflowing or subnormal reciprocal).
    float pre = 1.0f;
    float inv = 0.0f;
  };
  static constexpr bool asymmetric = Range == int_range::asymmetric;
  static constexpr unsigned bits = Bits;
  static constexpr std::uint8_t id = ids::quantizer::int_block;
  static constexpr std::size_t meta_bytes = asymmetric ? 8 : 4;
  // Largest |q| (symmetric) or largest q (asymmetric).
  static constexpr float levels = asymmetric ? float((1u << Bits) - 1) : float((1u << (Bits - 1)) - 1);

  static constexpr std::uint16_t format_param(const config& c) {
    return static_cast<std::uint16_t>(group_param(c.group) | (asymmetric ? 0x10u : 0u) | Bits);
  }

  GRADCOMP_HD GRADCOMP_INLINE static meta fit(const config&, const float* x, std::size_t n) {
    meta m;
    if constexpr (asymmetric) {
      // Smallest and largest x in the order of order_key (integer min and max: they
      // vectorise); a NaN lands at an end and makes the scale NaN.
      std::int32_t lo = order_key(x[0]), hi = lo;
      for (std::size_t i = 1; i < n; ++i) {
        const std::int32_t k = order_key(x[i]);
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
      }
      m.lo = from_order_key(lo);
      m.scale = from_order_key(hi) / levels - m.lo / levels;  // no overflow for finite lo, hi
    } else {
      m.scale = max_abs(x, n) / levels;
    }
    // The largest code must decode to a finite value: near FLT_MAX, s * levels may round up
    // to infinity; one or two ulps less fixes that (the clamp in encode keeps codes in range).
    for (int i = 0; i < 2 && m.scale > 0.0f && is_finite_bits(float_bits(m.scale)) &&
                    !is_finite_bits(float_bits(decode({}, m, asymmetric ? levels : 2 * levels)));
         ++i)
      m.scale = bits_float(float_bits(m.scale) - 1);
    set_inverse(m);
    return m;
  }

  // Branch-free within each rounding mode (the mode test is loop-invariant: compilers split
  // the loop), so loops over a group vectorise.
  GRADCOMP_HD static code_type encode(const config& c, const meta& m, float x, std::uint32_t random) {
    const float t = asymmetric ? x - m.lo : x;
    // The clamp also maps NaN (a poisoned group) to a valid code.
    const float y = clamp_float((t * m.pre) * m.inv, asymmetric ? 0.0f : -levels, levels);
    const int q = c.round == rounding::stochastic ? static_cast<int>(round_stochastic(y, random)) : round_even_int(y);
    return static_cast<code_type>(q + (asymmetric ? 0 : static_cast<int>(levels)));
  }


  GRADCOMP_HD static float decode(const config&, const meta& m, code_type code) {
    const float q = static_cast<float>(static_cast<int>(code) - (asymmetric ? 0 : static_cast<int>(levels)));
    return asymmetric ? m.lo + q * m.scale : q * m.scale;
  }

  // NaN canonical: a poisoned group's scale is NaN arithmetic, whose bits differ by backend.
  GRADCOMP_HD static void store_meta(const meta& m, std::byte* out) {
    store_le<std::uint32_t>(out, float_bits(canonical_nan(m.scale)));
    if constexpr (asymmetric) store_le<std::uint32_t>(out + 4, float_bits(canonical_nan(m.lo)));
  }
  GRADCOMP_HD static meta load_meta(const std::byte* in) {
    meta m;
    m.scale = bits_float(load_le<std::uint32_t>(in));
    if constexpr (asymmetric) m.lo = bits_float(load_le<std::uint32_t>(in + 4));
    return m;
  }
  GRADCOMP_HD static status check_meta(const config&, const meta& m) {
    if (auto s = check_scale(m.scale, levels); !s) return s;
    if constexpr (asymmetric) {
      if (!is_finite_bits(float_bits(m.lo)) || !is_finite_bits(float_bits(m.lo + levels * m.scale)))
        return {errc::non_finite_value, "group minimum is NaN or inf, or its range overflows"};
    }
    return {};
  }

 private:
  // pre and inv of the meta; left 1 and 0 for a zero or non-finite scale (every value then
  // encodes as zero or as the clamp's bound).
  GRADCOMP_HD static void set_inverse(meta& m) {
    if (!(m.scale > 0.0f) || !is_finite_bits(float_bits(m.scale))) return;
    m.pre = pow2_normalizer(m.scale);
    m.inv = 1.0f / (m.scale * m.pre);
  }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize
