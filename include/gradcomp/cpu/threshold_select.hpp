#pragma once
// CPU skeleton for sparsify::threshold: keeps the elements whose 31-bit magnitude key (abs_key)
// is >= a threshold key T estimated from a random sample. With k = target(n), cap = kept(n)
// and lo = ceil(min_ratio k):
//
//   0. previous > 0: a first pass with T = key(previous); accepted (below): done, no sample.
//   1. Sample: s = sample_size(n) keys, runs of L = run_length(n) consecutive elements starting
//      at p_r = (philox_at(seed, step, chunk, sparsifier, r) * (n - L + 1)) >> 32, r < s / L
//      (with replacement); from sample_key before the scan, key_at after it.
//   2. T from the sample:
//        rule::dgc   the r-th largest sample key, r = clamp(ceil(k s / n), 1, s);
//        rule::tagc  key(e_i) for the smallest table entry e_i with #{sample < key(e_i)} / s >=
//                    1 - density (the last entry if none): a gallop from the entry nearest
//                    previous (entry 0 when none), then a binary search. Then, with
//                    est(i) = #{sample >= key(e_i)} n / s: if i > 0, est(i) < lo and
//                    est(i - 1) <= cap, e_(i-1) instead.
//   3. Pass: count the keys >= T, writing the first cap indices (the first pass is the scan,
//      fused with the caller's per-element work). Accepted when lo <= count <= cap. Otherwise,
//      while fewer than max_tries passes ran: r = max(1, #{sample >= T}), r' = clamp(round(r k /
//      count), 1, s) (min(s, 4r) when count = 0), T' = the r'-th largest sample key; if T' = T
//      stop, else repeat the pass with key_at. (So an adjusted rule::tagc T leaves the table.)
//   4. Still outside: exact top-k of the chunk (k values, ties to the lower index) with
//      cpu::topk_selector, so the kept count never exceeds cap.
// A chunk with k = n keeps everything (threshold 0). Output indices are ascending u32. The
// result is a function of the keys, (seed, step, chunk) and previous.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

#include "../core/bits.hpp"
#include "../core/philox.hpp"
#include "../sparsify/threshold.hpp"
#include "dispatch.hpp"
#include "prefetch.hpp"
#include "topk_select.hpp"

namespace gradcomp::cpu {

class threshold_selector {
 public:
  using policy = sparsify::threshold;
  using config = policy::config;

  // The exact fallback's workspace, then the sample keys.
  static std::size_t workspace_bytes(const config& c, std::size_t n) {
    return topk_selector::workspace_bytes(n) + 4 * policy::sample_size(c, n);
  }

  // `workspace` must hold workspace_bytes(c, n) bytes, 8-byte aligned. previous: the |x|
  // threshold this chunk used last step, 0 when none.
  threshold_selector(std::span<std::byte> workspace, const config& c, std::size_t n, std::uint32_t seed,
                     std::uint64_t step, std::uint32_t chunk, float previous)
      : workspace_(workspace), c_(c), n_(n), k_(policy::target(c, n)), cap_(policy::kept(c, n)),
        lo_(static_cast<std::size_t>(std::ceil(c.min_ratio * static_cast<double>(k_)))),
        s_(policy::sample_size(c, n)), seed_(seed), step_(step), chunk_(chunk), previous_(previous),
        sample_(reinterpret_cast<std::uint32_t*>(workspace.data() + topk_selector::workspace_bytes(n))) {}

  // sample_key(i): key of element i without side effects (called for sampled i, any order).
  // scan_key(i):   key of element i; called exactly once per element, in index order, during
  //                the first pass, so the caller may fuse per-element work into it.
  // key_at(i):     key of element i after the scan, without side effects (later passes and
  //                the exact fallback).
  // ahead(i, m):  elements i .. i + m - 1 will be scanned about prefetch_values_ahead
  //                elements later (i + m <= n), a chance to prefetch them.
  // Writes the kept indices ascending to out (which holds policy::kept(c, n) entries) and
  // returns their count.
  template <class SampleKey, class ScanKey, class KeyAt, class Prefetch = no_prefetch>
  std::size_t select(SampleKey&& sample_key, ScanKey&& scan_key, KeyAt&& key_at, std::uint32_t* out,
                     Prefetch&& ahead = {}) {
    passes_ = 0;
    used_fallback_ = false;
    threshold_ = 0.0f;
    if (k_ >= n_) {  // keep all (k = 0 only when n = 0: density > 0)
      for (std::size_t i = 0; i < n_; ++i) (void)scan_key(i);
      for (std::size_t i = 0; i < n_; ++i) out[i] = static_cast<std::uint32_t>(i);
      passes_ = n_ > 0;
      return n_;
    }
    std::uint32_t t = 0;
    std::size_t count = 0;
    no_prefetch no_ahead;  // (the later passes are rare, and read other arrays than the scan)
    if (previous_ > 0.0f && std::isfinite(previous_)) {
      t = abs_key(previous_);
      count = pass(scan_key, t, out, ahead);
      if (accepted(count)) {
        threshold_ = bits_float(t);
        return count;
      }
      draw_sample(key_at);
      t = start();
      count = pass(key_at, t, out, no_ahead);
    } else {
      draw_sample(sample_key);
      t = start();
      count = pass(scan_key, t, out, ahead);
    }
    while (!accepted(count) && passes_ < c_.max_tries) {
      const std::uint32_t next = adjust(t, count);
      if (next == t) break;
      t = next;
      count = pass(key_at, t, out, no_ahead);
    }
    if (accepted(count)) {
      threshold_ = bits_float(t);
      return count;
    }
    return exact(key_at, out);
  }

  // The |x| threshold finally used (kept: |x| >= it); after the exact fallback, the smallest
  // kept |x|. The next step's `previous`.
  float threshold() const { return threshold_; }
  // Full passes over the chunk in the last select(), the fallback's included.
  unsigned passes() const { return passes_; }
  bool used_fallback() const { return used_fallback_; }

 private:
  bool accepted(std::size_t count) const { return lo_ <= count && count <= cap_; }

  // Run starts first (one Philox call gives four: the same numbers as philox_at(.., r)), then
  // the keys: a loop of independent loads keeps many cache misses in flight.
  template <class SampleKey>
  void draw_sample(SampleKey& sample_key) {
    const std::size_t run = policy::run_length(n_), runs = s_ / run;
    const std::uint64_t starts = n_ - run + 1;
    for (std::size_t r0 = 0; r0 < runs; r0 += 4) {
      const std::uint64_t q = r0 / 4;
      const philox_u32x4 r = philox4x32_10({{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), chunk_,
                                             static_cast<std::uint32_t>(random_stream::sparsifier)}},
                                           seed_, static_cast<std::uint32_t>(step_));
      for (std::size_t m = 0; m < 4 && r0 + m < runs; ++m)
        sample_[r0 + m] = static_cast<std::uint32_t>((std::uint64_t{r.v[m]} * starts) >> 32);
    }
    for (std::size_t r = runs; r-- > 0;) {  // backwards: run r's keys overwrite only starts >= r
      const std::size_t p = sample_[r];
      for (std::size_t j = 0; j < run; ++j) sample_[r * run + j] = sample_key(p + j);
    }
  }

  std::uint32_t start() { return c_.estimate == policy::rule::tagc ? tagc_start() : dgc_start(); }

  std::size_t count_at_least(std::uint32_t t) const {
    std::size_t count = 0;
    for (std::size_t j = 0; j < s_; ++j) count += sample_[j] >= t;
    return count;
  }
  // The r-th largest sample key, 1 <= r <= s: a radix select on 11, 11 and 10 bits, three
  // counting passes over the sample (in cache), exact as nth_element and several times
  // faster on the 10^5 keys of a 1% sample of 10^7.
  std::uint32_t kth_largest(std::size_t r) const {
    std::uint32_t prefix = 0, mask = 0;  // bits of the answer found so far
    std::size_t rank = r;                // its rank among the keys sharing them
    for (const unsigned shift : {21u, 10u, 0u}) {
      const std::uint32_t bins = shift == 0 ? 1024u : 2048u;
      std::uint32_t counts[2048] = {};
      for (std::size_t j = 0; j < s_; ++j)
        counts[(sample_[j] >> shift) & (bins - 1)] += (sample_[j] & mask) == prefix;
      std::uint32_t b = bins - 1;
      for (; rank > counts[b]; --b) rank -= counts[b];
      prefix |= b << shift;
      mask |= (bins - 1) << shift;
    }
    return prefix;
  }
  std::size_t clamp_rank(double r) const {
    return r <= 1.0 ? 1 : r >= static_cast<double>(s_) ? s_ : static_cast<std::size_t>(r);
  }

  std::uint32_t dgc_start() {
    return kth_largest(clamp_rank(std::ceil(static_cast<double>(k_) * static_cast<double>(s_) / static_cast<double>(n_))));
  }

  std::uint32_t tagc_start() {
    const std::size_t size = policy::table_size(c_);
    const double below = 1.0 - c_.density, s = static_cast<double>(s_);
    // need: the fewest sample keys under an entry with #under / s >= 1 - density. Then entry
    // i qualifies iff the need-th smallest sample key q is < key(e_i).
    std::size_t need = static_cast<std::size_t>(std::clamp(std::ceil(below * s), 0.0, s));
    while (need > 0 && static_cast<double>(need - 1) / s >= below) --need;
    while (need < s_ && !(static_cast<double>(need) / s >= below)) ++need;
    const std::uint32_t q = need == 0 ? 0 : kth_largest(s_ - need + 1);
    const auto qualifies = [&](std::size_t i) { return need == 0 || q < abs_key(policy::table_entry(c_, i)); };
    std::size_t start = 0;
    if (previous_ > 0.0f) {
      const double e = std::round(std::log10(static_cast<double>(previous_) / c_.table_min) * c_.steps_per_decade);
      start = e <= 0.0 ? 0 : e >= static_cast<double>(size - 1) ? size - 1 : static_cast<std::size_t>(e);
    }
    // Gallop to bracket the first qualifying entry in [lo, hi] (hi = size: none yet), then bisect.
    std::size_t lo = 0, hi = size;
    if (qualifies(start)) {
      hi = start;
      for (std::size_t step = 1; hi > 0; step *= 2) {
        const std::size_t i = hi > step ? hi - step : 0;
        if (!qualifies(i)) {
          lo = i + 1;
          break;
        }
        hi = i;
      }
    } else {
      lo = start + 1;
      for (std::size_t step = 1; lo < size; step *= 2) {
        const std::size_t i = std::min(size - 1, start + step);
        if (qualifies(i)) {
          hi = i;
          break;
        }
        lo = i + 1;
      }
    }
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (qualifies(mid)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    // The first qualifying entry keeps at most k values by the sample, often fewer than
    // min_ratio k: a table step changes the count 1.3-2x. When the sample puts the entry
    // below the accepted range and the entry before it within, that one is taken: one pass
    // instead of a pass and an adjusted one.
    std::size_t entry = std::min(lo, size - 1);
    if (entry > 0) {
      const auto estimate = [&](std::size_t i) {
        return static_cast<double>(count_at_least(abs_key(policy::table_entry(c_, i)))) * static_cast<double>(n_) / s;
      };
      if (estimate(entry) < static_cast<double>(lo_) && estimate(entry - 1) <= static_cast<double>(cap_)) --entry;
    }
    return abs_key(policy::table_entry(c_, entry));
  }

  std::uint32_t adjust(std::uint32_t t, std::size_t count) {
    const std::size_t r = std::max<std::size_t>(1, count_at_least(t));
    const std::size_t next = count == 0 ? std::min(s_, 4 * r)
                                        : clamp_rank(std::round(static_cast<double>(r) * static_cast<double>(k_) /
                                                                static_cast<double>(count)));
    return kth_largest(next);
  }

  // Counts the keys >= t, writing the first cap indices. Keys are produced a tile at a time (a
  // plain map the compiler vectorises, fused with the caller's work), then tested 16 at a
  // time; only blocks holding a key >= t go scalar.
  template <class Key, class Prefetch>
  std::size_t pass(Key& key, std::uint32_t t, std::uint32_t* out, Prefetch& ahead) {
    ++passes_;
    constexpr std::size_t tile = 512, block = 16;
    std::size_t count = 0;
    std::uint32_t keys[tile];
    const std::size_t full = n_ - n_ % tile;
    run_best([&]() GRADCOMP_LOOP_BODY {
      // Locals: the index stores cannot alias them. A block holding a key >= t is compacted
      // without branches (each index is stored, the count advances only for hits; past the
      // capacity the stores go to a scratch word), so scattered hits cost no mispredictions.
      const std::uint32_t at_least = t;
      const std::size_t cap = cap_;
      std::size_t kept = 0;
      std::uint32_t scratch = 0;
      for (std::size_t i0 = 0; i0 < full; i0 += tile) {
        ask_ahead(ahead, i0, tile, n_);
        for (std::size_t j = 0; j < tile; ++j) keys[j] = key(i0 + j);
        for (std::size_t b = 0; b < tile; b += block) {
          std::uint32_t max_key = 0;
          for (std::size_t j = 0; j < block; ++j) max_key = std::max(max_key, keys[b + j]);
          if (max_key < at_least) continue;
          for (std::size_t j = 0; j < block; ++j) {
            *(kept < cap ? out + kept : &scratch) = static_cast<std::uint32_t>(i0 + b + j);
            kept += keys[b + j] >= at_least;
          }
        }
      }
      for (std::size_t i = full; i < n_; ++i) {
        *(kept < cap ? out + kept : &scratch) = static_cast<std::uint32_t>(i);
        kept += key(i) >= at_least;
      }
      count = kept;
    });
    return count;
  }

  // Exact top-k with topk_selector (a scan, plus three passes when its radix select runs).
  template <class KeyAt>
  std::size_t exact(KeyAt& key_at, std::uint32_t* out) {
    used_fallback_ = true;
    topk_selector top(workspace_.first(topk_selector::workspace_bytes(n_)), n_, k_);
    top.select(key_at, key_at, key_at, out);
    passes_ += top.used_fallback() ? 4 : 1;
    std::uint32_t smallest = 0xffffffffu;
    for (std::size_t m = 0; m < k_; ++m) smallest = std::min(smallest, key_at(out[m]));
    threshold_ = bits_float(smallest);
    return k_;
  }

  std::span<std::byte> workspace_;
  config c_;
  std::size_t n_, k_, cap_, lo_, s_;
  std::uint32_t seed_;
  std::uint64_t step_;
  std::uint32_t chunk_;
  float previous_;
  std::uint32_t* sample_;  // the sample keys (first their positions)
  float threshold_ = 0.0f;
  unsigned passes_ = 0;
  bool used_fallback_ = false;
};

}  // namespace gradcomp::cpu
