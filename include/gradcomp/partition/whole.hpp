#pragma once
// partition::whole: the whole buffer is one chunk, one frame (an empty buffer included).

#include <cstddef>

#include "../core/concepts.hpp"

namespace gradcomp::partition {

struct whole {
  using policy_kind = partitioner_tag;
  struct config {};

  static constexpr status validate(const config&) { return {}; }
  GRADCOMP_HD static constexpr std::size_t chunk_count(const config&, std::size_t, std::size_t) { return 1; }
  GRADCOMP_HD static constexpr chunk_range chunk_at(const config&, std::size_t n, std::size_t, std::size_t) { return {0, n}; }
};

}  // namespace gradcomp::partition
