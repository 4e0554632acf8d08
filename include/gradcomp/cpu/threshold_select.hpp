#pragma once
// CPU executor of the threshold sparsifier's search (sparsify/threshold_search.hpp, whose
// functions make every decision): one chunk at a time, on the calling thread.
//   - The sample: s = sample_size(n) keys, runs of L = run_length(n) consecutive elements from
//     run_start() (one Philox call gives the random numbers of four runs), from sample_key
//     before the scan, key_at after it; kept unsorted, a radix select finds its r-th largest.
//   - A pass counts the keys >= T, writing the first cap indices; the first pass is the scan,
//     fused with the caller's per-element work.
//   - ranking: the exact top-k of the chunk (k values, ties to the lower index) with
//     cpu::detail::topk_selector, so the kept count never exceeds cap.
// Output indices are ascending u32. The result is a function of the keys, (seed, step, chunk)
// and previous: the same as the parallel form's.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

#include "../core/bits.hpp"
#include "../core/philox.hpp"
#include "../sparsify/threshold_search.hpp"
#include "dispatch.hpp"
#include "prefetch.hpp"
#include "selector.hpp"
#include "topk_select.hpp"

namespace gradcomp::cpu::detail {

class threshold_selector {
 public:
  using policy = sparsify::threshold;
  using config = policy::config;

  // The exact fallback's workspace, then the sample keys, then the rule::tagc table's keys.
  static std::size_t workspace_bytes(const config& c, std::size_t n) {
    return topk_selector::workspace_bytes(n) + 4 * policy::sample_size(c, n) + 4 * table_entries(c);
  }

  // `workspace` must hold workspace_bytes(c, n) bytes, 8-byte aligned. previous: the |x|
  // threshold this chunk used last step, 0 when none.
  threshold_selector(std::span<std::byte> workspace, const config& c, std::size_t n, std::uint32_t seed,
                     std::uint64_t step, std::uint32_t chunk, float previous)
      : workspace_(workspace), c_(c), plan_(sparsify::detail::plan_chunk(c, n)), n_(n), s_(plan_.sample), seed_(seed),
        step_(step), chunk_(chunk), previous_(previous),
        sample_(reinterpret_cast<std::uint32_t*>(workspace.data() + topk_selector::workspace_bytes(n))),
        table_keys_(sample_ + s_) {}

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
    namespace ts = sparsify::detail;
    passes_ = 0;
    used_fallback_ = false;
    const ts::search_params p{c_.estimate, c_.density, c_.max_tries, {table_keys_, static_cast<std::uint32_t>(table_entries(c_))}};
    const unsorted_sample v{sample_, s_};
    if (plan_.k < plan_.count && !ts::usable_previous(previous_)) draw_sample(sample_key);  // begin_search reads it
    ts::chunk_select s = ts::begin_search(p, plan_, v, previous_);
    if (s.stage == ts::done) {  // keep all (k = 0 only when n = 0: density > 0)
      for (std::size_t i = 0; i < n_; ++i) (void)scan_key(i);
      for (std::size_t i = 0; i < n_; ++i) out[i] = static_cast<std::uint32_t>(i);
      passes_ = n_ > 0;
      threshold_ = s.threshold;
      return n_;
    }
    no_prefetch no_ahead;  // (the later passes are rare, and read other arrays than the scan)
    std::size_t count = pass(scan_key, s.t, out, ahead);
    for (;;) {
      if (s.with_previous != 0 && !ts::accepted(plan_, count)) draw_sample(key_at);  // after_pass reads it
      ts::after_pass(s, p, plan_, v, count);
      if (s.stage != ts::counting) break;
      count = pass(key_at, s.t, out, no_ahead);
    }
    if (s.stage == ts::ranking) return exact(key_at, out);
    threshold_ = s.threshold;
    return count;
  }

  // The |x| threshold finally used (kept: |x| >= it); after the exact fallback, the smallest
  // kept |x|. The next step's `previous`.
  float threshold() const { return threshold_; }
  // Full passes over the chunk in the last select(), the fallback's included.
  unsigned passes() const { return passes_; }
  bool used_fallback() const { return used_fallback_; }

 private:
  // The sample's keys, unsorted: the r-th largest by a radix select on 11, 11 and 10 bits,
  // three counting passes over the sample (in cache), exact as nth_element and several times
  // faster on the 10^5 keys of a 1% sample of 10^7.
  struct unsorted_sample {
    const std::uint32_t* keys;
    std::size_t size;
    GRADCOMP_HD std::size_t count_at_least(std::uint32_t t) const {
      std::size_t count = 0;
      for (std::size_t j = 0; j < size; ++j) count += keys[j] >= t;
      return count;
    }
    GRADCOMP_HD std::uint32_t kth_largest(std::size_t r) const {
      std::uint32_t prefix = 0, mask = 0;  // bits of the answer found so far
      std::size_t rank = r;                // its rank among the keys sharing them
      for (const unsigned shift : {21u, 10u, 0u}) {
        const std::uint32_t bins = shift == 0 ? 1024u : 2048u;
        std::uint32_t counts[2048] = {};
        for (std::size_t j = 0; j < size; ++j) counts[(keys[j] >> shift) & (bins - 1)] += (keys[j] & mask) == prefix;
        std::uint32_t b = bins - 1;
        for (; rank > counts[b]; --b) rank -= counts[b];
        prefix |= b << shift;
        mask |= (bins - 1) << shift;
      }
      return prefix;
    }
  };

  static std::size_t table_entries(const config& c) { return c.estimate == policy::rule::tagc ? policy::table_size(c) : 0; }

  // Run starts first (one Philox call gives four: the same numbers as philox_at(.., r)), then
  // the keys: a loop of independent loads keeps many cache misses in flight. The table's keys
  // are needed whenever the sample is (the start threshold).
  template <class SampleKey>
  void draw_sample(SampleKey& sample_key) {
    if (c_.estimate == policy::rule::tagc) sparsify::detail::table_keys(c_, table_keys_);
    const std::size_t run = plan_.run, runs = s_ / run;
    for (std::size_t r0 = 0; r0 < runs; r0 += 4) {
      const std::uint64_t q = r0 / 4;
      const philox_u32x4 r = philox4x32_10({{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), chunk_,
                                             static_cast<std::uint32_t>(random_stream::sparsifier)}},
                                           seed_, static_cast<std::uint32_t>(step_));
      for (std::size_t m = 0; m < 4 && r0 + m < runs; ++m)
        sample_[r0 + m] = static_cast<std::uint32_t>(sparsify::detail::run_start(r.v[m], plan_));
    }
    for (std::size_t r = runs; r-- > 0;) {  // backwards: run r's keys overwrite only starts >= r
      const std::size_t p = sample_[r];
      for (std::size_t j = 0; j < run; ++j) sample_[r * run + j] = sample_key(p + j);
    }
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
      const std::size_t cap = plan_.cap;
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
    const std::size_t k = plan_.k;
    topk_selector top(workspace_.first(topk_selector::workspace_bytes(n_)), n_, k);
    top.select(key_at, key_at, key_at, out);
    passes_ += top.used_fallback() ? 4 : 1;
    std::uint32_t smallest = 0xffffffffu;
    for (std::size_t m = 0; m < k; ++m) smallest = std::min(smallest, key_at(out[m]));
    threshold_ = bits_float(smallest);
    return k;
  }

  std::span<std::byte> workspace_;
  config c_;
  sparsify::detail::chunk_plan plan_;
  std::size_t n_, s_;
  std::uint32_t seed_;
  std::uint64_t step_;
  std::uint32_t chunk_;
  float previous_;
  std::uint32_t* sample_;      // the sample keys (first their positions)
  std::uint32_t* table_keys_;  // the rule::tagc table's keys, written with the sample
  float threshold_ = 0.0f;
  unsigned passes_ = 0;
  bool used_fallback_ = false;
};

// The threshold selection of a chunk, started from the chunk's last threshold (cpu/selector.hpp).
template <>
struct selector_for<selection::threshold> {
  template <class C>
  static std::size_t workspace_bytes(const C& comp, std::size_t count) {
    return threshold_selector::workspace_bytes(comp.get_config().sparsify, count);
  }
  template <class In>
  static std::size_t select(const In& in, std::uint32_t* idx) {
    const std::size_t count = in.h.dense_count;
    const auto& cfg = in.comp.get_config();
    float& last = in.st.thresholds[in.h.chunk_id];
    threshold_selector s(in.scratch, cfg.sparsify, count, cfg.seed, in.h.step, in.h.chunk_id, last);
    const std::size_t kept = s.select(in.peek_key(), in.scan_key(), in.key_at(), idx);
    last = s.threshold();
    return kept;
  }
};

}  // namespace gradcomp::cpu::detail
