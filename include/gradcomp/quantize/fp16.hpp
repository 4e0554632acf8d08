#pragma once
// quantize::fp16: values cast to IEEE binary16, round to nearest even, subnormals kept.
// Bound: |x - q(x)| <= 2^-11 |x| for 2^-14 <= |x| < 65520, <= 2^-25 below; |x| >= 65520
// becomes infinity (no saturation: overflow must stay visible to loss scaling).
// Summable (fp16 SUM).

#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/ids.hpp"
#include "../core/numeric.hpp"


namespace gradcomp::quantize {
GRADCOMP_PRECISE_BEGIN

struct fp16 : ungrouped_quantizer {
  using code_type = std::uint16_t;
  static constexpr unsigned bits = 16;
  static constexpr std::uint8_t id = ids::quantizer::fp16;
  static constexpr bool unbiased(const config&) { return false; }
  static constexpr bool summable = true;

  GRADCOMP_HD static code_type encode(const config&, const meta&, float x, std::uint32_t) { return fp16_bits_from_float(x); }
  GRADCOMP_HD static float decode(const config&, const meta&, code_type c) { return float_from_fp16_bits(c); }

};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize
