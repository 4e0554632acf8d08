#pragma once
// MurmurHash3 x86_32 (Austin Appleby, public domain algorithm). TAGC's count sketch hashes
// block ids with seeds 0, 1, 2; murmur3_u32 is the 4-byte little-endian key case.

#include <cstddef>
#include <cstdint>

#include "config.hpp"

namespace gradcomp {

namespace detail {
GRADCOMP_HD inline std::uint32_t rotl32(std::uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
GRADCOMP_HD inline std::uint32_t murmur3_mix_block(std::uint32_t k) {
  k *= 0xcc9e2d51u;
  k = rotl32(k, 15);
  return k * 0x1b873593u;
}
GRADCOMP_HD inline std::uint32_t murmur3_finalize(std::uint32_t h, std::uint32_t length) {
  h ^= length;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}
}  // namespace detail

GRADCOMP_HD inline std::uint32_t murmur3_x86_32(const unsigned char* data, std::size_t size, std::uint32_t seed) {
  std::uint32_t h = seed;
  const std::size_t blocks = size / 4;
  for (std::size_t i = 0; i < blocks; ++i) {
    const unsigned char* p = data + 4 * i;
    const std::uint32_t k = static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
                            (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
    h ^= detail::murmur3_mix_block(k);
    h = detail::rotl32(h, 13);
    h = h * 5u + 0xe6546b64u;
  }
  const unsigned char* tail = data + 4 * blocks;
  std::uint32_t k = 0;
  switch (size & 3u) {
    case 3: k ^= static_cast<std::uint32_t>(tail[2]) << 16; [[fallthrough]];
    case 2: k ^= static_cast<std::uint32_t>(tail[1]) << 8; [[fallthrough]];
    case 1: k ^= tail[0]; h ^= detail::murmur3_mix_block(k);
  }
  return detail::murmur3_finalize(h, static_cast<std::uint32_t>(size));
}

GRADCOMP_HD inline std::uint32_t murmur3_u32(std::uint32_t key, std::uint32_t seed) {
  std::uint32_t h = seed ^ detail::murmur3_mix_block(key);
  h = detail::rotl32(h, 13);
  h = h * 5u + 0xe6546b64u;
  return detail::murmur3_finalize(h, 4u);
}

}  // namespace gradcomp
