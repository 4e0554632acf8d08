#pragma once
// A quantizer written only for the tests, to show what adding one takes: this header of math
// and nothing else. No backend file names it; both backends run it through their generic
// paths (tests/engine/new_policy_test.cpp, tests/cuda/new_policy_test.cu).
//
// log2_levels: 4-bit codes, a sign bit and a distance e in binades below the group's largest
// magnitude M: decoded = +-2^(E(M) - e) for e < 7 (E the binary exponent), 0 for e = 7. A
// value x decodes to the power of two at or below |x| when it lies within seven binades of M,
// so |decoded| <= |x| < 2 |decoded|; smaller values become 0. Metadata: f32 M per group.
// grouped_quantizer supplies the group members (config.group, validate, format_param, ...);
// the id lies in the range gradcomp leaves to policies defined outside it (core/ids.hpp).
#include <gradcomp/core/bits.hpp>
#include <gradcomp/core/byteio.hpp>
#include <gradcomp/core/concepts.hpp>
#include <gradcomp/core/ids.hpp>
#include <gradcomp/core/reduce.hpp>
#include <gradcomp/quantize/group.hpp>

namespace gradcomp::test {

struct log2_config {
  std::size_t group = 64;
};

struct log2_levels : quantize::grouped_quantizer<log2_config> {
  struct meta {
    float max = 0.0f;
  };
  static constexpr unsigned bits = 4;
  static constexpr std::uint8_t id = 200;
  static_assert(id >= ids::first_user);
  static constexpr std::size_t meta_bytes = 4;

  GRADCOMP_HD static meta fit(const config&, const float* x, std::size_t n) { return {max_abs(x, n)}; }

  GRADCOMP_HD static code_type encode(const config&, const meta& m, float x, std::uint32_t) {
    const std::uint32_t bx = float_bits(x), ex = bx >> 23 & 0xffu, em = float_bits(m.max) >> 23 & 0xffu;
    const std::uint32_t below = em > ex ? em - ex : 0u;  // binades below M (0: x's binade is M's)
    const std::uint32_t e = ex == 0u || below > 6u ? 7u : below;
    return static_cast<code_type>((bx >> 31) << 3 | e);
  }

  GRADCOMP_HD static float decode(const config&, const meta& m, code_type c) {
    const std::uint32_t e = c & 7u, em = float_bits(m.max) >> 23 & 0xffu;
    const std::uint32_t magnitude = e < 7u && em > e ? (em - e) << 23 : 0u;
    return bits_float(static_cast<std::uint32_t>(c >> 3) << 31 | magnitude);
  }

  GRADCOMP_HD static void store_meta(const meta& m, std::byte* out) { store_le<std::uint32_t>(out, float_bits(m.max)); }
  GRADCOMP_HD static meta load_meta(const std::byte* in) { return {bits_float(load_le<std::uint32_t>(in))}; }
  GRADCOMP_HD static status check_meta(const config&, const meta& m) {
    if (!is_finite_bits(float_bits(m.max))) return {errc::non_finite_value, "group maximum is NaN or inf"};
    if (float_bits(m.max) >> 31) return {errc::bad_meta, "group maximum is negative"};
    return {};
  }
};

}  // namespace gradcomp::test
