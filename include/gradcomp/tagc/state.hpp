#pragma once
// One rank's TAGC state: what outlives a step (residual, per-shard thresholds, step, sampling
// key: tagc/checkpoint.hpp saves it) and the step's scratch (the received union, the sketch
// size, the workspace), sized once by codec::make_state so that a step never allocates.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../sketch/peel.hpp"
#include "rules.hpp"

namespace gradcomp::tagc {

struct state {
  // --- Checkpointed.
  std::size_t size = 0;          // gradient elements
  std::uint32_t world = 1;       // ranks (W)
  std::uint32_t rank = 0;        // this rank
  std::uint64_t step = 0;        // advanced by finish_step
  std::uint32_t key = 0;         // key of the threshold sampling (config::seed at make_state)
  std::vector<float> residual;   // `size` floats: what error feedback still owes
  std::vector<float> thresholds;  // `world` floats: each shard's last |x| threshold (0: none yet)
  // --- This step's (not checkpointed).
  stage at = stage::encode_bitmap;
  std::uint32_t rows = 0;                // r of this step's sketch (after receive(0))
  std::vector<std::uint32_t> union_bits;  // bitmap_words(size): the union of kept positions
  sketch::peel_stats stats{};            // the last receive(1): items, peeled, rounds
  sketch::peel_stats own{};              // the last encode(1): this rank's own cells decoded
  std::vector<std::byte> workspace;      // the CPU kernels' scratch (cpu/tagc.hpp)
};

}  // namespace gradcomp::tagc
