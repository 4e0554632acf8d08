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
#include "dispatch.hpp"
#include "prefetch.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if GRADCOMP_CPU_DISPATCH
#include <immintrin.h>
#endif

namespace gradcomp::cpu {

// Payloads at least this large are written with non-temporal stores (smaller ones are likely
// to stay in the last-level cache, where plain stores are faster).
inline constexpr std::size_t streaming_store_bytes = std::size_t{8} << 20;

// How the CPU backend writes a call's large outputs (compressor::config::stores): decided by
// the call's own output size (automatic: non-temporal stores from streaming_store_bytes on),
// or always (streaming), or never (cached). A call sees only its own output: a trainer that
// decompresses a large buffer one chunk per call, and reads it only later, says streaming; one
// that reads each compressed frame at once says cached. The bytes written are the same.
enum class stores : std::uint8_t { automatic, streaming, cached };

constexpr bool streaming_stores(stores policy, std::size_t output_bytes) {
  return policy == stores::streaming || (policy == stores::automatic && output_bytes >= streaming_store_bytes);
}

// Codes are produced in tiles of this many bytes: one round of the three-stream hardware CRC,
// small enough to stay in L1 beside the input streaming through.
inline constexpr std::size_t code_tile_bytes = 3 * 4096;

namespace detail {
#if GRADCOMP_CPU_DISPATCH
// copy_tile's streaming case with 32-byte non-temporal stores, for AVX2 CPUs: dense
// decompress measured 0.74-0.92x the time with them than with 16-byte ones. Where dst is
// 8-byte aligned (frame sections are), the part before and after the 32-byte aligned run goes
// out in 8-byte non-temporal stores too, so no cache line gets both plain and non-temporal
// stores: int8 compress into a frame 8 bytes off 32-byte alignment measured 0.93x the time
// (A/B) against plain copies of those ends.
GRADCOMP_TARGET_AVX2 inline void stream_tile_avx2(std::byte* dst, const std::byte* src, std::size_t bytes) {
  const bool words = reinterpret_cast<std::uintptr_t>(dst) % 8 == 0;
  const auto stream_words = [&](std::size_t& i, std::size_t end) {
    if (words)
      for (; i + 8 <= end; i += 8) _mm_stream_si64(reinterpret_cast<long long*>(dst + i), load_le<long long>(src + i));
    std::memcpy(dst + i, src + i, end - i);
    i = end;
  };
  std::size_t i = 0;
  stream_words(i, std::min(bytes, (32 - reinterpret_cast<std::uintptr_t>(dst) % 32) % 32));
  for (; i + 32 <= bytes; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  stream_words(i, bytes);
}
#endif

inline void copy_tile(std::byte* dst, const std::byte* src, std::size_t bytes, bool streaming) {
#if GRADCOMP_CPU_DISPATCH
  if (streaming && avx2_active()) return stream_tile_avx2(dst, src, bytes);
#endif
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

// A code function that can also write 32 codes at once, hand-vectorised: code.block32(j, out)
// writes code(j) .. code(j + 31) to out. The pipelined path (AVX2) uses it.
template <class CodeAt, class Code>
concept block_code_source = requires(CodeAt& code, std::size_t j, Code* out) { code.block32(j, out); };

#if GRADCOMP_CPU_DISPATCH
// The x86 fast path: one loop both encodes tile t (32 codes per block, vector code) and
// finishes tile t - 1 (its CRC in four crc32 streams, its store), so the arithmetic of one
// overlaps the memory traffic of the other instead of taking turns. The tiles are
// write_codes' tiles (code_tile_bytes); the four CRC streams are joined with
// crc32c_combine's algebra.
inline constexpr std::size_t pipelined_stream_bytes = code_tile_bytes / 4;

// Block blk of the previous tile: 8 bytes into each CRC stream, 32 bytes stored.
template <bool Streaming>
__attribute__((target("avx2,sse4.2"), always_inline)) inline void finish_block(std::uint64_t (&crcs)[4],
                                                                              const unsigned char* tile_bytes,
                                                                              long long* out, std::size_t blk) {
  for (std::size_t s = 0; s < 4; ++s)
    crcs[s] = _mm_crc32_u64(crcs[s], load_le<std::uint64_t>(reinterpret_cast<const std::byte*>(
                                         tile_bytes + s * pipelined_stream_bytes + 8 * blk)));
  if constexpr (Streaming) {
    for (std::size_t q = 0; q < 4; ++q)
      _mm_stream_si64(out + 4 * blk + q, load_le<long long>(reinterpret_cast<const std::byte*>(tile_bytes + 32 * blk + 8 * q)));
  } else {
    std::memcpy(out + 4 * blk, tile_bytes + 32 * blk, 32);
  }
}

template <class Code, bool Streaming, class CodeAt, class Prefetch>
GRADCOMP_VECTORIZE __attribute__((target("avx2,sse4.2"))) std::uint32_t write_codes_pipelined(
    std::size_t tiles, CodeAt& code, Prefetch& ahead, std::byte* out, std::uint32_t crc) {
  // Per block: 32 codes encoded (a loop long enough to vectorise with any code size) and
  // 32 * sizeof(Code) bytes of the previous tile finished, 32 bytes at a time.
  constexpr std::size_t tile_bytes = code_tile_bytes, stream = pipelined_stream_bytes, block = 32;
  constexpr std::size_t tile = tile_bytes / sizeof(Code), finishes = sizeof(Code);
  constexpr std::uint32_t shift1 = gradcomp::detail::crc32c_x_pow_8n(stream);
  constexpr std::uint32_t shift2 = gradcomp::detail::crc32c_x_pow_8n(2 * stream);
  constexpr std::uint32_t shift3 = gradcomp::detail::crc32c_x_pow_8n(3 * stream);
  alignas(64) Code buffers[2][tile];
  const std::size_t end = tiles * tile;
  std::uint32_t reg = ~crc;
  for (std::size_t t = 0; t <= tiles; ++t) {
    Code* current = buffers[t & 1];
    const auto* previous = reinterpret_cast<const unsigned char*>(buffers[(t + 1) & 1]);
    auto* previous_out = reinterpret_cast<long long*>(out + (t > 0 ? t - 1 : 0) * tile_bytes);
    std::uint64_t crcs[4] = {reg, 0, 0, 0};
    const std::size_t blocks = t < tiles ? tile / block : 0, first = t * tile;
    for (std::size_t blk = 0; blk < blocks; ++blk) {  // encode tile t, finish tile t - 1
      ask_ahead(ahead, first + blk * block, block, end);
      if constexpr (block_code_source<CodeAt, Code>) {
        code.block32(first + blk * block, current + blk * block);
      } else {
        for (std::size_t j = 0; j < block; ++j) current[blk * block + j] = code(first + blk * block + j);
      }
      if (t > 0)
        for (std::size_t f = 0; f < finishes; ++f) finish_block<Streaming>(crcs, previous, previous_out, blk * finishes + f);
    }
    if (t == tiles && t > 0)
      for (std::size_t f = 0; f < tile_bytes / 32; ++f) finish_block<Streaming>(crcs, previous, previous_out, f);
    if (t > 0)
      reg = gradcomp::detail::crc32c_mulmod(static_cast<std::uint32_t>(crcs[0]), shift3) ^
            gradcomp::detail::crc32c_mulmod(static_cast<std::uint32_t>(crcs[1]), shift2) ^
            gradcomp::detail::crc32c_mulmod(static_cast<std::uint32_t>(crcs[2]), shift1) ^
            static_cast<std::uint32_t>(crcs[3]);
  }
  if constexpr (Streaming) _mm_sfence();
  return ~reg;
}

inline bool cpu_has_pipelined_store() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

// Writes code(j) for j in [0, count) as little-endian Code values to out and returns the
// CRC32C of the written bytes continued from `crc`. code(j) is called once per j, in order
// (code may be copied: give it captures by value, so byte stores cannot alias them).
// `streaming`: use non-temporal stores (for outputs larger than the last-level cache).
// ahead(j, n) may be called (by the x86 pipelined path) to say that code(j) .. code(j + n - 1)
// will be called about prefetch_values_ahead codes later, so it can prefetch what they read;
// j + n <= count.
template <class Code, class CodeAt, class Prefetch = no_prefetch>
std::uint32_t write_codes(std::size_t count, CodeAt&& code, std::byte* out, std::uint32_t crc, bool streaming,
                          [[maybe_unused]] Prefetch&& ahead = {}) {
  constexpr std::size_t tile_bytes = code_tile_bytes;
  constexpr std::size_t tile = tile_bytes / sizeof(Code);
  std::size_t done = 0;
#if GRADCOMP_CPU_DISPATCH
  if (count >= tile && cpu_has_pipelined_store() && avx2_allowed().load(std::memory_order_relaxed) &&
      reinterpret_cast<std::uintptr_t>(out) % 8 == 0) {
    crc = streaming ? write_codes_pipelined<Code, true>(count / tile, code, ahead, out, crc)
                    : write_codes_pipelined<Code, false>(count / tile, code, ahead, out, crc);
    done = count / tile * tile;
  }
#endif
  run_best([&]() GRADCOMP_LOOP_BODY {
    // Locals: byte-sized code stores could alias anything reached through a closure, and GCC
    // would reload the captures for every code instead of vectorising the loop.
    alignas(64) Code buffer[tile];
    auto code_at = code;
    for (std::size_t i0 = done; i0 < count; i0 += tile) {
      const std::size_t m = std::min(tile, count - i0);
      for (std::size_t j = 0; j < m; ++j) buffer[j] = code_at(i0 + j);
      const auto bytes = std::as_bytes(std::span(buffer, m));
      crc = gradcomp::detail::crc32c_integer(bytes, crc);
      detail::copy_tile(out + i0 * sizeof(Code), bytes.data(), bytes.size(), streaming);
    }
  });
  if (streaming) detail::streaming_fence();
  return crc;
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
  // Three CRC32C streams' worth (crc32c_integer() checksums whole rounds of them in parallel).
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
    crc_ = gradcomp::detail::crc32c_integer(std::span<const std::byte>(tile_, used_), crc_);
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

}  // namespace gradcomp::cpu
