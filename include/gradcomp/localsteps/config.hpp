#pragma once
// Local steps (DiLoCo, Streaming DiLoCo, SparseLoCo): what a synchroniser is configured with
// (docs/localsteps.md); the fragment layout and the schedule it implies are in schedule.hpp.
//
// Every rank trains a full replica with its own inner optimizer. The parameters are cut into
// `fragments` contiguous ranges; fragment f is synchronised every `period` inner steps (H), the
// fragments staggered by period / fragments steps, so that each period sends every parameter
// once and the peak exchange is one fragment. A sync sends the fragment's pseudo-gradient
// (anchor - local parameters) through a codec, and the outer optimizer applies the mean to the
// anchor `overlap` inner steps later (tau: the exchange runs while the inner steps go on); the
// local fragment then becomes mix * local + (1 - mix) * anchor.

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../core/status.hpp"

namespace gradcomp::localsteps {

struct config {
  std::size_t period = 50;    // H: inner steps between two syncs of a fragment, >= 1
  std::size_t fragments = 1;  // parameter fragments on a staggered schedule, 1..period
  std::size_t overlap = 0;    // tau: inner steps between a fragment's send and its apply, < period
  float mix = 0.0f;           // alpha in [0, 1): weight of the local fragment at the apply (0: take the anchor)
  // The outer step; the defaults are the best measured at H = 5 to 20 (docs/localsteps.md);
  // DiLoCo's 0.7 and 0.9 suit periods in the hundreds.
  float outer_lr = 1.0f;      // outer learning rate, > 0 (1 with momentum 0: plain averaging)
  float momentum = 0.5f;      // outer momentum in [0, 1)
  bool nesterov = true;       // Nesterov's form of the outer momentum
};

inline status validate(const config& c) {
  if (c.period == 0) return {errc::invalid_argument, "local steps: period must be >= 1"};
  if (c.fragments == 0 || c.fragments > c.period) return {errc::invalid_argument, "local steps: fragments must lie in [1, period]"};
  if (c.overlap >= c.period)
    return {errc::invalid_argument, "local steps: overlap must be below period (a fragment is applied before it sends again)"};
  if (!(c.mix >= 0.0f && c.mix < 1.0f)) return {errc::invalid_argument, "local steps: mix must lie in [0, 1)"};
  if (!(c.outer_lr > 0.0f && std::isfinite(c.outer_lr))) return {errc::invalid_argument, "local steps: outer_lr must be finite and > 0"};
  if (!(c.momentum >= 0.0f && c.momentum < 1.0f)) return {errc::invalid_argument, "local steps: momentum must lie in [0, 1)"};
  return {};
}

}  // namespace gradcomp::localsteps
