#pragma once
// quantize::none: values travel as fp32, bit for bit. Summable (float SUM).

#include <cstdint>

#include "../core/bits.hpp"
#include "../core/concepts.hpp"

namespace gradcomp::quantize {

struct none {
  using policy_kind = quantizer_tag;
  struct config {};
  using code_type = std::uint32_t;
  static constexpr unsigned bits = 32;
  static constexpr std::uint8_t id = 1;
  static constexpr bool unbiased = true;
  static constexpr bool summable = true;

  static constexpr status validate(const config&) { return {}; }
  static constexpr std::uint16_t format_param(const config&) { return 0; }
  GRADCOMP_HD static code_type encode(const config&, float x) { return float_bits(x); }
  GRADCOMP_HD static float decode(const config&, code_type c) { return bits_float(c); }
};

}  // namespace gradcomp::quantize
