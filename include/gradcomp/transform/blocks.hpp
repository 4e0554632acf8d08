#pragma once
// How an orthogonal transform covers a chunk of any length: full blocks of `block` values (a
// power of two), then the tail cut into decreasing powers of two (the binary digits of its
// length), so every block has a power-of-two size and the chunk keeps its length. A block never
// straddles two chunks, so each chunk is transformed (and inverted) on its own.

#include <cstddef>

#include "../core/config.hpp"

namespace gradcomp::transform {

GRADCOMP_HD constexpr bool is_power_of_two(std::size_t b) { return b != 0 && (b & (b - 1)) == 0; }

// The block that starts at `offset` of a chunk of n values (offset < n): its length.
GRADCOMP_HD constexpr std::size_t block_at(std::size_t n, std::size_t block, std::size_t offset) {
  const std::size_t full = n - n % block;
  if (offset < full) return block;
  std::size_t left = n - offset, b = block >> 1;  // the tail: its highest binary digit first
  while (b > left) b >>= 1;
  return b;
}

// Calls f(offset, length) for every block of a chunk of n values, in order (host; a device
// kernel gives each block to a group of threads).
template <class F>
void for_each_block(std::size_t n, std::size_t block, F&& f) {
  for (std::size_t at = 0; at < n;) {
    const std::size_t b = block_at(n, block, at);
    f(at, b);
    at += b;
  }
}

}  // namespace gradcomp::transform
