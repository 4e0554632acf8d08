#pragma once
// CPU skeleton for row-wise exact top-k (sparsify::row_topk): a chunk of n keys seen as rows
// of `cols` (the last row may be shorter), each keeping its k largest keys, ties to the lower
// index: "the k largest words" of (key << 32 | ~index), all distinct. Small k (a few per row):
// one pass keeps a sorted list of the k largest words so far (a word enters only if it beats
// the smallest, rare after the first few). Larger k (the token-level case, e.g. 512 of 4096)
// takes a few passes over the row's keys, each a vector compare per key, no sort, no
// histogram, no branch on the data per key:
//   1. the scan stores the row's keys with their minimum, maximum and sum;
//   2. a bracket lo <= T < hi around the k-th largest key T (at least k keys >= lo, fewer than
//      k >= hi) is narrowed by counting the keys at or above two probes per pass, until at
//      most max(64, k/4) keys lie in [lo, hi). The first probes sit around the previous row's
//      cut, shifted by the difference of the rows' mean keys (keys of |x| are about log2 |x|,
//      so a row of the same shape at another scale moves by that shift); later ones
//      interpolate log(count) between lo and hi, or split [lo, hi) in three when that did not
//      halve the keys in between (so the search ends after O(32) passes on any keys);
//   3. the cut word W: the (k - count(hi))-th largest word of the keys in [lo, hi), found by
//      counting the words above each (vector compares; nth_element beyond 128 of them); a
//      single key value [lo, lo + 1) is a run of ties whose words descend in index order;
//   4. one pass writes the indices of the words >= W in ascending order (keys above W's key,
//      and equal ones up to W's index), and the caller's values of them may follow.
// Passes 3 and 4 turn a mask of selected keys into their positions: with AVX-512, vpcompressd
// (16 keys an instruction); elsewhere a table of each mask byte's set bits, 8 positions stored
// whatever the byte holds, or for the few keys of pass 3 two positions per 32 keys from their
// lowest set bits. All write past their last position (room is left), all give the same
// positions. The probes only decide how fast the cut is found, never what is kept: the result
// is the k largest words whatever the data, the same as a sort. O(cols) per row either way.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <type_traits>
#include <utility>

#include "../core/config.hpp"
#include "dispatch.hpp"
#include "selector.hpp"

#if GRADCOMP_CPU_DISPATCH
#include <immintrin.h>
#endif

namespace gradcomp::cpu::detail {

// For each byte: the positions of its set bits, ascending (the rest 0), and their count.
struct set_bit_table {
  std::uint8_t positions[256][8];
  std::uint8_t count[256];
};
inline constexpr set_bit_table set_bits = [] {
  set_bit_table t{};
  for (unsigned b = 0; b < 256; ++b) {
    unsigned c = 0;
    for (unsigned i = 0; i < 8; ++i)
      if (b >> i & 1u) t.positions[b][c++] = static_cast<std::uint8_t>(i);
    t.count[b] = static_cast<std::uint8_t>(c);
  }
  return t;
}();

class row_topk_selector {
 public:
  // large_row's candidate words (room for `few` past the last), keys, and candidate
  // positions (room for 16 past the last); a multiple of 8.
  static constexpr std::size_t workspace_bytes(std::size_t cols) {
    return 8 * (cols + few) + 4 * (cols + cols % 2) + 4 * (cols + cols % 2 + 16);
  }

  // `workspace` holds workspace_bytes(cols) bytes, 8-byte aligned.
  row_topk_selector(std::span<std::byte> workspace, std::size_t n, std::size_t cols, std::size_t k)
      : n_(n), cols_(cols), k_(k < cols ? k : cols), workspace_(workspace.data()) {}

  // Entries of `out` that select() may write past the last kept index (garbage).
  static constexpr std::size_t out_slack = 16;

  // scan_key(i): key of element i, called exactly once per element in index order (the
  // caller fuses its per-element work into it). Writes the kept indices ascending to out
  // (which has room for out_slack more); returns their count. With `values`, value_at(i)
  // (element i's value once scanned, read while its row is in cache) goes to values[m]
  // beside out[m].
  template <class ScanKey, class ValueAt = std::nullptr_t>
  std::size_t select(ScanKey&& scan_key, std::uint32_t* out, ValueAt&& value_at = nullptr, float* values = nullptr) {
    std::size_t kept = 0;
    for (std::size_t row = 0; row < n_; row += cols_) {
      const std::size_t len = std::min(cols_, n_ - row), k = std::min(k_, len);
      std::uint32_t* const to = out + kept;
      if (k == 0 || k == len) {
        for (std::size_t j = 0; j < len; ++j) (void)scan_key(row + j);
        for (std::size_t j = 0; j < k; ++j) to[j] = static_cast<std::uint32_t>(row + j);
      } else if (k <= small_k) {
        small_row(scan_key, row, len, k, to);
      } else {
        large_row(scan_key, value_at, row, len, k, to, values ? values + kept : nullptr);
        kept += k;
        continue;
      }
      if constexpr (!std::is_same_v<std::remove_cvref_t<ValueAt>, std::nullptr_t>)
        if (values)
          for (std::size_t m = 0; m < k; ++m) values[kept + m] = value_at(to[m]);
      kept += k;
    }
    return kept;
  }

 private:
  static constexpr std::size_t small_k = 32;
  static constexpr std::size_t block = 32;  // keys per mask
  static constexpr std::size_t few = 2;     // pass 3's positions written per step
  static constexpr std::uint32_t top_bit = std::uint32_t{1} << (block - 1);

  static std::uint64_t word(std::uint32_t key, std::size_t j) {
    return (std::uint64_t{key} << 32) | static_cast<std::uint32_t>(~static_cast<std::uint32_t>(j));
  }

  // best[0..k) holds the k largest words so far, descending.
  template <class ScanKey>
  void small_row(ScanKey& scan_key, std::size_t row, std::size_t len, std::size_t k, std::uint32_t* out) {
    std::uint64_t best[small_k] = {};  // (k >= 1 here; zeroed so no compiler warns of a read)
    std::size_t j = 0;
    for (; j < k; ++j) {  // k < len here
      const std::uint64_t w = word(scan_key(row + j), j);
      std::size_t at = j;
      for (; at > 0 && best[at - 1] < w; --at) best[at] = best[at - 1];
      best[at] = w;
    }
    // A later key enters only if strictly larger than the smallest kept one (an equal key has
    // a higher index): one compare per element in a register, words built only on entry.
    std::uint32_t floor = static_cast<std::uint32_t>(best[k - 1] >> 32);
    for (; j < len; ++j) {
      const std::uint32_t key = scan_key(row + j);
      if (key <= floor) continue;
      const std::uint64_t w = word(key, j);
      std::size_t at = k - 1;
      for (; at > 0 && best[at - 1] < w; --at) best[at] = best[at - 1];
      best[at] = w;
      floor = static_cast<std::uint32_t>(best[k - 1] >> 32);
    }
    for (std::size_t m = 0; m < k; ++m) out[m] = static_cast<std::uint32_t>(row + ~static_cast<std::uint32_t>(best[m]));
    std::sort(out, out + k);
  }

  // Bit j: keys[j] >= at_least, j < 32 (vector compares where the ISA has them).
  GRADCOMP_INLINE static std::uint32_t mask_at_least(const std::uint32_t* keys, std::uint32_t at_least) {
    std::uint32_t m = 0;
    for (std::uint32_t j = 0; j < block; ++j) m |= std::uint32_t{keys[j] >= at_least} << j;
    return m;
  }
  // Bit j: keys[j] in [lo, lo + width], j < 32.
  GRADCOMP_INLINE static std::uint32_t mask_within(const std::uint32_t* keys, std::uint32_t lo, std::uint32_t width) {
    std::uint32_t m = 0;
    for (std::uint32_t j = 0; j < block; ++j) m |= std::uint32_t{keys[j] - lo <= width} << j;
    return m;
  }
  // Bit j: keys[j] > cut, or == cut at an index j0 + j <= last_tie (row-relative).
  GRADCOMP_INLINE static std::uint32_t mask_kept(const std::uint32_t* keys, std::size_t j0, std::uint32_t cut,
                                                 std::uint32_t last_tie) {
    if (j0 + block - 1 <= last_tie) return mask_at_least(keys, cut);
    const std::uint32_t above = cut == ~std::uint32_t{0} ? 0u : mask_at_least(keys, cut + 1);
    if (j0 > last_tie) return above;
    const std::uint32_t low = (std::uint32_t{2} << (last_tie - j0)) - 1u;  // bits 0 .. last_tie - j0 (< 31)
    return (mask_at_least(keys, cut) & low) | (above & ~low);
  }

#if GRADCOMP_CPU_DISPATCH
  // With AVX-512, vpcompressd packs a block's selected lanes side by side: the positions
  // base + j (j < whole, a multiple of 16), ascending, of the keys in [lo, lo + width]
  // (Within), else of the keys > lo, or == lo at j <= last_tie; 16 written past the last
  // (garbage). Returns their count. The same positions as the portable loops.
  template <bool Within>
  __attribute__((target(GRADCOMP_ISA_AVX512))) static std::size_t list_avx512(const std::uint32_t* keys, std::size_t whole,
                                                                             std::uint32_t base, std::uint32_t lo,
                                                                             std::uint32_t width_or_last_tie,
                                                                             std::uint32_t* to) {
    const __m512i low = _mm512_set1_epi32(static_cast<int>(lo));
    const __m512i bound = _mm512_set1_epi32(static_cast<int>(width_or_last_tie)), step = _mm512_set1_epi32(16);
    const __m512i offset = _mm512_set1_epi32(static_cast<int>(base));
    __m512i j = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    std::size_t at = 0;
    for (std::size_t j0 = 0; j0 < whole; j0 += 16) {
      const __m512i v = _mm512_loadu_si512(keys + j0);
      __mmask16 m;
      if constexpr (Within) {
        m = _mm512_cmple_epu32_mask(_mm512_sub_epi32(v, low), bound);
      } else {
        m = static_cast<__mmask16>(_mm512_cmpgt_epu32_mask(v, low) |
                                   _mm512_mask_cmpeq_epu32_mask(_mm512_cmple_epu32_mask(j, bound), v, low));
      }
      _mm512_storeu_si512(to + at, _mm512_maskz_compress_epi32(m, _mm512_add_epi32(j, offset)));
      at += static_cast<std::size_t>(std::popcount(static_cast<unsigned>(m)));
      j = _mm512_add_epi32(j, step);
    }
    return at;
  }
#endif

  // The rank-th largest of n distinct words, rank in [1, n]. Few of them (the usual case): the
  // one with rank - 1 words above it, counted by vector compares (n^2 / 2 of them on average,
  // no branch on the data but the one that stops), else std::nth_element.
  static std::uint64_t nth_largest(std::uint64_t* words, std::size_t n, std::size_t rank) {
    if (n > 128) {
      std::nth_element(words, words + (rank - 1), words + n, std::greater<>());
      return words[rank - 1];
    }
    std::uint64_t found = 0;
    run_best([&]() GRADCOMP_LOOP_BODY {
      const std::uint64_t* w = words;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint64_t above = 0;
        for (std::size_t j = 0; j < n; ++j) above += w[j] > w[i];
        if (above == rank - 1) {
          found = w[i];
          break;
        }
      }
    });
    return found;
  }

  // The number of keys >= a and >= b.
  struct counts {
    std::size_t a, b;
  };
  static counts count_at_least(const std::uint32_t* keys, std::size_t len, std::uint32_t a, std::uint32_t b) {
    counts c{};
    run_best([&]() GRADCOMP_LOOP_BODY {
      std::uint32_t ca = 0, cb = 0;  // (len < 2^32: cols is)
      for (std::size_t j = 0; j < len; ++j) {
        ca += keys[j] >= a;
        cb += keys[j] >= b;
      }
      c = {ca, cb};
    });
    return c;
  }

  template <class ScanKey, class ValueAt>
  void large_row(ScanKey& scan_key, ValueAt& value_at, std::size_t row, std::size_t len, std::size_t k,
                 std::uint32_t* out, float* values) {
    std::uint64_t* const words = reinterpret_cast<std::uint64_t*>(workspace_);  // cols + few
    std::uint32_t* const keys = reinterpret_cast<std::uint32_t*>(words + cols_ + few);

    // 1. Scan: keys, their extremes and sum.
    std::uint32_t least = 0, most = 0;
    std::uint64_t sum = 0;
    run_best([&]() GRADCOMP_LOOP_BODY {
      std::uint32_t* to = keys;  // locals: the key stores cannot alias them, so the loop vectorises
      std::uint32_t lo = ~std::uint32_t{0}, hi = 0;
      std::uint64_t s = 0;
      for (std::size_t j = 0; j < len; ++j) {
        const std::uint32_t key = scan_key(row + j);
        to[j] = key;
        lo = key < lo ? key : lo;
        hi = key > hi ? key : hi;
        s += key;
      }
      least = lo;
      most = hi;
      sum = s;
    });
    const double mean = static_cast<double>(sum) / static_cast<double>(len);

    // 2. The bracket: at least k keys >= lo, fewer than k >= hi.
    std::uint64_t lo = least, hi = std::uint64_t{most} + 1;
    std::size_t at_lo = len, at_hi = 0;
    const std::size_t enough = std::max<std::size_t>(64, k / 4);  // keys in [lo, hi) to stop at
    const auto narrow = [&](double a, double b) {  // probes clamped into (lo, hi); needs hi - lo >= 2
      const double first = static_cast<double>(lo + 1), last = static_cast<double>(hi - 1);
      const auto at = [&](double x) {  // (a NaN from degenerate arithmetic goes to the middle)
        const double c = x >= first ? (x <= last ? x : last) : (x < first ? first : 0.5 * (first + last));
        return static_cast<std::uint32_t>(c);
      };
      std::uint32_t pa = at(a), pb = at(b);
      if (pa > pb) std::swap(pa, pb);
      const counts c = count_at_least(keys, len, pa, pb);
      for (const auto& [p, count] : {std::pair{pa, c.a}, std::pair{pb, c.b}}) {
        if (count >= k) {
          if (p > lo) lo = p, at_lo = count;
        } else if (p < hi) {
          hi = p, at_hi = count;
        }
      }
    };
    if (have_previous_ && at_lo - at_hi > enough && hi - lo > 1) {
      const double centre = static_cast<double>(previous_cut_) + (mean - previous_mean_);
      const double reach = slope_ * static_cast<double>(enough) / 4;  // keys per count, near the cut
      narrow(centre - reach, centre + reach);
    }
    bool interpolate = true;
    while (at_lo - at_hi > enough && hi - lo > 1) {
      const std::size_t before = at_lo - at_hi;
      const double span = static_cast<double>(hi - lo);
      if (interpolate) {  // log(count + 1), linear between lo and hi, crosses log(k + 1/2) at x
        const double y_lo = std::log(static_cast<double>(at_lo) + 1), y_hi = std::log(static_cast<double>(at_hi) + 1);
        const double x = static_cast<double>(lo) + span * (y_lo - std::log(static_cast<double>(k) + 0.5)) / (y_lo - y_hi);
        const double reach = span * static_cast<double>(enough) / (4 * (static_cast<double>(k) + 0.5) * (y_lo - y_hi));
        narrow(x - reach, x + reach);
      } else {
        narrow(static_cast<double>(lo) + span / 3, static_cast<double>(lo) + 2 * span / 3);
      }
      interpolate = 2 * (at_lo - at_hi) <= before;
    }

    // 3. The cut: the (k - at_hi)-th largest word of the keys in [lo, hi).
    const std::size_t rank = k - at_hi;  // in [1, at_lo - at_hi]
    const auto low = static_cast<std::uint32_t>(lo), width = static_cast<std::uint32_t>(hi - 1 - lo);
    const std::size_t whole = len - len % block;
    std::uint64_t cut = 0;
    if (width == 0) {  // a single key value: its words descend in index order, the cut is the rank-th
      std::size_t seen = 0;
      bool done = false;
      for (std::size_t j0 = 0; j0 < whole && !done; j0 += block) {
        std::uint32_t m = mask_within(keys + j0, low, 0);
        const auto c = static_cast<std::size_t>(std::popcount(m));
        if (seen + c < rank) {
          seen += c;
          continue;
        }
        for (; seen + 1 < rank; ++seen) m &= m - 1;
        cut = word(low, j0 + static_cast<std::size_t>(std::countr_zero(m)));
        done = true;
      }
      for (std::size_t j = whole; j < len && !done; ++j)
        if (keys[j] == low && ++seen == rank) {
          cut = word(low, j);
          done = true;
        }
    } else {  // the words of the keys in [lo, hi)
      std::size_t found = 0;
#if GRADCOMP_CPU_DISPATCH
      if (active_isa() == isa::avx512) {
        std::uint32_t* const listed = reinterpret_cast<std::uint32_t*>(keys + cols_ + cols_ % 2);
        found = list_avx512<true>(keys, whole, 0, low, width, listed);
        for (std::size_t i = 0; i < found; ++i) words[i] = word(keys[listed[i]], listed[i]);
      } else
#endif
      run_best([&]() GRADCOMP_LOOP_BODY {
        std::uint64_t* to = words;
        std::size_t at = 0;
        for (std::size_t j0 = 0; j0 < whole; j0 += block) {
          std::uint32_t m = mask_within(keys + j0, low, width);
          const auto c = static_cast<std::size_t>(std::popcount(m));
          for (std::size_t b = 0; b < c || b == 0; b += few)
            for (std::size_t i = 0; i < few; ++i) {
              const std::size_t j = j0 + static_cast<std::size_t>(std::countr_zero(m | top_bit));  // (j0 + 31 past the last)
              to[at + b + i] = word(keys[j], j);
              m &= m - 1;
            }
          at += c;
        }
        found = at;
      });
      for (std::size_t j = whole; j < len; ++j)
        if (keys[j] - low <= width) words[found++] = word(keys[j], j);
      cut = nth_largest(words, found, rank);
    }

    // 4. The indices of the words >= cut, ascending (keys above the cut's key, and equal ones up
    // to its index); then their values, while the row is in cache.
    const auto cut_key = static_cast<std::uint32_t>(cut >> 32), last_tie = ~static_cast<std::uint32_t>(cut);
    std::size_t kept = 0;
#if GRADCOMP_CPU_DISPATCH
    if (active_isa() == isa::avx512)
      kept = list_avx512<false>(keys, whole, static_cast<std::uint32_t>(row), cut_key, last_tie, out);
    else
#endif
    run_best([&]() GRADCOMP_LOOP_BODY {
      std::uint32_t* to = out;
      std::size_t at = 0;
      for (std::size_t j0 = 0; j0 < whole; j0 += block) {
        const std::uint32_t m = mask_kept(keys + j0, j0, cut_key, last_tie);
        for (std::size_t q = 0; q < block / 8; ++q) {
          const std::uint32_t bits = m >> (8 * q) & 0xffu;
          const auto base = static_cast<std::uint32_t>(row + j0 + 8 * q);
          std::uint8_t set[8];  // a local copy: the stores below cannot change it, so they vectorise
          std::memcpy(set, set_bits.positions[bits], 8);
          for (std::size_t i = 0; i < 8; ++i) to[at + i] = base + set[i];
          at += set_bits.count[bits];
        }
      }
      kept = at;
    });
    for (std::size_t j = whole; j < len; ++j)
      if (keys[j] > cut_key || (keys[j] == cut_key && j <= last_tie)) out[kept++] = static_cast<std::uint32_t>(row + j);
    if constexpr (!std::is_same_v<std::remove_cvref_t<ValueAt>, std::nullptr_t>)
      if (values)
        for (std::size_t m = 0; m < k; ++m) values[m] = value_at(out[m]);

    // The next row's first probes.
    have_previous_ = true;
    previous_cut_ = static_cast<std::uint32_t>(cut >> 32);
    previous_mean_ = mean;
    slope_ = static_cast<double>(hi - lo) / static_cast<double>(at_lo - at_hi);
  }

  std::size_t n_, cols_, k_;
  std::byte* workspace_;  // large_row: candidate words, keys (workspace_bytes)
  bool have_previous_ = false;
  std::uint32_t previous_cut_ = 0;  // the previous row's cut key
  double previous_mean_ = 0;        // its mean key
  double slope_ = 0;                // keys per count near its cut
};

// The top-k of each row of a chunk, the kept values written beside their indices
// (cpu/selector.hpp).
template <>
struct selector_for<selection::row_topk> {
  template <class C>
  static std::size_t workspace_bytes(const C& comp, std::size_t) {
    return row_topk_selector::workspace_bytes(comp.get_config().sparsify.cols);
  }
  template <class In>
  static std::size_t select(const In& in, std::uint32_t* idx) {
    const std::size_t count = in.h.dense_count;
    const auto& cfg = in.comp.get_config();
    const auto value_at = [&f = in.fb](std::size_t j) { return f.value(j); };
    return row_topk_selector(in.scratch, count, cfg.sparsify.cols, In::compressor::sparsifier::per_row(cfg.sparsify))
        .select(in.scan_key(), idx, value_at, in.values);
  }
};

}  // namespace gradcomp::cpu::detail
