#pragma once
// CPU skeleton for exact top-k: radix select on 31-bit magnitude keys, expected O(n).
//
//   1. count():  a 2^16-bin histogram of key >> 15 (the caller may fuse it into its own pass,
//                e.g. the residual update); the bin holding the k-th largest key is found.
//   2. finish(): one pass writes the indices of keys in higher bins straight to the output
//                and collects the (few) keys of the boundary bin; a 2^15-bin histogram of
//                their low bits finds the exact threshold; the selected candidates are merged
//                into the output. If the boundary bin is too big for the workspace (many
//                equal keys), a second full pass is used instead of the candidate list.
// Ties at the threshold go to the lower index; output indices are ascending u32.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "../core/byteio.hpp"

namespace gradcomp::cpu {

class topk_selector {
 public:
  static constexpr std::size_t high_bins = std::size_t{1} << 16;
  static constexpr std::size_t low_bins = std::size_t{1} << 15;

  static constexpr std::size_t candidate_capacity(std::size_t n) { return n / 64 + 1024; }
  static constexpr std::size_t workspace_bytes(std::size_t n) {
    return high_bins * sizeof(std::uint32_t) + 2 * candidate_capacity(n) * sizeof(std::uint32_t);
  }

  // `workspace` must hold workspace_bytes(n) bytes, 4-byte aligned.
  topk_selector(std::span<std::byte> workspace, std::size_t n, std::size_t k)
      : n_(n), k_(k), cap_(candidate_capacity(n)) {
    auto* base = reinterpret_cast<std::uint32_t*>(workspace.data());
    hist_ = base;
    cand_index_ = base + high_bins;
    cand_key_ = cand_index_ + cap_;
    std::memset(hist_, 0, high_bins * sizeof(std::uint32_t));
  }

  void count(std::uint32_t key) { ++hist_[key >> 15]; }

  // key_at(i) must return the key that was counted for element i.
  template <class KeyAt>
  void finish(KeyAt&& key_at, std::byte* out) {
    if (k_ == 0) return;
    if (k_ == n_) {
      for (std::size_t i = 0; i < n_; ++i) store_le<std::uint32_t>(out + 4 * i, static_cast<std::uint32_t>(i));
      return;
    }
    std::size_t above = 0;  // keys in bins above the boundary bin
    std::uint32_t bin = high_bins - 1;
    while (above + hist_[bin] < k_) above += hist_[bin--];
    const std::size_t need = k_ - above;  // still to take from the boundary bin, >= 1
    if (hist_[bin] <= cap_) {
      finish_with_candidates(key_at, out, bin, above, need);
    } else {
      finish_with_second_pass(key_at, out, bin, need);
    }
  }

 private:
  // Finds the low 15 bits t of the threshold among `count` low-key histogram entries and how
  // many keys equal to it are taken.
  void find_low_threshold(std::size_t need, std::uint32_t& t, std::size_t& take_equal) const {
    std::size_t above = 0;
    t = low_bins - 1;
    while (above + hist_[t] < need) above += hist_[t--];
    take_equal = need - above;
  }

  template <class KeyAt>
  void finish_with_candidates(KeyAt& key_at, std::byte* out, std::uint32_t bin, std::size_t above, std::size_t need) {
    std::size_t definite = 0, candidates = 0;
    for (std::size_t i = 0; i < n_; ++i) {
      const std::uint32_t key = key_at(i);
      const std::uint32_t high = key >> 15;
      if (high > bin) {
        store_le<std::uint32_t>(out + 4 * definite++, static_cast<std::uint32_t>(i));
      } else if (high == bin) {
        cand_index_[candidates] = static_cast<std::uint32_t>(i);
        cand_key_[candidates++] = key & 0x7fffu;
      }
    }
    std::memset(hist_, 0, low_bins * sizeof(std::uint32_t));
    for (std::size_t j = 0; j < candidates; ++j) ++hist_[cand_key_[j]];
    std::uint32_t t;
    std::size_t take_equal;
    find_low_threshold(need, t, take_equal);
    std::size_t selected = 0;  // compact the chosen candidates in place, index order kept
    for (std::size_t j = 0; j < candidates; ++j) {
      const std::uint32_t low = cand_key_[j];
      if (low > t || (low == t && take_equal > 0)) {
        take_equal -= (low == t);
        cand_index_[selected++] = cand_index_[j];
      }
    }
    // Merge out[0, definite) with the selected candidates into out[0, k), from the back.
    std::size_t a = definite, b = selected, w = above + need;
    while (b > 0) {
      const std::uint32_t from_out = a > 0 ? load_le<std::uint32_t>(out + 4 * (a - 1)) : 0;
      if (a > 0 && from_out > cand_index_[b - 1]) {
        store_le<std::uint32_t>(out + 4 * --w, from_out);
        --a;
      } else {
        store_le<std::uint32_t>(out + 4 * --w, cand_index_[--b]);
      }
    }
  }

  template <class KeyAt>
  void finish_with_second_pass(KeyAt& key_at, std::byte* out, std::uint32_t bin, std::size_t need) {
    std::memset(hist_, 0, low_bins * sizeof(std::uint32_t));
    for (std::size_t i = 0; i < n_; ++i) {
      const std::uint32_t key = key_at(i);
      if ((key >> 15) == bin) ++hist_[key & 0x7fffu];
    }
    std::uint32_t t;
    std::size_t take_equal;
    find_low_threshold(need, t, take_equal);
    const std::uint32_t threshold = (bin << 15) | t;
    std::size_t w = 0;
    for (std::size_t i = 0; i < n_; ++i) {
      const std::uint32_t key = key_at(i);
      if (key > threshold || (key == threshold && take_equal > 0)) {
        take_equal -= (key == threshold);
        store_le<std::uint32_t>(out + 4 * w++, static_cast<std::uint32_t>(i));
      }
    }
  }

  std::size_t n_, k_, cap_;
  std::uint32_t* hist_;
  std::uint32_t* cand_index_;
  std::uint32_t* cand_key_;
};

}  // namespace gradcomp::cpu
