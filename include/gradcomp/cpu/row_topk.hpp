#pragma once
// CPU skeleton for row-wise exact top-k (sparsify::row_topk): a chunk of n keys seen as rows
// of `cols` (the last row may be shorter), each keeping its k largest keys, ties to the lower
// index. Keys are packed with their inverted index into 64-bit words, all distinct, so "the k
// largest words" is exactly the rule. Small k (the token-level case: a few per row): one pass
// keeps a sorted list of the k largest words so far (a word enters only if it beats the
// smallest, rare after the first few); larger k: std::nth_element on the words of the keys
// above a lower bound (guessed from the previous row, or from a histogram of the top bits).
// Either way O(cols) per row.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "dispatch.hpp"

namespace gradcomp::cpu::detail {

class row_topk_selector {
 public:
  static constexpr std::size_t workspace_bytes(std::size_t cols) { return (2 * 8 + 4) * cols + 8; }

  // `workspace` holds workspace_bytes(cols) bytes, 8-byte aligned.
  row_topk_selector(std::span<std::byte> workspace, std::size_t n, std::size_t cols, std::size_t k)
      : n_(n), cols_(cols), k_(k < cols ? k : cols), words_(reinterpret_cast<std::uint64_t*>(workspace.data())),
        keys_(reinterpret_cast<std::uint32_t*>(words_ + 2 * cols)) {}

  // scan_key(i): key of element i, called exactly once per element in index order (the
  // caller fuses its per-element work into it). Writes the kept indices ascending to out;
  // returns their count.
  template <class ScanKey>
  std::size_t select(ScanKey&& scan_key, std::uint32_t* out) {
    std::size_t kept = 0;
    for (std::size_t row = 0; row < n_; row += cols_) {
      const std::size_t len = std::min(cols_, n_ - row), k = std::min(k_, len);
      if (k == 0 || k == len) {
        for (std::size_t j = 0; j < len; ++j) (void)scan_key(row + j);
        for (std::size_t j = 0; j < k; ++j) out[kept++] = static_cast<std::uint32_t>(row + j);
      } else if (k <= small_k) {
        kept += small_row(scan_key, row, len, k, out + kept);
      } else {
        kept += large_row(scan_key, row, len, k, out + kept);
      }
    }
    return kept;
  }

 private:
  static constexpr std::size_t small_k = 32;

  static std::uint64_t word(std::uint32_t key, std::size_t j) {
    return (std::uint64_t{key} << 32) | static_cast<std::uint32_t>(~static_cast<std::uint32_t>(j));
  }

  // best[0..k) holds the k largest words so far, descending.
  template <class ScanKey>
  std::size_t small_row(ScanKey& scan_key, std::size_t row, std::size_t len, std::size_t k, std::uint32_t* out) {
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
    return k;
  }

  // Larger k: a lower bound `lo` on the row's k-th largest key, then the words of the keys >= lo
  // (collected in index order) through nth_element. lo is first guessed from the previous
  // row (a quarter octave below its cut, for abs_key keys): one counting pass confirms that
  // k..4k + 64 keys reach it. Otherwise a histogram of the keys' top bits gives lo exactly
  // (the lower edge of the bin holding the k-th largest).
  template <class ScanKey>
  std::size_t large_row(ScanKey& scan_key, std::size_t row, std::size_t len, std::size_t k, std::uint32_t* out) {
    std::uint32_t* keys = keys_;
    const std::uint32_t guess = guess_;
    std::size_t reach = 0;
    run_best([&]() GRADCOMP_LOOP_BODY {
      std::uint32_t* to = keys;  // locals: the key stores cannot alias them, so the loop vectorises
      const std::uint32_t at_least = guess;
      std::size_t hits = 0;
      for (std::size_t j = 0; j < len; ++j) {
        const std::uint32_t key = scan_key(row + j);
        to[j] = key;
        hits += key >= at_least;
      }
      reach = hits;
    });
    std::uint32_t lo = guess;
    if (guess == 0 || reach < k || reach > 4 * k + 64) {
      std::uint32_t hist[bins] = {};
      for (std::size_t j = 0; j < len; ++j) ++hist[keys[j] >> bin_shift];
      std::size_t bin = bins - 1;
      for (reach = 0; reach + hist[bin] < k;) reach += hist[bin--];
      reach += hist[bin];
      lo = static_cast<std::uint32_t>(bin << bin_shift);
    }
    std::uint64_t* candidates = words_;
    std::uint64_t* order = words_ + cols_;
    std::size_t found = 0;
    run_best([&]() GRADCOMP_LOOP_BODY {  // blocks of 16 with no key >= lo cost one vector compare
      constexpr std::size_t block = 16;
      std::size_t j0 = 0;
      for (; j0 + block <= len; j0 += block) {
        std::uint32_t top = 0;
        for (std::size_t j = 0; j < block; ++j) top = std::max(top, keys[j0 + j]);
        if (top < lo) continue;
        for (std::size_t j = j0; j < j0 + block; ++j)
          if (keys[j] >= lo) candidates[found++] = word(keys[j], j);
      }
      for (std::size_t j = j0; j < len; ++j)
        if (keys[j] >= lo) candidates[found++] = word(keys[j], j);
    });
    std::copy(candidates, candidates + found, order);
    std::nth_element(order, order + (k - 1), order + found, std::greater<>());
    const std::uint64_t cut = order[k - 1];  // distinct words: exactly k are >= cut
    std::size_t kept = 0;
    for (std::size_t m = 0; m < found; ++m)
      if (candidates[m] >= cut) out[kept++] = static_cast<std::uint32_t>(row + ~static_cast<std::uint32_t>(candidates[m]));
    const auto cut_key = static_cast<std::uint32_t>(cut >> 32);
    guess_ = cut_key > guess_step ? cut_key - guess_step : 1;
    return kept;
  }

  static constexpr unsigned bin_shift = 21;  // abs_key: the exponent and 2 mantissa bits (any u32 key fits)
  static constexpr std::size_t bins = std::size_t{1} << (32 - bin_shift);
  static constexpr std::uint32_t guess_step = std::uint32_t{1} << 21;

  std::size_t n_, cols_, k_;
  std::uint64_t* words_;  // 2 x cols: candidates, and their copy for nth_element
  std::uint32_t* keys_;   // cols: the row's keys
  std::uint32_t guess_ = 0;
};

}  // namespace gradcomp::cpu::detail
