#pragma once
// CPU skeleton for exact top-k over 31-bit magnitude keys (abs_key), expected O(n), one pass.
//
//   1. Bracket: a strided sample of the keys gives lo <= T <= hi around the k-th largest key T
//      (sample order statistics with a margin of 4 standard deviations, exact when the sample
//      is the whole chunk).
//   2. Scan (the caller's per-element work, e.g. the residual update, is fused here): indices
//      of keys > hi go straight to the output, keys in [lo, hi] are collected as candidates.
//      Blocks of 16 keys with nothing >= lo (the vast majority) cost one vector compare.
//   3. If the bracket held (fewer than k keys above hi, at least k at or above lo, candidates
//      fit), nth_element on the candidates finishes the selection exactly. Otherwise (a sample
//      that misrepresents the data, e.g. many equal keys) an exact radix select runs instead:
//      a 2^16-bin histogram of key >> 15, then the low 15 bits of the boundary bin.
// Ties at the threshold go to the lower index; output indices are ascending u32. The result
// is a function of the keys alone, whichever path computed it.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>

#include "../core/byteio.hpp"
#include "dispatch.hpp"
#include "prefetch.hpp"
#include "selector.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gradcomp::cpu::detail {

// Bit j set where keys[j] >= lo, j < 16. Keys are |x| bit patterns (below 2^31), and callers
// pass lo <= 2^31 - 1, so signed compares order them; with SSE2 that is four compares and
// four movemasks instead of 16 scalar tests (compilers do not vectorise the portable loop).
inline std::uint32_t keys_at_least(const std::uint32_t* keys, std::uint32_t lo) {
  std::uint32_t hits = 0;
#if defined(__SSE2__)
  const __m128i below = _mm_set1_epi32(static_cast<int>(lo) - 1);  // key >= lo <=> key > lo - 1
  for (int q = 0; q < 4; ++q) {
    const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(keys + 4 * q));
    hits |= static_cast<std::uint32_t>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(k, below)))) << (4 * q);
  }
#else
  for (std::size_t j = 0; j < 16; ++j) hits |= std::uint32_t{keys[j] >= lo} << j;
#endif
  return hits;
}

class topk_selector {
 public:
  static constexpr std::size_t sample_size = std::size_t{1} << 15;
  static constexpr std::size_t high_bins = std::size_t{1} << 16;
  static constexpr std::size_t low_bins = std::size_t{1} << 15;

  // Up to compact_max elements the sample is the whole input and the candidates can hold all
  // of it, so there is no radix fallback and no histogram: 20 bytes per element rather than
  // about 450 KiB, which every small tensor's state (biases, norms, the shards of the sharded
  // path at large world sizes) would otherwise hold.
  static constexpr std::size_t compact_max = std::size_t{1} << 14;
  static constexpr bool compact(std::size_t n) { return n <= compact_max; }
  static constexpr std::size_t candidate_capacity(std::size_t n) { return compact(n) ? n : n / 32 + 4096; }
  static constexpr std::size_t workspace_bytes(std::size_t n) {
    return 2 * candidate_capacity(n) * 8 + (compact(n) ? n * 4 : high_bins * 4 + sample_size * 4);
  }

  // `workspace` must hold workspace_bytes(n) bytes, 8-byte aligned.
  topk_selector(std::span<std::byte> workspace, std::size_t n, std::size_t k)
      : n_(n), k_(k), cap_(candidate_capacity(n)) {
    auto* base = workspace.data();
    candidates_ = reinterpret_cast<std::uint64_t*>(base);
    auto* after = reinterpret_cast<std::uint32_t*>(base + 2 * cap_ * 8);
    hist_ = compact(n) ? nullptr : after;
    sample_ = compact(n) ? after : after + high_bins;
  }

  // sample_key(i): key of element i without side effects (called for sampled i, any order).
  // scan_key(i): key of element i; called exactly once per element, in index order, so the
  //              caller may fuse per-element work into it.
  // key_at(i):   key of element i after the scan (used only by the radix fallback).
  // ahead(i, m): elements i .. i + m - 1 will be scanned about prefetch_values_ahead
  //              elements later (i + m <= n), a chance to prefetch them.
  template <class SampleKey, class ScanKey, class KeyAt, class Prefetch = no_prefetch>
  void select(SampleKey&& sample_key, ScanKey&& scan_key, KeyAt&& key_at, std::uint32_t* out, Prefetch&& ahead = {}) {
    if (k_ == 0 || k_ == n_) {
      for (std::size_t i = 0; i < n_; ++i) (void)scan_key(i);
      for (std::size_t i = 0; i < k_; ++i) out[i] = static_cast<std::uint32_t>(i);
      return;
    }
    bracket(sample_key);
    scan(scan_key, out, ahead);
    used_fallback_ = !(definite_ < k_ && definite_ + candidates_found_ >= k_ && candidates_found_ <= cap_);
    if (used_fallback_ && hist_ == nullptr) {
      // Compact: the bracket is exact when sample_key and scan_key agree, so this runs only
      // when they do not; every element is then a candidate.
      for (std::size_t i = 0; i < n_; ++i) candidates_[i] = pack(key_at(i), i);
      definite_ = 0;
      candidates_found_ = n_;
      finish_from_candidates(out);
    } else if (used_fallback_) {
      radix_select(key_at, out);
    } else {
      finish_from_candidates(out);
    }
  }

  // Whether the last select() needed the radix fallback (for tests and benchmarks).
  bool used_fallback() const { return used_fallback_; }

 private:
  static std::uint64_t pack(std::uint32_t key, std::size_t i) {
    return (std::uint64_t{key} << 32) | static_cast<std::uint32_t>(~static_cast<std::uint32_t>(i));
  }
  static std::uint32_t index_of(std::uint64_t packed) { return ~static_cast<std::uint32_t>(packed); }

  template <class SampleKey>
  void bracket(SampleKey& sample_key) {
    const std::size_t s = std::min(n_, sample_size);
    for (std::size_t j = 0; j < s; ++j) sample_[j] = sample_key(j * n_ / s);
    long hi_rank, lo_rank;  // 0-based ranks in descending order within the sample
    if (s == n_) {
      hi_rank = lo_rank = static_cast<long>(k_) - 1;
    } else {
      const double r = static_cast<double>(k_) * static_cast<double>(s) / static_cast<double>(n_) - 1.0;
      const double margin = 4.0 * std::sqrt(r + 1.0) + 8.0;
      hi_rank = static_cast<long>(std::floor(r - margin));
      lo_rank = static_cast<long>(std::ceil(r + margin));
    }
    lo_ = 0;
    hi_ = 0xffffffffu;  // above every key: nothing is definite
    const long last = static_cast<long>(s) - 1;
    if (lo_rank <= last) {
      std::nth_element(sample_, sample_ + lo_rank, sample_ + s, std::greater<>());
      lo_ = sample_[lo_rank];
    } else {
      lo_rank = last + 1;
    }
    if (hi_rank >= 0) {
      std::nth_element(sample_, sample_ + hi_rank, sample_ + lo_rank, std::greater<>());
      hi_ = sample_[hi_rank];
    }
  }

  template <class ScanKey, class Prefetch>
  void scan(ScanKey& scan_key, std::uint32_t* out, Prefetch& ahead) {
    constexpr std::size_t block = 16;
    std::size_t definite = 0, found = 0;
    const std::uint32_t lo = lo_, hi = hi_;
    const auto classify = [&](std::uint32_t key, std::size_t i) {
      if (key > hi) {
        if (definite < k_) out[definite] = static_cast<std::uint32_t>(i);
        ++definite;
      } else if (key >= lo) {
        if (found < cap_) candidates_[found] = pack(key, i);
        ++found;
      }
    };
    // Keys are produced a tile at a time (a plain map the compiler vectorises, fused with the
    // caller's work), then tested 16 at a time; only blocks holding a key >= lo go scalar.
    constexpr std::size_t tile = 512;
    std::uint32_t keys[tile];
    const std::size_t full = n_ - n_ % tile;
    run_best([&]() GRADCOMP_LOOP_BODY {
      for (std::size_t i0 = 0; i0 < full; i0 += tile) {
        ask_ahead(ahead, i0, tile, n_);
        for (std::size_t j = 0; j < tile; ++j) keys[j] = scan_key(i0 + j);
        for (std::size_t b = 0; b < tile; b += block) {
          std::uint32_t max_key = 0;
          for (std::size_t j = 0; j < block; ++j) max_key = std::max(max_key, keys[b + j]);
          if (max_key < lo) continue;  // (so lo <= max_key < 2^31 below)
          for (std::uint32_t hits = detail::keys_at_least(keys + b, lo); hits; hits &= hits - 1) {
            const auto j = b + static_cast<std::size_t>(std::countr_zero(hits));
            classify(keys[j], i0 + j);
          }
        }
      }
    });
    for (std::size_t i = full; i < n_; ++i) classify(scan_key(i), i);
    definite_ = definite;
    candidates_found_ = found;
  }

  // Takes the k - definite largest candidates (found on a copy, so the candidates stay in
  // index order) and merges their indices into the output.
  void finish_from_candidates(std::uint32_t* out) {
    const std::size_t need = k_ - definite_, found = candidates_found_;
    std::uint64_t* order = candidates_ + cap_;
    std::copy(candidates_, candidates_ + found, order);
    std::nth_element(order, order + (need - 1), order + found, std::greater<>());
    const std::uint64_t cut = order[need - 1];
    auto* chosen = reinterpret_cast<std::uint32_t*>(order);
    std::size_t taken = 0;
    for (std::size_t j = 0; j < found; ++j)
      if (candidates_[j] >= cut) chosen[taken++] = index_of(candidates_[j]);
    merge_from_back(out, definite_, chosen, need);
  }

  // out[0, a) and sorted extra[0, b) become the sorted out[0, a + b).
  static void merge_from_back(std::uint32_t* out, std::size_t a, const std::uint32_t* extra, std::size_t b) {
    std::size_t w = a + b;
    while (b > 0) {
      const std::uint32_t from_out = a > 0 ? out[a - 1] : 0;
      if (a > 0 && from_out > extra[b - 1]) {
        out[--w] = from_out;
        --a;
      } else {
        out[--w] = extra[--b];
      }
    }
  }

  // Finds t such that the `need` largest of the counted keys are those > t plus the first
  // take_equal equal to t, scanning `bins` histogram bins from the top.
  void threshold_in(std::size_t bins, std::size_t need, std::uint32_t& t, std::size_t& above, std::size_t& take_equal) const {
    above = 0;
    t = static_cast<std::uint32_t>(bins - 1);
    while (above + hist_[t] < need) above += hist_[t--];
    take_equal = need - above;
  }

  template <class KeyAt>
  void radix_select(KeyAt& key_at, std::uint32_t* out) {
    std::memset(hist_, 0, high_bins * 4);
    for (std::size_t i = 0; i < n_; ++i) ++hist_[key_at(i) >> 15];
    std::uint32_t bin;
    std::size_t above, need_in_bin;
    threshold_in(high_bins, k_, bin, above, need_in_bin);
    std::memset(hist_, 0, low_bins * 4);
    for (std::size_t i = 0; i < n_; ++i) {
      const std::uint32_t key = key_at(i);
      if ((key >> 15) == bin) ++hist_[key & 0x7fffu];
    }
    std::uint32_t low;
    std::size_t above_in_bin, take_equal;
    threshold_in(low_bins, need_in_bin, low, above_in_bin, take_equal);
    const std::uint32_t threshold = (bin << 15) | low;
    std::size_t w = 0;
    for (std::size_t i = 0; i < n_; ++i) {
      const std::uint32_t key = key_at(i);
      if (key > threshold || (key == threshold && take_equal > 0)) {
        take_equal -= (key == threshold);
        out[w++] = static_cast<std::uint32_t>(i);
      }
    }
  }

  std::size_t n_, k_, cap_;
  std::uint64_t* candidates_;
  std::uint32_t* hist_;
  std::uint32_t* sample_;
  std::uint32_t lo_ = 0, hi_ = 0;
  std::size_t definite_ = 0, candidates_found_ = 0;
  bool used_fallback_ = false;
};

// The exact top-k of a chunk (cpu/selector.hpp).
template <>
struct selector_for<selection::exact_topk> {
  template <class C>
  static std::size_t workspace_bytes(const C&, std::size_t count) {
    return topk_selector::workspace_bytes(count);
  }
  template <class In>
  static std::size_t select(const In& in, std::uint32_t* idx) {
    const std::size_t count = in.h.dense_count;
    topk_selector(in.scratch, count, in.h.kept_count).select(in.peek_key(), in.scan_key(), in.key_at(), idx);
    return in.h.kept_count;
  }
};

}  // namespace gradcomp::cpu::detail
