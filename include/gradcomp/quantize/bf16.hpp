#pragma once
// quantize::bf16: values cast to bfloat16, round to nearest even.
// Bound: |x - q(x)| <= 2^-8 |x| for normal x (half an ulp of an 8-bit significand);
// subnormals keep their absolute error <= 2^-134; NaN and infinity are carried.
// Summable: transports may add bf16 codes (NCCL/MPI bf16 SUM).

#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/ids.hpp"
#include "../core/numeric.hpp"

namespace gradcomp::quantize {
GRADCOMP_PRECISE_BEGIN

struct bf16 : ungrouped_quantizer {
  using code_type = std::uint16_t;
  static constexpr unsigned bits = 16;
  static constexpr std::uint8_t id = ids::quantizer::bf16;
  static constexpr bool unbiased(const config&) { return false; }
  static constexpr bool summable = true;

  GRADCOMP_HD static code_type encode(const config&, const meta&, float x, std::uint32_t) { return bf16_bits_from_float(x); }
  GRADCOMP_HD static float decode(const config&, const meta&, code_type c) { return float_from_bf16_bits(c); }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize
