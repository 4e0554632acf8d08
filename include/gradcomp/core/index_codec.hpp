#pragma once
// Index sections of sparse frames: k strictly ascending indices in [0, n) of an n-element chunk
// (n < 2^32), stored in the smallest of three layouts (docs/wire-format.md):
//
//   u32_list  k little-endian u32                                          4k bytes
//   delta     [u8 width w <= 32, 7 zero bytes] then k gaps packed LSB first  8 + packed_bytes(k, w)
//             at w bits as pack_bits does; gap_0 = i_0, gap_m = i_m - i_{m-1} - 1
//   bitmap    bit j (byte j/8, LSB first) set iff j is sent                ceil(n/8) bytes
//
// check() validates an untrusted section; reader decodes one that passed.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "byteio.hpp"
#include "frame.hpp"
#include "status.hpp"

namespace gradcomp::indices {

GRADCOMP_HD constexpr std::size_t u32_bytes(std::size_t k) { return 4 * k; }
GRADCOMP_HD constexpr std::size_t delta_bytes(std::size_t k, unsigned width) { return 8 + packed_bytes(k, width); }
// Written without n + 7 so that no n can overflow.
GRADCOMP_HD constexpr std::size_t bitmap_bytes(std::size_t n) { return n / 8 + (n % 8 != 0); }

// Bits of the largest gap. OR-ing the gaps gives the same bit width as their maximum, and the
// loop has no compare, so it vectorises.
inline unsigned delta_width(const std::uint32_t* idx, std::size_t k) {
  if (k == 0) return 0;
  std::uint32_t any = idx[0];
  for (std::size_t m = 1; m < k; ++m) any |= idx[m] - idx[m - 1] - 1u;
  return static_cast<unsigned>(std::bit_width(any));
}

struct encoding {
  frame::index_format format = frame::index_format::u32_list;
  std::size_t bytes = 0;
  unsigned width = 0;  // delta only
};

// The smallest layout; ties go to u32_list, then delta, then bitmap. compact == false: u32_list.
inline encoding choose(const std::uint32_t* idx, std::size_t k, std::size_t n, bool compact = true) {
  encoding best{frame::index_format::u32_list, u32_bytes(k), 0};
  if (!compact) return best;
  const unsigned w = delta_width(idx, k);
  if (delta_bytes(k, w) < best.bytes) best = {frame::index_format::delta, delta_bytes(k, w), w};
  if (bitmap_bytes(n) < best.bytes) best = {frame::index_format::bitmap, bitmap_bytes(n), 0};
  return best;
}

namespace detail {
// 32 gaps below 2^W, LSB first at W bits each (gap i at bit i * W): exactly W u32 words.
template <unsigned W>
void pack_gaps(const std::uint32_t* gaps, std::byte* q) {
  std::uint32_t words[W] = {};
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC unroll 32
#endif
  for (unsigned i = 0; i < 32; ++i) {
    const unsigned bit = i * W, at = bit / 32, shift = bit % 32;
    words[at] |= gaps[i] << shift;
    if (shift + W > 32) words[at + 1] |= gaps[i] >> (32 - shift);
  }
  for (unsigned i = 0; i < W; ++i) store_le<std::uint32_t>(q + 4 * i, words[i]);
}
template <std::size_t... W>
constexpr auto make_gap_packers(std::index_sequence<W...>) {
  using packer = void (*)(const std::uint32_t*, std::byte*);
  return std::array<packer, sizeof...(W)>{(W == 0 ? nullptr : &pack_gaps<static_cast<unsigned>(W == 0 ? 1 : W)>)...};
}
inline constexpr auto gap_packers = make_gap_packers(std::make_index_sequence<33>{});  // by width, 1 .. 32
}  // namespace detail

// Writes exactly e.bytes bytes at out; idx ascending, < n, and e.width >= delta_width(idx, k).
inline void write(const encoding& e, const std::uint32_t* idx, std::size_t k, std::size_t n, std::byte* out) {
  switch (e.format) {
    case frame::index_format::u32_list:
      if (k) std::memcpy(out, idx, u32_bytes(k));  // little-endian host: the wire layout
      return;
    case frame::index_format::delta: {
      store_le<std::uint64_t>(out, e.width);  // width byte, then 7 zero bytes
      if (e.width == 0) return;               // indices 0..k-1: no gaps to store
      std::byte* q = out + 8;
      std::uint32_t expect = 0;  // the index a zero gap would give
      std::size_t m = 0;
      // Whole groups of 32 gaps fill exactly `width` u32 words: packed with the width a
      // constant (detail::pack_gaps), no carried bit count. The rest bit by bit below.
      for (const auto pack = detail::gap_packers[e.width]; m + 32 <= k; m += 32, q += 4 * e.width) {
        std::uint32_t gaps[32];
        gaps[0] = idx[m] - expect;
        for (unsigned i = 1; i < 32; ++i) gaps[i] = idx[m + i] - idx[m + i - 1] - 1u;
        expect = idx[m + 31] + 1u;
        pack(gaps, q);
      }
      std::uint64_t acc = 0;
      unsigned filled = 0;
      for (; m < k; ++m) {
        acc |= static_cast<std::uint64_t>(idx[m] - expect) << filled;
        expect = idx[m] + 1u;
        filled += e.width;
        if (filled >= 32) {  // filled < 32 before the add and width <= 32: never past 64
          store_le<std::uint32_t>(q, static_cast<std::uint32_t>(acc));
          q += 4;
          acc >>= 32;
          filled -= 32;
        }
      }
      for (; filled > 0; filled = filled > 8 ? filled - 8 : 0, acc >>= 8) *q++ = static_cast<std::byte>(acc & 0xffu);
      return;
    }
    case frame::index_format::bitmap:
      std::memset(out, 0, bitmap_bytes(n));
      for (std::size_t m = 0; m < k; ++m) out[idx[m] / 8] |= static_cast<std::byte>(1u << (idx[m] % 8));
      return;
    default: return;  // none, seeded: no section
  }
}

namespace detail {
// Gaps of a delta section: one unaligned 8-byte load per gap (width + 7 <= 64 bits), no
// carried buffer, so the loop has no refill branch; within 8 bytes of the end the tail is
// copied bytewise so reads stay inside [p, p + end). Past the end it yields zero gaps.
struct gap_stream {
  const std::byte* p;
  std::size_t end;
  unsigned width;
  std::size_t bit = 64;  // the 8-byte prefix

  std::uint32_t next() {
    const std::size_t byte = bit / 8;
    std::uint64_t v = 0;
    if (byte + 8 <= end) v = load_le<std::uint64_t>(p + byte);
    else if (byte < end) std::memcpy(&v, p + byte, end - byte);
    v >>= bit % 8;
    bit += width;
    return static_cast<std::uint32_t>(v & ((std::uint64_t{1} << width) - 1u));
  }
};

// Up to 8 bytes at p (fewer at a section's end), zero-extended.
inline std::uint64_t load_word(const std::byte* p, std::size_t left) {
  if (left >= 8) return load_le<std::uint64_t>(p);  // fixed-size copy: one load, not a memcpy call
  std::uint64_t w = 0;
  std::memcpy(&w, p, left);
  return w;
}
}  // namespace detail

// Validates an untrusted section of `bytes` bytes said to hold k ascending indices < n.
inline status check(frame::index_format format, const std::byte* section, std::size_t bytes, std::size_t k,
                    std::size_t n) {
  if (n > 0xffffffffu) return {errc::invalid_argument, "chunk has 2^32 or more elements"};
  switch (format) {
    case frame::index_format::u32_list: {
      if (bytes % 4 != 0 || bytes / 4 != k) return {errc::bad_header, "u32 index section is not 4 bytes per index"};
      // Ascending indices are all < n iff the last is, so the loop only looks for a descent
      // (branch-free, vectorisable).
      bool descent = false;
      for (std::size_t m = 1; m < k; ++m)
        descent |= load_le<std::uint32_t>(section + 4 * m) <= load_le<std::uint32_t>(section + 4 * (m - 1));
      if (descent) return {errc::index_not_ascending, "u32 indices are not strictly ascending"};
      if (k && load_le<std::uint32_t>(section + 4 * (k - 1)) >= n)
        return {errc::index_out_of_range, "u32 index is >= the chunk's element count"};
      return {};
    }
    case frame::index_format::delta: {
      if (bytes < 8) return {errc::bad_header, "delta index section is shorter than its 8-byte prefix"};
      const unsigned w = static_cast<unsigned>(section[0]);
      if (w > 32) return {errc::bad_header, "delta gap width is over 32 bits"};
      if ((load_le<std::uint64_t>(section) >> 8) != 0) return {errc::bad_header, "delta reserved byte is not zero"};
      if (w == 0) {  // indices 0..k-1
        if (bytes != 8) return {errc::bad_header, "delta index section size does not match count and width"};
        return k <= n ? status{} : status{errc::index_out_of_range, "delta index is >= the chunk's element count"};
      }
      // Bounding k first keeps k * w from overflowing; a larger k could not fit in memory anyway.
      if (k > SIZE_MAX / 32 || bytes != delta_bytes(k, w))
        return {errc::bad_header, "delta index section size does not match count and width"};
      const unsigned tail = static_cast<unsigned>(k * w % 8);
      if (tail && (static_cast<unsigned>(section[bytes - 1]) >> tail) != 0)
        return {errc::bad_header, "delta section has stray bits after the last gap"};
      detail::gap_stream s{section, bytes, w};
      // end = last index + 1. Indices ascend, so checking end <= n after each block suffices;
      // a block adds < 2^44, so the 64-bit sum cannot overflow before the check catches it.
      std::uint64_t end = 0;
      for (std::size_t m = 0; m < k;) {
        const std::size_t stop = std::min<std::size_t>(k, m + 4096);
        for (; m < stop; ++m) end += s.next() + std::uint64_t{1};
        if (end > n) return {errc::index_out_of_range, "delta indices pass the chunk's element count"};
      }
      return {};
    }
    case frame::index_format::bitmap: {
      if (bytes != bitmap_bytes(n)) return {errc::bad_header, "bitmap size is not ceil(element count / 8) bytes"};
      if (n % 8 && (static_cast<unsigned>(section[bytes - 1]) >> (n % 8)) != 0)
        return {errc::bad_header, "bitmap sets a bit at or past the chunk's element count"};
      std::size_t set = 0;
      for (std::size_t b = 0; b < bytes; b += 8)
        set += static_cast<std::size_t>(std::popcount(detail::load_word(section + b, bytes - b)));
      if (set != k) return {errc::bad_header, "bitmap popcount differs from the kept count"};
      return {};
    }
    default: return {errc::invalid_argument, "index format has no index section"};
  }
}

// Sequential decoding of a section that passed check(); next() calls together ask for at most k.
class reader {
 public:
  reader(frame::index_format format, const std::byte* section, std::size_t bytes)
      : format_(format), p_(section), bytes_(bytes),
        gaps_{section, bytes, format == frame::index_format::delta && bytes >= 8 ? unsigned(section[0]) : 0u} {}

  void next(std::uint32_t* out, std::size_t count) {
    switch (format_) {
      case frame::index_format::u32_list:
        if (count) std::memcpy(out, p_ + pos_, 4 * count);
        pos_ += 4 * count;
        return;
      case frame::index_format::delta:
        for (std::size_t m = 0; m < count; ++m) {
          out[m] = expect_ + gaps_.next();
          expect_ = out[m] + 1u;  // wraps only after index 2^32 - 1, which must be the last
        }
        return;
      case frame::index_format::bitmap:
        for (std::size_t m = 0; m < count; ++m) {
          while (word_ == 0) {
            if (pos_ >= bytes_) return;  // asked for more than the section holds
            word_ = detail::load_word(p_ + pos_, bytes_ - pos_);
            base_ = static_cast<std::uint32_t>(8 * pos_);
            pos_ += 8;
          }
          out[m] = base_ + static_cast<std::uint32_t>(std::countr_zero(word_));
          word_ &= word_ - 1;  // clear the lowest set bit
        }
        return;
      default: return;
    }
  }

 private:
  frame::index_format format_;
  const std::byte* p_;
  std::size_t bytes_;
  std::size_t pos_ = 0;       // u32_list, bitmap: next byte to read
  detail::gap_stream gaps_;   // delta
  std::uint32_t expect_ = 0;  // delta: the index a zero gap gives
  std::uint64_t word_ = 0;    // bitmap: unread bits of the current word
  std::uint32_t base_ = 0;    // bitmap: index of word_'s bit 0
};

}  // namespace gradcomp::indices
