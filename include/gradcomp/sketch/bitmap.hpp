#pragma once
// Kept-position bitmaps over a region of `count` elements (TAGC's global bitmap, docs/tagc.md).
//
// 1-bit form: u32 words, bit j % 32 of word j / 32 (LSB first); bits at or past `count` in the
// last word are zero. The union over ranks is a bitwise OR (MPI_BOR).
//
// Sum-safe form, for transports that can only add (NCCL): w = ceil(log2(W + 1)) bits per
// position for world size W, floor(32 / w) fields per word, no field straddles two words, and
// the high bits left over in a word are zero. Each rank writes 1 in the fields of its kept
// positions; summed, a field counts the ranks keeping its position, at most W < 2^w, so no
// carry ever crosses a field. Union bit = field != 0.
//
// The per-word functions are GRADCOMP_HD (one GPU thread per word); the span functions are the
// host loops over them.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/config.hpp"
#include "../core/status.hpp"

namespace gradcomp::sketch {

GRADCOMP_HD inline std::uint32_t popcount32(std::uint32_t x) {
#if GRADCOMP_DEVICE_CODE
  return static_cast<std::uint32_t>(__popc(x));
#else
  // Bit arithmetic rather than std::popcount, which without -mpopcnt is a library call.
  x = x - ((x >> 1) & 0x55555555u);
  x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
  return (((x + (x >> 4)) & 0x0f0f0f0fu) * 0x01010101u) >> 24;
#endif
}

GRADCOMP_HD constexpr std::size_t bitmap_words(std::size_t count) { return (count + 31) / 32; }

// The bits of the last word that hold positions (all ones when count is a multiple of 32).
GRADCOMP_HD constexpr std::uint32_t bitmap_tail_mask(std::size_t count) {
  return count % 32 == 0 ? 0xffffffffu : (1u << (count % 32)) - 1u;
}

// No bit set at or past `count` (the last of bitmap_words(count) words is the only one to check).
GRADCOMP_HD inline bool tail_is_clear(const std::uint32_t* words, std::size_t count) {
  const std::size_t n = bitmap_words(count);
  return n == 0 || (words[n - 1] & ~bitmap_tail_mask(count)) == 0;
}

GRADCOMP_HD inline bool bitmap_test(const std::uint32_t* words, std::size_t j) {
  return ((words[j / 32] >> (j % 32)) & 1u) != 0;
}

// Word w of the bitmap of keep(j) over j < count (keep: a callable j -> bool; in device code a
// functor with a __device__ call operator).
template <class Keep>
GRADCOMP_HD inline std::uint32_t bitmap_word(const Keep& keep, std::size_t w, std::size_t count) {
  const std::size_t first = 32 * w;
  std::uint32_t word = 0;
  if (count - first >= 32) {  // a full word: a fixed trip count, which compilers unroll
    for (std::uint32_t t = 0; t < 32; ++t) word |= static_cast<std::uint32_t>(keep(first + t) ? 1u : 0u) << t;
  } else {
    for (std::uint32_t t = 0; first + t < count; ++t) word |= static_cast<std::uint32_t>(keep(first + t) ? 1u : 0u) << t;
  }
  return word;
}

// --- Host loops over caller-owned spans ----------------------------------------------------

// The same words as bitmap_word, in a host loop (so that keep may be a host lambda under nvcc).
template <class Keep>
status build_bitmap(std::size_t count, const Keep& keep, std::span<std::uint32_t> out) {
  if (out.size() != bitmap_words(count)) return {errc::size_mismatch, "bitmap words differ from ceil(count / 32)"};
  for (std::size_t w = 0; w + 1 < out.size(); ++w) {
    std::uint32_t word = 0;
    for (std::uint32_t t = 0; t < 32; ++t) word |= static_cast<std::uint32_t>(keep(32 * w + t) ? 1u : 0u) << t;
    out[w] = word;
  }
  if (!out.empty()) {
    std::uint32_t word = 0;
    for (std::size_t j = 32 * (out.size() - 1); j < count; ++j) word |= static_cast<std::uint32_t>(keep(j) ? 1u : 0u) << (j % 32);
    out.back() = word;
  }
  return {};
}

// An untrusted bitmap: its size, and no bit set at or past `count`.
inline status check_bitmap(std::span<const std::uint32_t> words, std::size_t count) {
  if (words.size() != bitmap_words(count)) return {errc::size_mismatch, "bitmap words differ from ceil(count / 32)"};
  if (!tail_is_clear(words.data(), count))
    return {errc::index_out_of_range, "bitmap has a bit set past the region's element count"};
  return {};
}

inline std::size_t bitmap_popcount(std::span<const std::uint32_t> words) {
  std::size_t n = 0;
  for (std::uint32_t w : words) n += popcount32(w);
  return n;
}

// The most set bits in one lane of `words`: lane t holds bits t, t + block, t + 2 block, ...
// `counts` holds min(block, 32 words.size()) counters of scratch; block >= 1.
inline std::size_t bitmap_fullest_lane(std::span<const std::uint32_t> words, std::uint32_t block, std::span<std::uint32_t> counts) {
  std::fill(counts.begin(), counts.end(), 0u);
  std::uint32_t most = 0;
  for (std::size_t w = 0; w < words.size(); ++w)
    for (std::uint32_t word = words[w]; word != 0; word &= word - 1) {
      const std::size_t j = 32 * w + static_cast<std::size_t>(std::countr_zero(word));
      most = std::max(most, ++counts[j % block]);
    }
  return most;
}

// dst |= src: what MPI_BOR does to the ranks' bitmaps.
inline status bitmap_or(std::span<std::uint32_t> dst, std::span<const std::uint32_t> src) {
  if (dst.size() != src.size()) return {errc::size_mismatch, "bitmaps of different sizes"};
  for (std::size_t w = 0; w < dst.size(); ++w) dst[w] |= src[w];
  return {};
}

// --- Sum-safe packing ----------------------------------------------------------------------

struct sum_safe_layout {
  std::uint32_t world = 1;     // W, the number of ranks whose words are summed
  std::uint32_t width = 1;     // w = ceil(log2(W + 1)) = bit width of W
  std::uint32_t per_word = 32;  // floor(32 / w) fields per word

  // Precondition: world >= 1 (checked by the host functions).
  GRADCOMP_HD static constexpr sum_safe_layout make(std::uint32_t world) {
    std::uint32_t w = 0;
    for (std::uint32_t v = world; v != 0; v >>= 1) ++w;
    return {world, w, w == 0 ? 32u : 32u / w};
  }
  GRADCOMP_HD constexpr std::size_t words(std::size_t count) const { return (count + per_word - 1) / per_word; }
  GRADCOMP_HD constexpr std::uint32_t field_mask() const { return width >= 32 ? 0xffffffffu : (1u << width) - 1u; }
  // The number of ranks that keep position j (the field of j in a summed buffer).
  GRADCOMP_HD constexpr std::uint32_t field(const std::uint32_t* words, std::size_t j) const {
    return (words[j / per_word] >> (width * static_cast<std::uint32_t>(j % per_word))) & field_mask();
  }
};

// The sum-safe word whose field q is bit q of `bits` (q < per_word), and back: bit q set when
// field q is not zero.
GRADCOMP_HD inline std::uint32_t sum_safe_fields(std::uint32_t bits, const sum_safe_layout& l) {
  std::uint32_t word = 0;
  for (std::uint32_t q = 0; q < l.per_word; ++q) word |= ((bits >> q) & 1u) << (q * l.width);
  return word;
}
GRADCOMP_HD inline std::uint32_t nonzero_fields(std::uint32_t word, const sum_safe_layout& l) {
  std::uint32_t bits = 0;
  for (std::uint32_t q = 0; q < l.per_word; ++q) bits |= (((word >> (q * l.width)) & l.field_mask()) != 0 ? 1u : 0u) << q;
  return bits;
}

// Word w of one rank's sum-safe form of its 1-bit bitmap.
GRADCOMP_HD inline std::uint32_t sum_safe_word(const std::uint32_t* bitmap, std::size_t w, std::size_t count,
                                               const sum_safe_layout& l) {
  const std::size_t first = w * l.per_word;
  const std::size_t n = count - first < l.per_word ? count - first : l.per_word;
  std::uint32_t bits = 0;
  for (std::uint32_t q = 0; q < n; ++q) bits |= ((bitmap[(first + q) / 32] >> ((first + q) % 32)) & 1u) << q;
  return sum_safe_fields(bits, l);
}

// Checks word w of a summed buffer: ok, count_too_large (a field above W), bad_meta (a
// padding bit above the last field is set) or index_out_of_range (a field past `count` is set).
GRADCOMP_HD inline errc check_sum_safe_word(std::uint32_t word, std::size_t w, std::size_t count,
                                            const sum_safe_layout& l) {
  const std::uint32_t used = l.per_word * l.width;
  if (used < 32 && (word >> used) != 0) return errc::bad_meta;
  const std::size_t first = w * l.per_word;
  bool over = false, past = false;
  for (std::uint32_t q = 0; q < l.per_word; ++q) {
    const std::uint32_t f = (word >> (q * l.width)) & l.field_mask();
    over = over || f > l.world;
    past = past || (f != 0 && first + q >= count);
  }
  return over ? errc::count_too_large : past ? errc::index_out_of_range : errc::ok;
}

// Word w of the 1-bit union bitmap decoded from a (checked) summed buffer.
GRADCOMP_HD inline std::uint32_t union_word_from_sum_safe(const std::uint32_t* sums, std::size_t w, std::size_t count,
                                                          const sum_safe_layout& l) {
  const std::size_t first = 32 * w;
  const std::size_t n = count - first < 32 ? count - first : 32;
  std::size_t src = first / l.per_word;  // the summed word and field of position first + t
  std::uint32_t q = static_cast<std::uint32_t>(first % l.per_word);
  std::uint32_t word = 0;
  for (std::uint32_t t = 0; t < n; ++t) {
    word |= static_cast<std::uint32_t>(((sums[src] >> (q * l.width)) & l.field_mask()) != 0 ? 1u : 0u) << t;
    if (++q == l.per_word) {
      q = 0;
      ++src;
    }
  }
  return word;
}

// The host loops stream the bits (a 64-bit buffer between the two packings) instead of
// computing each word on its own; the tests hold them to the per-word functions above.
inline status to_sum_safe(std::span<const std::uint32_t> bitmap, std::size_t count, std::uint32_t world,
                          std::span<std::uint32_t> out) {
  if (world == 0) return {errc::invalid_argument, "sum-safe bitmap needs a world size >= 1"};
  if (status s = check_bitmap(bitmap, count); !s) return s;
  const auto l = sum_safe_layout::make(world);
  if (out.size() != l.words(count)) return {errc::size_mismatch, "sum-safe words differ from sum_safe_layout::words"};
  std::uint64_t buf = 0;
  std::uint32_t nbits = 0;
  std::size_t next = 0;
  const std::uint64_t take = (std::uint64_t{1} << l.per_word) - 1;
  for (std::size_t w = 0; w < out.size(); ++w) {
    if (nbits < l.per_word && next < bitmap.size()) {
      buf |= std::uint64_t{bitmap[next++]} << nbits;
      nbits += 32;
    }
    const auto bits = static_cast<std::uint32_t>(buf & take);  // past the bitmap's end: zeros
    buf >>= l.per_word;
    nbits = nbits > l.per_word ? nbits - l.per_word : 0;
    out[w] = sum_safe_fields(bits, l);
  }
  return {};
}

// Validates the whole summed buffer before writing the union bitmap.
inline status union_from_sum_safe(std::span<const std::uint32_t> sums, std::size_t count, std::uint32_t world,
                                  std::span<std::uint32_t> bitmap) {
  if (world == 0) return {errc::invalid_argument, "sum-safe bitmap needs a world size >= 1"};
  const auto l = sum_safe_layout::make(world);
  if (sums.size() != l.words(count)) return {errc::size_mismatch, "sum-safe words differ from sum_safe_layout::words"};
  if (bitmap.size() != bitmap_words(count)) return {errc::size_mismatch, "bitmap words differ from ceil(count / 32)"};
  for (std::size_t w = 0; w < sums.size(); ++w) {
    switch (check_sum_safe_word(sums[w], w, count, l)) {
      case errc::ok: break;
      case errc::count_too_large: return {errc::count_too_large, "sum-safe field counts more ranks than the world size"};
      case errc::bad_meta: return {errc::bad_meta, "sum-safe padding bit set above the last field of a word"};
      default: return {errc::index_out_of_range, "sum-safe field set past the region's element count"};
    }
  }
  std::uint64_t buf = 0;
  std::uint32_t nbits = 0;
  std::size_t next = 0;
  for (const std::uint32_t word : sums) {
    buf |= std::uint64_t{nonzero_fields(word, l)} << nbits;
    nbits += l.per_word;
    if (nbits >= 32 && next < bitmap.size()) {
      bitmap[next++] = static_cast<std::uint32_t>(buf);
      buf >>= 32;
      nbits -= 32;
    }
  }
  if (next < bitmap.size()) bitmap[next++] = static_cast<std::uint32_t>(buf);  // the last, partial word
  return {};
}

}  // namespace gradcomp::sketch
