#pragma once
// feedback::residual (error feedback, Seide et al. 2014; Karimireddy et al. 2019): the part
// of x = g + s e that was not sent is kept and added to the next step's gradient:
//   x = g + s e;   send C(x);   e' = x - decoded(C(x))   (e' = x where nothing was sent).
// s is `scale` (1 by default): a decay, or the learning-rate ratio lr_t / lr_t+1 of EF with a
// changing learning rate (BytePS, EF-signSGD), which the trainer sets between steps.
// Conservation: decoded + e' == x element by element, up to one rounding of x - decoded
// (exact whenever decoded is within a factor 2 of x, or 0: Sterbenz), x being g + s e
// rounded once to fp32 (exactly g + e when s = 1). NaN results are canonical (core/bits.hpp).

#include <cmath>

#include "../core/bits.hpp"
#include "../core/concepts.hpp"
#include "../core/options.hpp"
#include "../core/rounding.hpp"

namespace gradcomp::feedback {
GRADCOMP_PRECISE_BEGIN

struct residual {
  using policy_kind = feedback_tag;
  struct config {
    float scale = 1.0f;  // applied to the residual before it is added, finite and >= 0
    // The members a tool sets by name (core/options.hpp).
    static constexpr auto options() { return std::tuple{option{"feedback_scale", &config::scale}}; }
  };
  static constexpr bool has_state = true;

  static status validate(const config& c) {
    if (!(c.scale >= 0.0f && std::isfinite(c.scale))) return {errc::invalid_argument, "residual scale must be finite and >= 0"};
    return {};
  }
  GRADCOMP_HD static float combine(const config& c, float g, float e) { return canonical_nan(g + mul_rn(c.scale, e)); }
  GRADCOMP_HD static float remainder(const config&, float x, float sent) { return canonical_nan(x - sent); }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::feedback
