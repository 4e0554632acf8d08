#pragma once
// CPU skeleton: write a stream of codes produced element by element, checksummed on the way.
// Codes are built a tile at a time in a small buffer that stays in L1 (a plain loop the
// compiler vectorises), the tile's CRC32C is taken while it is hot, and the tile is copied
// out; large outputs use non-temporal stores so the payload does not first read every
// destination line (a plain store costs a read and a write of each line).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "../core/byteio.hpp"
#include "../core/crc32c.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gradcomp::cpu {

// Outputs at least this large are written with non-temporal stores.
inline constexpr std::size_t streaming_store_bytes = std::size_t{1} << 20;

namespace detail {
inline void copy_tile(std::byte* dst, const std::byte* src, std::size_t bytes, bool streaming) {
#if defined(__SSE2__)
  if (streaming) {
    const std::size_t head = std::min(bytes, (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16);
    std::memcpy(dst, src, head);
    std::size_t i = head;
    for (; i + 16 <= bytes; i += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    std::memcpy(dst + i, src + i, bytes - i);
    return;
  }
#else
  (void)streaming;
#endif
  std::memcpy(dst, src, bytes);
}

inline void streaming_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}
}  // namespace detail

// Writes code(j) for j in [0, count) as little-endian Code values to out and returns the
// CRC32C of the written bytes continued from `crc`. code(j) is called once per j, in order.
template <class Code, class CodeAt>
std::uint32_t write_codes(std::size_t count, CodeAt&& code, std::byte* out, std::uint32_t crc) {
  constexpr std::size_t tile_bytes = 3 * 4096;  // one round of the three-stream hardware CRC
  constexpr std::size_t tile = tile_bytes / sizeof(Code);
  alignas(64) Code buffer[tile];
  const bool streaming = count * sizeof(Code) >= streaming_store_bytes;
  for (std::size_t i0 = 0; i0 < count; i0 += tile) {
    const std::size_t m = std::min(tile, count - i0);
    if (m == tile) {
      for (std::size_t j = 0; j < tile; ++j) buffer[j] = code(i0 + j);
    } else {
      for (std::size_t j = 0; j < m; ++j) buffer[j] = code(i0 + j);
    }
    const auto bytes = std::as_bytes(std::span(buffer, m));
    crc = crc32c(bytes, crc);
    detail::copy_tile(out + i0 * sizeof(Code), bytes.data(), bytes.size(), streaming);
  }
  if (streaming) detail::streaming_fence();
  return crc;
}

}  // namespace gradcomp::cpu
