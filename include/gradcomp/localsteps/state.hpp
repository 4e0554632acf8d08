#pragma once
// One rank's local-steps state in host memory (localsteps::synchroniser<Path>::state_type,
// gradcomp/localsteps.hpp): per fragment the anchor, the outer momentum, the values in flight
// and the path's state.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../core/concepts.hpp"
#include "schedule.hpp"

namespace gradcomp::localsteps {

template <class PathState>
struct fragment_state : sync_order {
  chunk_range range{0, 0};
  std::vector<float> anchor;    // the fragment's parameters after its last sync
  std::vector<float> momentum;  // the outer momentum (empty when momentum = 0)
  std::vector<float> values;    // the pseudo-gradient being sent, then the received mean
  PathState path;               // the path's state: the codec's error feedback
};

template <class PathState>
struct state {
  std::size_t size = 0;       // parameters
  std::uint32_t world = 1;
  std::uint32_t rank = 0;
  std::uint64_t step = 0;     // inner steps taken (advance())
  std::vector<fragment_state<PathState>> fragments;
};

}  // namespace gradcomp::localsteps
