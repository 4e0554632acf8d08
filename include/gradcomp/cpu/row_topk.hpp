#pragma once
// CPU skeleton for row-wise exact top-k (sparsify::row_topk): a chunk of n keys seen as rows
// of `cols` (the last row may be shorter), each keeping its k largest keys, ties to the lower
// index. Keys are packed with their inverted index into 64-bit words, all distinct, so "the k
// largest words" is exactly the rule. Small k (the token-level case: a few per row): one pass
// keeps a sorted list of the k largest words so far (a word enters only if it beats the
// smallest, rare after the first few); larger k: std::nth_element on a copy of the row. Either
// way O(cols) per row.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

namespace gradcomp::cpu {

class row_topk_selector {
 public:
  static constexpr std::size_t workspace_bytes(std::size_t cols) { return 2 * 8 * cols; }

  // `workspace` holds workspace_bytes(cols) bytes, 8-byte aligned.
  row_topk_selector(std::span<std::byte> workspace, std::size_t n, std::size_t cols, std::size_t k)
      : n_(n), cols_(cols), k_(k < cols ? k : cols), words_(reinterpret_cast<std::uint64_t*>(workspace.data())) {}

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
    std::uint64_t best[small_k];
    std::size_t filled = 0;
    for (std::size_t j = 0; j < len; ++j) {
      const std::uint64_t w = word(scan_key(row + j), j);
      if (filled == k && w <= best[k - 1]) continue;
      std::size_t at = filled < k ? filled++ : k - 1;
      for (; at > 0 && best[at - 1] < w; --at) best[at] = best[at - 1];
      best[at] = w;
    }
    for (std::size_t m = 0; m < k; ++m) out[m] = static_cast<std::uint32_t>(row + ~static_cast<std::uint32_t>(best[m]));
    std::sort(out, out + k);
    return k;
  }

  template <class ScanKey>
  std::size_t large_row(ScanKey& scan_key, std::size_t row, std::size_t len, std::size_t k, std::uint32_t* out) {
    std::uint64_t* order = words_ + cols_;
    for (std::size_t j = 0; j < len; ++j) words_[j] = word(scan_key(row + j), j);
    std::copy(words_, words_ + len, order);
    std::nth_element(order, order + (k - 1), order + len, std::greater<>());
    const std::uint64_t cut = order[k - 1];  // distinct words: exactly k are >= cut
    std::size_t kept = 0;
    for (std::size_t j = 0; j < len; ++j)
      if (words_[j] >= cut) out[kept++] = static_cast<std::uint32_t>(row + j);
    return kept;
  }

  std::size_t n_, cols_, k_;
  std::uint64_t* words_;
};

}  // namespace gradcomp::cpu
