#pragma once
// Helpers of the TAGC tests: W simulated ranks, their correlated gradients, the receivers'
// outputs put back into one buffer.

#include <gradcomp/tagc/checkpoint.hpp>
#include <gradcomp/tagc.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "sketch/support.hpp"
#include "summable/collective.hpp"

namespace gradcomp::test::tagc {

namespace gt = gradcomp::tagc;
namespace gs = gradcomp::sketch;
using gradcomp::test::collective;

inline std::vector<gt::state> make_ranks(const gt::codec& c, std::size_t n, std::uint32_t world) {
  std::vector<gt::state> st(world);
  for (std::uint32_t r = 0; r < world; ++r) REQUIRE(c.make_state(n, world, r, st[r]).ok());
  return st;
}

// Rank r's gradient: a part every rank shares plus its own (so that ranks keep overlapping
// sets). exact: multiples of 2^-12 below 2^-1 in magnitude, whose sums are exact in fp32.
inline std::vector<std::vector<float>> rank_grads(std::size_t n, std::uint32_t world, std::uint64_t seed, bool exact) {
  const auto shared = exact ? sketch::dyadic_values(n, seed) : sketch::wide_values(n, seed);
  std::vector<std::vector<float>> g(world);
  for (std::uint32_t r = 0; r < world; ++r) {
    g[r] = exact ? sketch::dyadic_values(n, seed * 100 + r + 1) : sketch::wide_values(n, seed * 100 + r + 1);
    for (std::size_t j = 0; j < n; ++j) g[r][j] = exact ? g[r][j] * 0.0625f + shared[j] : g[r][j] + shared[j];
  }
  return g;
}

// The decoded buffer: every rank's shard (reduce-scatter) or rank 0's whole buffer, checked
// to equal every other rank's (all-reduce).
inline std::vector<float> assemble(const std::vector<std::vector<float>>& outs, std::size_t n, collective how) {
  const auto world = static_cast<std::uint32_t>(outs.size());
  if (how == collective::all_reduce) {
    for (const auto& o : outs) CHECK(o == outs[0]);
    return outs[0];
  }
  std::vector<float> full(n, 0.0f);
  for (std::uint32_t r = 0; r < world; ++r) {
    const chunk_range mine = summable::shard_of(n, world, r);
    REQUIRE(outs[r].size() == mine.count);
    for (std::size_t i = 0; i < mine.count; ++i) full[mine.offset + i] = outs[r][i];
  }
  return full;
}

}  // namespace gradcomp::test::tagc
