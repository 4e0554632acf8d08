#pragma once
// Local steps (DiLoCo, Streaming DiLoCo, SparseLoCo): what a synchroniser is configured with,
// the fragment layout and the staggered schedule (docs/localsteps.md).
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

#include "../core/concepts.hpp"
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

// Fragment f of a parameter vector of n elements: the same split as shards (ceil(n / F) each,
// the last ones shorter or empty).
constexpr chunk_range fragment_of(std::size_t n, std::size_t fragments, std::size_t f) {
  const std::size_t s = fragments == 0 ? 0 : (n + fragments - 1) / fragments;
  const std::size_t first = f * s < n ? f * s : n;
  const std::size_t last = first + s < n ? first + s : n;
  return {first, last - first};
}

// The inner step (counted from 1) at which fragment f first sends: the fragments end their
// periods at (f + 1) * period / fragments, so fragment F - 1 sends at period, 2 period, ...
constexpr std::size_t first_send(const config& c, std::size_t f) { return (f + 1) * c.period / c.fragments; }

// After `step` inner steps (step >= 1): does fragment f send its pseudo-gradient now?
constexpr bool sends_at(const config& c, std::size_t f, std::uint64_t step) {
  const std::size_t first = first_send(c, f);
  return step >= first && (step - first) % c.period == 0;
}

// After `step` inner steps: is the mean of fragment f applied now (overlap steps after its send)?
constexpr bool applies_at(const config& c, std::size_t f, std::uint64_t step) {
  return step >= c.overlap && sends_at(c, f, step - c.overlap);
}

// Where one fragment's sync stands, kept on the host by every executor, which call in this
// order: encode(f, 0), receive(f, 0), encode(f, 1), ..., receive(f, last), apply(f).
struct sync_order {
  std::size_t phases_done = 0;  // of the exchange in flight (0: none)
  bool pending = false;         // the mean arrived and waits for apply()
  std::uint64_t syncs = 0;      // applies done

  // Phase 0 reads the parameters, later phases do not.
  status check_encode(std::size_t k, bool reads_params) const {
    return k == phases_done && !(k == 0 && pending) && (k == 0 || !reads_params) ? status{} : order_error();
  }
  status check_receive(std::size_t k) const { return !pending && k == phases_done ? status{} : order_error(); }
  void received(std::size_t k, bool last) {
    phases_done = last ? 0 : k + 1;
    pending = last;
  }
  status check_apply() const { return pending ? status{} : order_error(); }
  void applied() {
    pending = false;
    ++syncs;
  }
  static status order_error() {
    return {errc::invalid_argument, "local steps: phases out of order: encode(f, 0), receive(f, 0), ..., apply(f)"};
  }
};

}  // namespace gradcomp::localsteps
