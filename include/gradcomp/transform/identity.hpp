#pragma once
// The identity transform: the default fifth policy of every composition. It changes nothing,
// writes 0 into the frame header's transform fields and compiles away.

#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/config.hpp"
#include "../core/status.hpp"

namespace gradcomp::transform {

struct identity {
  using policy_kind = transform_tag;
  static constexpr bool is_identity = true;
  struct config {};
  static status validate(const config&) { return {}; }
  GRADCOMP_HD static std::uint32_t word(const config&) { return 0; }
  GRADCOMP_HD static std::uint32_t seed(const config&) { return 0; }
  GRADCOMP_HD static std::size_t block(const config&) { return 1; }
  GRADCOMP_HD static void forward_block(const config&, std::uint32_t, std::size_t, float*, float*, std::size_t) {}
  GRADCOMP_HD static void inverse_block(const config&, std::uint32_t, std::size_t, float*, float*, std::size_t) {}
};

}  // namespace gradcomp::transform
