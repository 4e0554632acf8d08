#pragma once
// One rank's state of the sharded path in host memory (sharded::codec<C>::state, gradcomp/sharded.hpp):
// a compressor state per destination shard, the owner's, the reduced shard and the shared
// selection scratch.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../state.hpp"
#include "flow.hpp"

namespace gradcomp::sharded {

struct state {
  std::size_t size = 0;
  std::uint32_t world = 1, rank = 0;
  std::uint64_t step = 0;
  std::vector<gradcomp::state> send;  // W: this rank's state per destination shard
  gradcomp::state owner;              // all-reduce: the re-encoding of this rank's reduced shard
  std::vector<float> sum;             // the reduced shard, fp32 (scratch)
  std::vector<std::byte> workspace;   // the W + 1 states' selection scratch, lent to each in turn
  stage at = stage::encode_scatter;
};

// What only make_state sets (detail::front's state check).
inline bool made(const state& st) { return st.sum.size() == summable::shard_of(st.size, st.world, st.rank).count; }

}  // namespace gradcomp::sharded
