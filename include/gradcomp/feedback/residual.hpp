#pragma once
// feedback::residual (error feedback, Seide et al. 2014; Karimireddy et al. 2019): the part
// of x = g + e that was not sent is kept and added to the next step's gradient:
//   x = g + e;   send C(x);   e' = x - decoded(C(x))   (e' = x where nothing was sent).
// Conservation, exact in fp32: decoded + e' == x element by element, since e' is computed
// from the very decoded value the receiver sees. (NaN results are canonical: core/bits.hpp.)

#include "../core/bits.hpp"
#include "../core/concepts.hpp"

namespace gradcomp::feedback {

struct residual {
  using policy_kind = feedback_tag;
  struct config {};
  static constexpr bool has_state = true;

  static constexpr status validate(const config&) { return {}; }
  GRADCOMP_HD static float combine(const config&, float g, float e) { return canonical_nan(g + e); }
  GRADCOMP_HD static float remainder(const config&, float x, float sent) { return canonical_nan(x - sent); }
};

}  // namespace gradcomp::feedback
