#pragma once
// What the sharded path's codec classes of both backends share (sharded::codec<C> on the CPU,
// cuda::sharded::codec<C> on the GPU): construction, the accessors, describe() and the check
// that a state was made by make_state. Each backend's class derives from front<C> and adds what
// differs: how its state is made (host vectors or caller-owned device memory) and its calls'
// executor.

#include <cstddef>
#include <cstdint>

#include "../core/status.hpp"
#include "../summable/phases.hpp"
#include "flow.hpp"

namespace gradcomp::sharded::detail {

template <class C>
class front {
 public:
  static constexpr summable::aggregation aggregation_kind = summable::aggregation::sharded;
  static constexpr std::size_t scatter_phase = 0, gather_phase = 1;

  explicit front(const C& c, mode m = mode::reduce_scatter) : f_(c, c, m) {}
  front(const C& send, const C& owner, mode m) : f_(send, owner, m) {}

  const C& sender() const { return f_.sender(); }
  const C& owner() const { return f_.owner(); }
  mode get_mode() const { return f_.get_mode(); }
  status validate() const { return f_.validate(); }
  std::size_t phase_count() const { return f_.phase_count(); }

  template <class St>
  result<phase> describe(std::size_t k, const St& st) const {
    if (status s = check_state(st); !s) return s;
    return f_.describe(k, st.size, st.world);
  }

 protected:
  // A state of either backend: its geometry, and `made(st)` (found beside the state type) for
  // what only that backend's make_state sets.
  template <class St>
  status check_state(const St& st) const {
    if (status s = validate(); !s) return s;
    if (st.world == 0 || st.rank >= st.world || st.send.size() != st.world || !made(st))
      return {errc::size_mismatch, "sharded state not made by this codec's make_state"};
    return {};
  }

  flow<C> f_;
};

}  // namespace gradcomp::sharded::detail
