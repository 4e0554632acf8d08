#pragma once
// sparsify::randomk: keeps k = ceil(density * n) elements chosen at random, without
// replacement: those at pi(0), ..., pi(k - 1) of a keyed permutation of the chunk
// (core/permutation.hpp) with key (seed, step) and the chunk id. Every rank with the same
// seed keeps the same positions, so the frame carries no indices (index format `seeded`,
// an 8-byte section holding the seed so that a receiver with another seed refuses the frame)
// and, with a summable quantizer, value sections of all ranks can be added element-wise
// (random-k with a shared seed). Values travel in the order m = 0..k-1, not by index.
// Work is O(k) expected without feedback; unbiased after scaling by n/k (the caller's).
// Contraction in expectation: E||x - C(x)||^2 = (1 - k/n) ||x||^2.

#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/ids.hpp"
#include "../core/options.hpp"
#include "topk.hpp"

namespace gradcomp::sparsify {

struct randomk {
  using policy_kind = sparsifier_tag;
  struct config {
    double density = 0.01;  // fraction of each chunk's elements to keep, in (0, 1]
    // The members a tool sets by name (core/options.hpp).
    static constexpr auto options() { return std::tuple{option{"density", &config::density}}; }
  };
  static constexpr std::uint8_t id = ids::sparsifier::randomk;
  static constexpr bool is_dense = false;
  static constexpr selection kind = selection::random;

  static status validate(const config& c) {
    if (!valid_density(c.density)) return {errc::invalid_argument, "randomk density must be in (0, 1]"};
    return {};
  }
  GRADCOMP_HD static std::size_t kept(const config& c, std::size_t n) { return topk::kept({c.density}, n); }
};

}  // namespace gradcomp::sparsify
