#pragma once
// Local steps' fragment layout and staggered schedule (docs/localsteps.md): which elements
// fragment f holds, at which inner steps it sends and applies, and the order of one fragment's
// calls.

#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/status.hpp"
#include "config.hpp"

namespace gradcomp::localsteps {

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
