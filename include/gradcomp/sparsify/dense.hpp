#pragma once
// sparsify::dense: every element is sent; the frame has no index section.

#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/ids.hpp"

namespace gradcomp::sparsify {

struct dense {
  using policy_kind = sparsifier_tag;
  struct config {};
  static constexpr std::uint8_t id = ids::sparsifier::dense;
  static constexpr bool is_dense = true;
  static constexpr selection kind = selection::dense;

  static constexpr status validate(const config&) { return {}; }
  GRADCOMP_HD static constexpr std::size_t kept(const config&, std::size_t n) { return n; }
};

}  // namespace gradcomp::sparsify
