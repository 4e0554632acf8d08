#pragma once
// feedback::none: what is not sent is dropped.

#include "../core/concepts.hpp"

namespace gradcomp::feedback {
GRADCOMP_PRECISE_BEGIN

struct none {
  using policy_kind = feedback_tag;
  struct config {};
  static constexpr bool has_state = false;

  static constexpr status validate(const config&) { return {}; }
  GRADCOMP_HD static float combine(const config&, float g, float) { return g; }
  GRADCOMP_HD static float remainder(const config&, float, float) { return 0.0f; }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::feedback
