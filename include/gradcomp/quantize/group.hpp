#pragma once
// Pieces shared by the grouped quantizers: the group size rule, its place in the codec id,
// the rounding choice, the scale checks for metadata read from a frame, and grouped_quantizer,
// the members they have in common.

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/concepts.hpp"
#include "../core/status.hpp"

namespace gradcomp::quantize {
GRADCOMP_PRECISE_BEGIN

enum class rounding : std::uint8_t {
  nearest,     // round to nearest, ties to even: deterministic, biased by at most half a step
  stochastic,  // up with probability equal to the fraction: unbiased (Philox random numbers)
};

// Group sizes are powers of two in [1, max_group_size], so log2 fits 4 bits of the codec id.
GRADCOMP_HD constexpr bool valid_group_size(std::size_t g) {
  return g >= 1 && g <= max_group_size && (g & (g - 1)) == 0;
}

inline status check_group_size(std::size_t g) {
  if (!valid_group_size(g)) return {errc::invalid_argument, "quantizer group size must be a power of two in [1, 4096]"};
  return {};
}

// The group size in the top 4 bits of a format parameter: log2(g) << 12.
constexpr std::uint16_t group_param(std::size_t g) {
  unsigned log2 = 0;
  while ((std::size_t{1} << log2) < g) ++log2;
  return static_cast<std::uint16_t>(log2 << 12);
}

// 2^(127 - e), e the biased exponent of a magnitude a >= 0 clamped to [1, 253]: a times it
// lies in [1, 2) for normal a (below 1 for subnormal a), and it and its inverse are normal
// floats, so scaling by either is exact. Quantizers divide by a group's scale s as
// (x * pre) * (1 / (s * pre)) with pre = pow2_normalizer(s): no division per value, and the
// reciprocal neither overflows nor turns subnormal (which flush-to-zero would lose).
GRADCOMP_HD inline float pow2_normalizer(float a) {
  std::uint32_t e = float_bits(a) >> 23;  // NaN and infinity (e = 255) clamp like the largest
  e = e > 1u ? e : 1u;
  e = e < 253u ? e : 253u;
  return bits_float((254u - e) << 23);
}

// A scale read from a frame: finite, not negative (+0 allowed: an all-zero group), and
// `levels * scale` finite, so no code decodes to infinity.
GRADCOMP_HD inline status check_scale(float scale, float levels) {
  if (!is_finite_bits(float_bits(scale)) || !is_finite_bits(float_bits(scale * levels)))
    return {errc::non_finite_value, "group scale is NaN or inf (the sender's gradient held non-finite values)"};
  if (float_bits(scale) >> 31) return {errc::bad_meta, "group scale is negative"};
  return {};
}

// Defaults for quantizers with one metadata record per group of `group` consecutive sent
// values (the counterpart of ungrouped_quantizer in core/concepts.hpp). Config is the
// quantizer's config, an aggregate with `std::size_t group` (a power of two in [1, 4096]) and,
// where the rounding is a choice, `rounding round`; the quantizer derives from
// grouped_quantizer<its config> and adds `meta`, `meta_bytes`, `bits`, `id`, `fit`, `encode`,
// `decode`, `store_meta`, `load_meta` and `check_meta`. A member it declares itself replaces
// the default of the same name (stochastic and unbiased go together).
template <class Config>
struct grouped_quantizer {
  static_assert(requires(const Config& c) {
    { c.group } -> std::convertible_to<std::size_t>;
  }, "gradcomp::quantize::grouped_quantizer<Config>: Config needs `std::size_t group` (values per group)");
  using policy_kind = quantizer_tag;
  using config = Config;
  using code_type = std::uint8_t;
  static constexpr bool summable = false;  // each rank's group metadata differs

  static status validate(const config& c) { return check_group_size(c.group); }
  static constexpr std::uint16_t format_param(const config& c) { return group_param(c.group); }
  // Stochastic, and then unbiased, exactly when the config has round = rounding::stochastic.
  static constexpr bool unbiased(const config& c) { return stochastic(c); }
  GRADCOMP_HD static constexpr bool stochastic(const config& c) {
    if constexpr (requires { c.round; })
      return c.round == rounding::stochastic;
    else
      return false;
  }
  GRADCOMP_HD static constexpr std::size_t group_size(const config& c) { return c.group; }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize
