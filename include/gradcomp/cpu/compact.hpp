#pragma once
// CPU skeleton: stream compaction of indices. Writes the indices i < n with keep(i), ascending,
// as little-endian u32 to out, and returns how many there were (at most `capacity` are written;
// the count is exact either way, so a caller can tell a sample's estimate was too small).

#include <cstddef>
#include <cstdint>

#include "../core/byteio.hpp"

namespace gradcomp::cpu::detail {

template <class Keep>
std::size_t compact_indices(std::size_t n, Keep&& keep, std::byte* out, std::size_t capacity) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (keep(i)) {
      if (count < capacity) store_le<std::uint32_t>(out + 4 * count, static_cast<std::uint32_t>(i));
      ++count;
    }
  }
  return count;
}

}  // namespace gradcomp::cpu::detail
