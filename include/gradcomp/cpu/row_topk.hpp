#pragma once
// CPU skeleton for row-wise exact top-k (sparsify::row_topk): a chunk of n keys seen as rows
// of `cols` (the last row may be shorter), each keeping its k largest keys, ties to the lower
// index. Per row: the keys are packed with their inverted index into 64-bit words, so that
// one std::nth_element finds the k-th largest (key, lower index first) exactly; then a pass
// over the row emits the indices of the words at or above it, ascending. O(cols) per row.

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
    std::uint64_t* order = words_ + cols_;
    for (std::size_t row = 0; row < n_; row += cols_) {
      const std::size_t len = std::min(cols_, n_ - row), k = std::min(k_, len);
      for (std::size_t j = 0; j < len; ++j)
        words_[j] = (std::uint64_t{scan_key(row + j)} << 32) | static_cast<std::uint32_t>(~static_cast<std::uint32_t>(j));
      if (k == 0) continue;
      if (k == len) {
        for (std::size_t j = 0; j < len; ++j) out[kept++] = static_cast<std::uint32_t>(row + j);
        continue;
      }
      std::copy(words_, words_ + len, order);
      std::nth_element(order, order + (k - 1), order + len, std::greater<>());
      const std::uint64_t cut = order[k - 1];  // distinct words: exactly k are >= cut
      for (std::size_t j = 0; j < len; ++j)
        if (words_[j] >= cut) out[kept++] = static_cast<std::uint32_t>(row + j);
    }
    return kept;
  }

 private:
  std::size_t n_, cols_, k_;
  std::uint64_t* words_;
};

}  // namespace gradcomp::cpu
