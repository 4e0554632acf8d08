#pragma once
// What the transform policies (identity.hpp, hadamard.hpp, dct.hpp) share: how a transform
// covers a chunk of any length, and the header word that names it.
//
// Blocks: full blocks of `block` values (a power of two), then the tail cut into decreasing
// powers of two (the binary digits of its length), so every block has a power-of-two size and
// the chunk keeps its length. A block never straddles two chunks, so each chunk is transformed
// (and inverted) on its own.

#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/config.hpp"
#include "../core/status.hpp"

namespace gradcomp::transform {

GRADCOMP_HD constexpr bool is_power_of_two(std::size_t b) { return b != 0 && (b & (b - 1)) == 0; }
GRADCOMP_HD constexpr bool valid_block(std::size_t b) { return is_power_of_two(b) && b >= 2 && b <= 4096; }
inline constexpr std::size_t max_block = 4096;

GRADCOMP_HD constexpr unsigned log2_of(std::size_t b) {
  unsigned m = 0;
  while ((std::size_t{1} << m) < b) ++m;
  return m;
}

// The frame header's transform word (docs/wire-format.md): the transform's id in bits 0-7,
// log2 of its block in bits 8-15; 0 for the identity.
GRADCOMP_HD constexpr std::uint32_t transform_word(std::uint32_t id, std::size_t block) { return id | (log2_of(block) << 8); }

// What a transform over blocks of `Config::block` values has besides its math (as
// quantize::grouped_quantizer is for quantizers): the policy tag, the id, the block's check and
// the header word; no seed unless the transform declares one.
template <class Config, std::uint32_t Id>
struct blocked_transform {
  using policy_kind = transform_tag;
  using config = Config;
  static constexpr bool is_identity = false;
  static constexpr std::uint32_t id = Id;
  static status validate(const config& c) {
    return valid_block(c.block) ? status{} : status{errc::invalid_argument, "transform: block is a power of two from 2 to 4096"};
  }
  GRADCOMP_HD static std::uint32_t word(const config& c) { return transform_word(Id, c.block); }
  GRADCOMP_HD static std::uint32_t seed(const config&) { return 0; }
  GRADCOMP_HD static std::size_t block(const config& c) { return c.block; }
};

// The block that starts at `offset` of a chunk of n values (offset < n): its length.
GRADCOMP_HD constexpr std::size_t block_at(std::size_t n, std::size_t block, std::size_t offset) {
  const std::size_t full = n - n % block;
  if (offset < full) return block;
  std::size_t left = n - offset, b = block >> 1;  // the tail: its highest binary digit first
  while (b > left) b >>= 1;
  return b;
}

// The blocks of a chunk of n values: the full ones, then one per binary digit of the tail.
GRADCOMP_HD constexpr std::size_t block_count(std::size_t n, std::size_t block) {
  std::size_t count = n / block;
  for (std::size_t tail = n % block; tail != 0; tail &= tail - 1) ++count;
  return count;
}

// Block t of a chunk of n values (t < block_count): where it starts and its length (a device
// thread's share).
struct block_span {
  std::size_t offset, length;
};
GRADCOMP_HD constexpr block_span block_number(std::size_t n, std::size_t block, std::size_t t) {
  const std::size_t full = n / block;
  if (t < full) return {t * block, block};
  std::size_t at = full * block, k = t - full;
  for (std::size_t b = block >> 1; b != 0; b >>= 1) {  // the tail's digits, highest first
    if (((n - full * block) & b) == 0) continue;
    if (k-- == 0) return {at, b};
    at += b;
  }
  return {n, 0};  // t beyond the blocks
}

// Calls f(offset, length) for every block of a chunk of n values, in order (host; a device
// kernel gives each block to a thread: block_number).
template <class F>
void for_each_block(std::size_t n, std::size_t block, F&& f) {
  for (std::size_t at = 0; at < n;) {
    const std::size_t b = block_at(n, block, at);
    f(at, b);
    at += b;
  }
}

}  // namespace gradcomp::transform
