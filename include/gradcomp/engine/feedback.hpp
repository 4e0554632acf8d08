#pragma once
// The feedback's per-element work on one chunk, in the one order every backend follows:
//   x = combine(g, e)                 (momentum: u' = velocity(clip * g, u), x = combine(u', e))
//   code = encode(x);  e = remainder(x, decode(code))   for a sent element (momentum: u = 0)
//   e = x                                               for an element not sent
// g is the chunk's gradient, e its residual and u its velocity where the feedback keeps them.

#include <algorithm>
#include <cstddef>

#include "../core/concepts.hpp"
#include "../core/numeric.hpp"
#include "../core/reduce.hpp"
#include "../core/rounding.hpp"

namespace gradcomp::engine::detail {
GRADCOMP_PRECISE_BEGIN

template <class Feedback, class T>
struct element_feedback {
  static constexpr bool has_state = Feedback::has_state;
  static constexpr bool has_momentum = momentum_feedback<Feedback>;

  const typename Feedback::config& cfg;
  const T* g;
  float* e;     // null without state
  float* u;     // null without momentum
  float clip;   // momentum's local clipping factor, else 1

  // x_j, the value considered for sending, without side effects.
  GRADCOMP_HD float peek(std::size_t j) const {
    if constexpr (has_momentum) {
      return Feedback::combine(cfg, Feedback::velocity(cfg, mul_rn(clip, to_float(g[j])), u[j]), e[j]);
    } else if constexpr (has_state) {
      return Feedback::combine(cfg, to_float(g[j]), e[j]);
    } else {
      return to_float(g[j]);
    }
  }
  // x_j, leaving the state as if nothing were sent (e = x, u = u').
  GRADCOMP_HD float scan(std::size_t j) const {
    if constexpr (has_momentum) {
      u[j] = Feedback::velocity(cfg, mul_rn(clip, to_float(g[j])), u[j]);
      return e[j] = Feedback::combine(cfg, u[j], e[j]);
    } else if constexpr (has_state) {
      return e[j] = Feedback::combine(cfg, to_float(g[j]), e[j]);
    } else {
      return to_float(g[j]);
    }
  }
  // x_j after scan(j).
  GRADCOMP_HD float value(std::size_t j) const {
    if constexpr (has_state) {
      return e[j];
    } else {
      return to_float(g[j]);
    }
  }
  // Element j was sent as `decoded`: keep the rest, and mask the momentum (DGC).
  GRADCOMP_HD void sent(std::size_t j, float x, float decoded) const {
    if constexpr (has_state) e[j] = Feedback::remainder(cfg, x, decoded);
    if constexpr (has_momentum) u[j] = 0.0f;
  }
};

// Momentum's local gradient clipping factor for a chunk of `count` gradients: the squared
// norm summed in blocks of max_tree_sum values (tree order, core/reduce.hpp), the block sums
// added in double in order. 1 without momentum or clipping.
template <class Feedback, class T>
float clip_factor(const typename Feedback::config& cfg, const T* g, std::size_t count) {
  if constexpr (momentum_feedback<Feedback>) {
    if (!(cfg.clip_norm > 0.0f)) return 1.0f;
    double total = 0.0;
    float block[max_tree_sum];
    for (std::size_t j0 = 0; j0 < count; j0 += max_tree_sum) {
      const std::size_t n = std::min(max_tree_sum, count - j0);
      for (std::size_t i = 0; i < n; ++i) block[i] = to_float(g[j0 + i]);
      total += tree_sum(block, n, [](float x) { return mul_rn(x, x); });
    }
    return Feedback::clip_scale(cfg, static_cast<float>(total));
  } else {
    (void)cfg;
    (void)g;
    (void)count;
    return 1.0f;
  }
}

GRADCOMP_PRECISE_END
}  // namespace gradcomp::engine::detail
