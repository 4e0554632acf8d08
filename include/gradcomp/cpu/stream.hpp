#pragma once
// CPU skeleton: a stream of codes written into a frame section, checksummed on the way. Codes
// are packed a tile at a time into a buffer that stays in L1, the tile's CRC32C is taken while
// it is hot, and the tile is copied out; large outputs use non-temporal stores, so the
// payload does not first read every destination line (a plain store costs a read and a write
// of each line).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "../core/byteio.hpp"
#include "../core/crc32c.hpp"
#include "stores.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gradcomp::cpu::detail {

// memcpy, or with non-temporal 16-byte stores (SSE2: every x86-64 CPU) when `streaming`.
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

// Orders non-temporal stores before what follows (the caller's later reads of the output).
inline void streaming_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Writes a stream of Bits-bit codes packed as by pack_bits, appended a block at a time
// (blocks need not end on a byte boundary): the caller writes up to max_put codes at room()
// and appends the first n with commit(n). Full-width codes are written straight into the
// tile; narrower ones are staged and packed into it. The tile's CRC32C is taken while it is
// hot, then the tile is copied out (non-temporal stores if `streaming`). finish() writes the
// last partial byte and returns the CRC32C of all bytes written.
template <class Code, unsigned Bits>
class packed_stream {
  static_assert(Bits >= 1 && Bits <= 8 * sizeof(Code));
  static constexpr bool full_width = Bits == 8 * sizeof(Code);

 public:
  static constexpr std::size_t max_put = 4096;  // codes per commit()

  packed_stream(std::byte* out, bool streaming) : out_(out), streaming_(streaming) {}

  Code* room() {
    if constexpr (full_width) {
      return reinterpret_cast<Code*>(tile_ + used_);
    } else {
      return stage_;
    }
  }

  void commit(std::size_t n) {
    if constexpr (full_width) {
      used_ += n * sizeof(Code);
    } else {
      pack(stage_, n);
    }
    if (used_ >= flush_bytes) flush();
  }

  std::uint32_t finish() {
    if (filled_) tile_[used_++] = static_cast<std::byte>(acc_ & 0xffu);
    acc_ = 0;
    filled_ = 0;
    flush();
    if (streaming_) detail::streaming_fence();
    return crc_;
  }

 private:
  static constexpr std::uint64_t mask = (1ull << Bits) - 1u;
  // Three CRC32C streams' worth (crc32c() checksums whole rounds of them in parallel).
  static constexpr std::size_t flush_bytes = 3 * gradcomp::detail::crc32c_stream_bytes;

  void pack(const Code* codes, std::size_t n) {
    std::size_t i = 0;
    if constexpr (8 % Bits == 0) {
      constexpr std::size_t per_byte = 8 / Bits;
      for (; filled_ != 0 && i < n; ++i) put_one(codes[i]);
      const std::size_t whole = (n - i) / per_byte;
      std::byte* to = tile_ + used_;
      for (std::size_t b = 0; b < whole; ++b) {  // one byte from per_byte codes: vectorises
        unsigned byte = 0;
        for (std::size_t k = 0; k < per_byte; ++k) byte |= (static_cast<unsigned>(codes[i + b * per_byte + k]) & mask) << (k * Bits);
        to[b] = static_cast<std::byte>(byte);
      }
      used_ += whole;
      i += whole * per_byte;
    } else if constexpr (Bits < 16 && Bits % 8 != 0) {  // odd widths: 8 codes make Bits bytes
      for (; filled_ != 0 && i < n; ++i) put_one(codes[i]);
      for (; i + 8 <= n; i += 8) {
        std::uint64_t words[2] = {0, 0};
        for (unsigned k = 0; k < 8; ++k) {
          const std::uint64_t c = codes[i + k] & mask;
          const unsigned bit = k * Bits;
          words[bit / 64] |= c << (bit % 64);
          if (bit % 64 + Bits > 64) words[1] |= c >> (64 - bit % 64);
        }
        std::memcpy(tile_ + used_, words, Bits);
        used_ += Bits;
      }
    }
    for (; i < n; ++i) put_one(codes[i]);
  }

  void put_one(std::uint64_t code) {
    acc_ |= (code & mask) << filled_;
    filled_ += Bits;
    while (filled_ >= 8) {
      tile_[used_++] = static_cast<std::byte>(acc_ & 0xffu);
      acc_ >>= 8;
      filled_ -= 8;
    }
  }

  void flush() {
    crc_ = crc32c(std::span<const std::byte>(tile_, used_), crc_);
    detail::copy_tile(out_, tile_, used_, streaming_);
    out_ += used_;
    used_ = 0;
  }

  alignas(64) std::byte tile_[flush_bytes + max_put * sizeof(Code) + 8];
  alignas(64) Code stage_[full_width ? 1 : max_put];
  std::size_t used_ = 0;
  std::uint64_t acc_ = 0;
  unsigned filled_ = 0;
  std::byte* out_;
  bool streaming_;
  std::uint32_t crc_ = 0;
};

}  // namespace gradcomp::cpu::detail
