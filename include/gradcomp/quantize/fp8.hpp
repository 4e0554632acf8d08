#pragma once
// quantize::fp8_e4m3 and quantize::fp8_e5m2: values as OCP 8-bit floats (core/fp8.hpp), cast
// directly or with one power-of-two scale per group of `group` consecutive sent values.
//
//   plain  (group = 0, the default): code = fp8(x), decoded = fp8_decode(code); no metadata.
//   scaled (group a power of two in [1, 4096]): s = 2^k with k the smallest integer such that
//          max|x| / s <= fp8_max, clamped to [-126, 127 - emax] (fp8_max = 1.75 * 2^emax:
//          448 = 1.75 * 2^8 for E4M3, 57344 = 1.75 * 2^15 for E5M2);
//          code = fp8(clamp(x * 2^-k, +-fp8_max)), decoded = fp8_decode(code) * s.
//
// Why a power of two (as the shared E8M0 scales of OCP MX): x * 2^-k and fp8 * 2^k are exact
// in float, so the only error is the fp8 rounding itself, decoding is exact, and s comes from
// the exponent bits of max|x| by integer operations (same bits on every backend, no division).
// The cost is at most one binade of the fp8 range left unused (max|x| / s > fp8_max / 2); a
// float format's relative precision is the same in every binade, so only the subnormal floor
// moves. The clamp of k keeps s and 1/s normal floats and fp8_max * s finite.
//
// Rounding: to nearest, ties to even; deterministic, so biased (by at most the bound below).
// Error bound, with y = |x| / s (s = 1 when plain) and M = 3 (E4M3) or 2 (E5M2) mantissa bits:
//   |x - decoded| <= 2^-(M+1) |x|   (2^-4 E4M3, 2^-3 E5M2) for y in the normal range
//                                   [2^-6, 448] (E4M3), [2^-14, 57344] (E5M2);
//   |x - decoded| <= 2^-10 s (E4M3), 2^-17 s (E5M2) for y below it (half the smallest
//                                   subnormal, times s).
// Beyond the range: plain E4M3 rounds 448 < |x| <= 464 to 448 (within the bound), saturates
// larger finite values to +-448 and turns +-inf into NaN; plain E5M2 rounds |x| < 61440 to at
// most 57344 (within the bound) and larger |x| to +-inf; NaN stays NaN. Scaled, only |x| > 1.75 * 2^127 (about 2.98e38, where k reaches its top) lies
// beyond the range: it saturates to +-1.75 * 2^127.
// Metadata per group (scaled only): f32 s. A group holding NaN or infinity gets s = that
// max|x| (non-finite), and receivers reject the frame with errc::non_finite_value. A scale
// read from a frame must be a power of two in [2^-126, 2^(127 - emax)]: errc::bad_meta, or
// errc::non_finite_value for one so large that fp8_max * s overflows (as check_scale has it).
// Format parameter: 0 when plain; log2(group) << 12 | 1 when scaled.
// Not summable: fp8 codes added element-wise would round at every step, and scales differ.

#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/byteio.hpp"
#include "../core/concepts.hpp"
#include "../core/fp8.hpp"
#include "../core/ids.hpp"
#include "../core/options.hpp"
#include "../core/reduce.hpp"
#include "../core/rounding.hpp"
#include "group.hpp"

namespace gradcomp::quantize {
GRADCOMP_PRECISE_BEGIN

enum class fp8_format : std::uint8_t { e4m3, e5m2 };

struct fp8_config {
  std::size_t group = 0;  // 0: plain cast; else values per scale, a power of two in [1, 4096]
  // The members a tool sets by name (core/options.hpp).
  static constexpr auto options() { return std::tuple{option{"group", &fp8_config::group}}; }
};

template <fp8_format Format>
struct fp8 : grouped_quantizer<fp8_config> {
  struct meta {
    float scale = 1.0f;  // 2^k
    float inv = 1.0f;    // 2^-k; not sent
  };
  static constexpr bool e4m3 = Format == fp8_format::e4m3;
  static constexpr unsigned bits = 8;
  static constexpr std::uint8_t id = e4m3 ? ids::quantizer::fp8_e4m3 : ids::quantizer::fp8_e5m2;
  static constexpr std::size_t meta_bytes = 4;
  static constexpr float max = e4m3 ? fp8_e4m3_max : fp8_e5m2_max;
  static constexpr int emax = e4m3 ? 8 : 15;  // max = 1.75 * 2^emax
  static constexpr int k_min = -126, k_max = 127 - emax;

  static status validate(const config& c) {
    if (c.group != 0 && !valid_group_size(c.group))
      return {errc::invalid_argument, "fp8 group must be 0 (plain cast) or a power of two in [1, 4096]"};
    return {};
  }
  static constexpr std::uint16_t format_param(const config& c) {
    return c.group == 0 ? std::uint16_t{0} : static_cast<std::uint16_t>(group_param(c.group) | 1u);
  }

  GRADCOMP_HD GRADCOMP_INLINE static meta fit(const config&, const float* x, std::size_t n) {
    const std::uint32_t a = abs_key(max_abs(x, n));
    // max|x| = 1.f * 2^e; max|x| / 2^(e - emax) = 1.f * 2^emax fits max = 1.75 * 2^emax when
    // 1.f <= 1.75 (mantissa bits <= 0x600000), else one more power of two is needed.
    int k = static_cast<int>(a >> 23) - 127 - emax + ((a & 0x7fffffu) > 0x600000u ? 1 : 0);
    k = k < k_min ? k_min : k;  // zero and tiny groups
    k = k > k_max ? k_max : k;  // near FLT_MAX: max * s stays finite
    meta m;
    m.scale = bits_float(detail::select(is_finite_bits(a), static_cast<std::uint32_t>(127 + k) << 23, a));
    m.inv = bits_float(static_cast<std::uint32_t>(127 - k) << 23);
    return m;
  }

  // Both modes are computed and one selected on the bits, so loops over values vectorise.
  GRADCOMP_HD static code_type encode(const config& c, const meta& m, float x, std::uint32_t) {
    // x * 2^-k is exact (results below 2^-126 are fp8 zeros anyway). The clamp only acts for
    // |x| > 1.75 * 2^127, or on NaN (-max: the group's scale is non-finite, the frame rejected).
    const float scaled = clamp_float(x * m.inv, -max, max);
    const float y = select_float(c.group != 0, scaled, x);
    return e4m3 ? fp8_e4m3_bits_from_float(y) : fp8_e5m2_bits_from_float(y);
  }


  GRADCOMP_HD static float decode(const config& c, const meta& m, code_type code) {
    const float v = e4m3 ? float_from_fp8_e4m3_bits(code) : float_from_fp8_e5m2_bits(code);
    return select_float(c.group != 0, canonical_nan(v * m.scale), v);  // exact for a checked scale
  }

  GRADCOMP_HD static void store_meta(const meta& m, std::byte* out) { store_le<std::uint32_t>(out, float_bits(m.scale)); }
  GRADCOMP_HD static meta load_meta(const std::byte* in) {
    meta m;
    const std::uint32_t s = load_le<std::uint32_t>(in);
    m.scale = bits_float(s);
    // 2^-k for a scale 2^k; meaningless (but harmless) for scales check_meta rejects.
    m.inv = bits_float((254u << 23) - (s & 0x7f800000u));
    return m;
  }
  GRADCOMP_HD static status check_meta(const config&, const meta& m) {
    if (auto s = check_scale(m.scale, max); !s) return s;  // also rejects s > 2^k_max
    const std::uint32_t b = float_bits(m.scale);
    if ((b & 0x7fffffu) != 0 || (b >> 23) < static_cast<std::uint32_t>(127 + k_min))
      return {errc::bad_meta, "fp8 group scale is not a power of two in [2^-126, 2^(127 - emax)]"};
    return {};
  }
};

using fp8_e4m3 = fp8<fp8_format::e4m3>;
using fp8_e5m2 = fp8<fp8_format::e5m2>;

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize
