#pragma once
// quantize::natural: natural compression (Horvath et al., "Natural compression for distributed
// deep learning", 2019). Each value becomes a signed power of two, rounded stochastically:
// for 2^e <= |x| < 2^(e+1), q = sign(x) 2^(e+1) with probability p = (|x| - 2^e) / 2^e, else
// sign(x) 2^e. p is the float's mantissa field / 2^23 (exact) and is compared with
// unit_float(random), a multiple of r = 2^-16 with the compressor's 16-bit random numbers
// (random16_at in core/philox.hpp; r = 2^-24 with full 32-bit ones), so q rounds up with
// probability p rounded up to a multiple of r. Hence, for normal x:
//   |x - q| <= |x|,   0 <= |E[q]| - |x| < r 2^e <= r |x|   (unbiased to within r |x|),
//   E[(q - x)^2] = 4^e (p (1 - p) + d (1 - 2p)) <= (1/8 + r) x^2,  d = P(up) - p in [0, r)
// (the paper's relative variance 1/8, reached at p = 1/3).
//
// Code (9 bits, packed LSB first): sign << 8 | c, c the exponent code, which is the float's
// biased exponent field, so decoding is a shift:
//   c = 0          zero (+0 or -0);
//   c = 1 .. 254   +-2^(c - 127), i.e. 2^-126 .. 2^127;
//   c = 255        NaN or infinity (reserved): decodes to NaN, as E4M3 carries infinity, so an
//                  overflow upstream stays visible.
// Decisions at the ends of the float range:
// - Subnormal |x| < 2^-126 rounds to 0 or 2^-126, up with probability |x| / 2^-126 (the same
//   mantissa rule, rounded up to a multiple of r): unbiased to within r 2^-126, with error
//   < 2^-126 and variance < 2^-126 (|x| + r 2^-126) rather than the relative bounds above.
// - |x| >= 2^127 would round up to 2^128, which float lacks: it saturates to 2^127 (biased:
//   error < |x| / 2, not the variance bound). No finite value becomes non-finite.
// No groups, no metadata. Not summable.

#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/byteio.hpp"
#include "../core/concepts.hpp"
#include "../core/ids.hpp"
#include "../core/philox.hpp"

namespace gradcomp::quantize {
GRADCOMP_PRECISE_BEGIN

// No groups: ungrouped_quantizer's defaults, but stochastic. Not a cast: 9-bit codes.
struct natural : ungrouped_quantizer {
  using code_type = std::uint16_t;
  static constexpr unsigned bits = 9;
  static constexpr std::uint8_t id = ids::quantizer::natural;
  static constexpr bool summable = false;
  static constexpr bool unbiased(const config&) { return true; }
  GRADCOMP_HD static constexpr bool stochastic(const config&) { return true; }

  GRADCOMP_HD static code_type encode(const config&, const meta&, float x, std::uint32_t random) {
    const std::uint32_t u = float_bits(x);
    const std::uint32_t e = (u >> 23) & 0xffu;
    // p = mantissa / 2^23, exact: |x| / 2^e - 1 for normal x, |x| / 2^-126 for subnormal x.
    const float p = bits_float(0x3f800000u | (u & 0x7fffffu)) - 1.0f;
    // No rounding up from 2^127 (saturation) or from the reserved code 255.
    const std::uint32_t up = static_cast<std::uint32_t>(unit_float(random) < p) & static_cast<std::uint32_t>(e < 254u);
    return static_cast<code_type>(((u >> 23) & 0x100u) | (e + up));
  }

  GRADCOMP_HD static float decode(const config&, const meta&, code_type code) {
    const std::uint32_t c = code & 0x1ffu;
    return bits_float(detail::select((c & 0xffu) == 0xffu, 0x7fc00000u, c << 23));
  }

};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize
