#pragma once
// feedback::momentum (DGC, Lin et al. 2018: momentum correction and factor masking):
//   g' = c g, c = min(1, clip_norm / ||g||_chunk) when clip_norm > 0, else 1 (local clipping)
//   u = m u + g'        velocity, kept per element (state::momentum)
//   v = v + u           accumulated update, kept per element (state::residual); x = v
//   send C(x);  where a value was sent: v = x - decoded (0 for a lossless value), u = 0.
// Unsent elements keep v and u, so they are sent later with their momentum intact. The
// norm is per chunk (the whole buffer with partition::whole), summed in the fixed tree order
// of core/reduce.hpp. DGC's density warm-up is sparsify::density_schedule.

#include <cmath>

#include "../core/bits.hpp"
#include "../core/concepts.hpp"
#include "../core/rounding.hpp"

namespace gradcomp::feedback {
GRADCOMP_PRECISE_BEGIN

struct momentum {
  using policy_kind = feedback_tag;
  struct config {
    float factor = 0.9f;     // m, in [0, 1)
    float clip_norm = 0.0f;  // local gradient clipping by the chunk's L2 norm; 0: off
  };
  static constexpr bool has_state = true;
  static constexpr bool has_momentum = true;

  static status validate(const config& c) {
    if (!(c.factor >= 0.0f && c.factor < 1.0f)) return {errc::invalid_argument, "momentum factor must be in [0, 1)"};
    if (!(c.clip_norm >= 0.0f && std::isfinite(c.clip_norm)))
      return {errc::invalid_argument, "momentum clip_norm must be finite and >= 0"};
    return {};
  }
  // u' = m u + g (g already clipped).
  GRADCOMP_HD static float velocity(const config& c, float g, float u) { return canonical_nan(mul_rn(c.factor, u) + g); }
  // x = v + u'.
  GRADCOMP_HD static float combine(const config&, float u, float v) { return canonical_nan(v + u); }
  GRADCOMP_HD static float remainder(const config&, float x, float sent) { return canonical_nan(x - sent); }
  // The factor c applied to a chunk's gradient whose squared L2 norm is norm2.
  static float clip_scale(const config& c, float norm2) {
    if (c.clip_norm <= 0.0f || !(norm2 > 0.0f)) return 1.0f;
    const float norm = std::sqrt(norm2);
    return norm > c.clip_norm ? c.clip_norm / norm : 1.0f;
  }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::feedback
