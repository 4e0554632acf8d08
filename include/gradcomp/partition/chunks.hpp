#pragma once
// partition::chunks: fixed-size chunks of chunk_bytes (the last one shorter), each its own
// frame, compressible and decodable alone: a trainer sends chunk i while compressing i + 1.
// An empty buffer is one empty chunk, so every step produces at least one frame.

#include <cstddef>

#include "../core/concepts.hpp"
#include "../core/options.hpp"

namespace gradcomp::partition {

struct chunks {
  using policy_kind = partitioner_tag;
  struct config {
    std::size_t chunk_bytes = std::size_t{4} << 20;  // bytes of gradient per chunk
    // The members a tool sets by name (core/options.hpp).
    static constexpr auto options() { return std::tuple{option{"chunk_bytes", &config::chunk_bytes}}; }
  };

  static constexpr status validate(const config& c) {
    if (c.chunk_bytes < 4) return {errc::invalid_argument, "chunk_bytes must hold at least one element"};
    return {};
  }
  GRADCOMP_HD static constexpr std::size_t elements_per_chunk(const config& c, std::size_t element_bytes) {
    return c.chunk_bytes / element_bytes;
  }
  GRADCOMP_HD static constexpr std::size_t chunk_count(const config& c, std::size_t n, std::size_t element_bytes) {
    const std::size_t per = elements_per_chunk(c, element_bytes);
    return n == 0 ? 1 : (n + per - 1) / per;
  }
  GRADCOMP_HD static constexpr chunk_range chunk_at(const config& c, std::size_t n, std::size_t element_bytes, std::size_t i) {
    const std::size_t per = elements_per_chunk(c, element_bytes);
    const std::size_t begin = i * per < n ? i * per : n;
    const std::size_t end = begin + per < n ? begin + per : n;
    return {begin, end - begin};
  }
};

}  // namespace gradcomp::partition
