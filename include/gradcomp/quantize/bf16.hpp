#pragma once
// quantize::bf16: values cast to bfloat16, round to nearest even.
// Bound: |x - q(x)| <= 2^-8 |x| for normal x (half an ulp of an 8-bit significand);
// subnormals keep their absolute error <= 2^-134; NaN and infinity are carried.
// Summable: transports may add bf16 codes (NCCL/MPI bf16 SUM).

#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/numeric.hpp"

namespace gradcomp::quantize {

struct bf16 {
  using policy_kind = quantizer_tag;
  struct config {};
  using code_type = std::uint16_t;
  static constexpr unsigned bits = 16;
  static constexpr std::uint8_t id = 2;
  static constexpr bool unbiased = false;
  static constexpr bool summable = true;

  static constexpr status validate(const config&) { return {}; }
  static constexpr std::uint16_t format_param(const config&) { return 0; }
  GRADCOMP_HD static code_type encode(const config&, float x) { return bf16_bits_from_float(x); }
  GRADCOMP_HD static float decode(const config&, code_type c) { return float_from_bf16_bits(c); }
};

}  // namespace gradcomp::quantize
