#pragma once
// quantize::none: values travel as fp32, bit for bit. Summable (float SUM).

#include <cstdint>

#include "../core/bits.hpp"
#include "../core/concepts.hpp"
#include "../core/ids.hpp"

namespace gradcomp::quantize {
GRADCOMP_PRECISE_BEGIN

struct none : ungrouped_quantizer {
  using code_type = std::uint32_t;
  static constexpr unsigned bits = 32;
  static constexpr std::uint8_t id = ids::quantizer::none;
  static constexpr bool unbiased(const config&) { return true; }
  static constexpr bool summable = true;

  GRADCOMP_HD static code_type encode(const config&, const meta&, float x, std::uint32_t) { return float_bits(x); }
  GRADCOMP_HD static float decode(const config&, const meta&, code_type c) { return bits_float(c); }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize
