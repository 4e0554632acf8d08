#pragma once
// TAGC's codec (gradcomp/tagc.hpp) as per-thread steps: each functor below is the work of one
// GPU thread (an element, a bitmap word, a shard, a cell, an item), and running the steps in
// the order of tagc/flow.hpp gives the host codec's bytes, residuals and thresholds.
// cuda/tagc.cuh launches them as kernels; tests/tagc/flow_test.cpp runs them as loops.
//
// Functors are trivially copyable values (kernel arguments) with a GRADCOMP_HD call operator:
// `map` steps return nothing; `count` steps return a tally {segment, value} that the executor
// adds to counters[segment] (integer sums: any order gives the same counts). A `guard` read
// once at the start of a step skips all of it (the step's error, a pass nobody needs).
//
// Shard-aligned bitmap: after receive(0) the union is kept per shard, shard i's bits at words
// [i wps, (i + 1) wps) (wps = bitmap_words(shard_size)), bit t of its word w = position
// i shard_size + 32 w + t; the items (the union's positions) are numbered in that order, which
// is ascending element order, and the cells of shard i are [i r B, (i + 1) r B): the W shards'
// sketches are disjoint hypergraphs peeled together.
// This header holds the shared records and phase 0; sketch_steps.hpp holds receive(0),
// phase 1 and the receive of the sketch.

#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/philox.hpp"
#include "../feedback/residual.hpp"
#include "../sketch/bitmap.hpp"
#include "../sketch/steps.hpp"
#include "../sparsify/threshold_search.hpp"
#include "config.hpp"
#include "rules.hpp"

namespace gradcomp::tagc {

// A step's outcome, in the state's device memory; written in stream order, never read by the
// library on the host.
struct step_report {
  std::uint32_t code = 0;          // errc of the step's first failure found on the device; the
                                   // rest of the step then does nothing (encode(0) clears it)
  std::uint32_t rows = 0;          // r of the step's sketch (after receive(0))
  std::uint64_t sketch_cells = 0;  // W r B: the sketch phase's count in the packed layout
  std::uint64_t union_items = 0;   // positions in the union (after receive(0))
  sketch::peel_stats own{};        // encode(1): this rank's own cells decoded
  sketch::peel_stats stats{};      // receive(1)
};

namespace detail {

using counter = unsigned long long;  // atomicAdd's 64-bit type

struct tally {
  std::uint32_t segment;
  std::uint32_t value;
};
inline constexpr std::uint32_t no_segment = 0xffffffffu;

// Skips a whole step: when *stop != 0 (the step's error code) or *go == 0 (a flag set by an
// earlier step: some shard still counts, a peel round made progress).
struct guard {
  const std::uint32_t* stop = nullptr;
  const std::uint32_t* go = nullptr;
  GRADCOMP_HD bool skip() const { return (stop != nullptr && *stop != 0) || (go != nullptr && *go == 0); }
};
inline constexpr std::uint64_t tie_tile = 4096;  // elements per tile of the exact top-k's tie count

// What one shard of the buffer needs (host, once per state).
struct shard_plan {
  std::uint64_t offset = 0;         // first element
  sparsify::detail::chunk_plan select{};          // its element count and the threshold search's sizes
  std::uint64_t sample_offset = 0;  // its first entry in the concatenated sample
  std::uint64_t tile0 = 0;          // its first tie-count tile
};

// What outlives a step (state memory).
struct state_view {
  std::uint64_t* step = nullptr;
  std::uint32_t* key = nullptr;
  step_report* report = nullptr;
  float* residual = nullptr;    // n
  float* thresholds = nullptr;  // W
  shard_plan* plan = nullptr;   // W
  std::uint32_t* table = nullptr;  // the rule::tagc table's keys
};

// A step's scratch (workspace).
struct work_view {
  sparsify::detail::chunk_select* sel = nullptr;  // W
  counter* pass_count = nullptr;    // W
  counter* hist = nullptr;          // W * sparsify::detail::max_bins
  counter* tile_ties = nullptr;     // tie-count tiles
  counter* tally = nullptr;         // 1: peeled items
  counter* first_bad = nullptr;     // 1: 16 w + errc of the first bad sum-safe word
  std::uint32_t* flags = nullptr;   // 2: some shard counting, some shard ranking
  std::uint64_t *sample_in = nullptr, *sample_out = nullptr;  // (shard << 32 | key)
  std::uint32_t *aligned = nullptr, *word_items = nullptr;    // A, A + 1
  counter* lane_items = nullptr;  // W lanes + 1: union positions per lane of each shard, then
                                  // the fullest lane's (block > 1)
  std::uint32_t *elem = nullptr, *peeled_in = nullptr;        // items: shard-local element, round + 1
  std::uint8_t* info = nullptr;                               // items
  float* value = nullptr;                                     // items
  std::uint32_t *keys_in = nullptr, *vals_in = nullptr, *keys_out = nullptr, *vals_out = nullptr;  // 3 items
  std::uint32_t *start = nullptr, *live = nullptr;  // max cells + 1, max cells
  float* cell_residual = nullptr;                   // max cells
  std::uint32_t* progress = nullptr;                // max_rounds
};

// Everything a step's functors read: sizes, settings and the two views.
struct context {
  std::uint64_t n = 0, shard_size = 1, wps = 0, aligned = 0, items = 0, sample = 0, tiles = 0;
  std::uint64_t max_items = 0;  // union positions one shard may hold (tagc::max_items)
  double inv_shard = 1.0;  // 1 / shard_size
  std::uint32_t world = 1, rank = 0, block = 1, lanes = 1, max_rows = 1, max_rounds = 1;
  config cfg{};
  sparsify::detail::search_params search{};
  state_view st{};
  work_view w{};

  // j / shard_size without a 64-bit division (slow on a GPU): a double estimate, corrected.
  GRADCOMP_HD std::uint32_t shard(std::uint64_t j) const {
    auto i = static_cast<std::uint64_t>(static_cast<double>(j) * inv_shard);
    if (i * shard_size > j) {
      --i;
    } else if ((i + 1) * shard_size <= j) {
      ++i;
    }
    return static_cast<std::uint32_t>(i);
  }
  GRADCOMP_HD sparsify::detail::sorted_sample sample_of(std::uint32_t i) const {
    return {w.sample_out + st.plan[i].sample_offset, st.plan[i].select.sample};
  }
  GRADCOMP_HD std::uint64_t cells() const { return std::uint64_t{world} * st.report->rows * block; }
};

GRADCOMP_HD inline void atomic_min(counter* p, counter v) {
#if GRADCOMP_DEVICE_CODE
  atomicMin(p, v);
#else
  if (v < *p) *p = v;
#endif
}

GRADCOMP_HD inline void atomic_max(counter* p, counter v) {
#if GRADCOMP_DEVICE_CODE
  atomicMax(p, v);
#else
  if (v > *p) *p = v;
#endif
}

// The first failure of a step wins (a later check may find another one).
GRADCOMP_HD inline void fail(step_report* r, errc e) {
#if GRADCOMP_DEVICE_CODE
  atomicCAS(&r->code, 0u, static_cast<std::uint32_t>(e));
#else
  if (r->code == 0) r->code = static_cast<std::uint32_t>(e);
#endif
}

struct zero_counters {
  counter* p;
  GRADCOMP_HD void operator()(std::uint64_t i) const { p[i] = 0; }
};

// --- Phase 0: x = g + e, each shard's threshold search, the kept-position words.

struct start_step {  // 1 thread
  context c;
  GRADCOMP_HD void operator()(std::uint64_t) const { *c.st.report = step_report{}; }
};

// Sample entry m: shard i's entries are runs of `run` keys of x = combine(g, e) from positions
// drawn as cpu::detail::threshold_selector draws them (key = state key and step, chunk = i).
struct draw_sample {
  context c;
  const float* grad;
  GRADCOMP_HD void operator()(std::uint64_t m) const {
    std::uint32_t i = 0, hi = c.world;  // the last shard whose entries start at or before m
    while (hi - i > 1) {
      const std::uint32_t mid = i + (hi - i) / 2;
      if (c.st.plan[mid].sample_offset <= m) {
        i = mid;
      } else {
        hi = mid;
      }
    }
    const shard_plan& p = c.st.plan[i];
    const std::uint64_t local = m - p.sample_offset, r = local / p.select.run;
    const std::uint32_t random = philox_at(*c.st.key, *c.st.step, i, random_stream::sparsifier, r);
    const std::uint64_t e = p.offset + sparsify::detail::run_start(random, p.select) + local % p.select.run;
    const float x = feedback::residual::combine({}, grad[e], c.st.residual[e]);
    c.w.sample_in[m] = (std::uint64_t{i} << 32) | abs_key(x);
  }
};

struct begin_select {  // a thread per shard
  context c;
  GRADCOMP_HD void operator()(std::uint64_t i) const {
    const auto s = static_cast<std::uint32_t>(i);
    c.w.sel[i] = sparsify::detail::begin_search(c.search, c.st.plan[i].select, c.sample_of(s), c.st.thresholds[i]);
    c.w.pass_count[i] = 0;
  }
};

// The first pass: x = combine(g, e) stored in the residual, and the keys >= t counted.
struct combine_count {
  context c;
  const float* grad;
  GRADCOMP_HD tally operator()(std::uint64_t j) const {
    const std::uint32_t i = c.shard(j);
    const float x = feedback::residual::combine({}, grad[j], c.st.residual[j]);
    c.st.residual[j] = x;
    const sparsify::detail::chunk_select& s = c.w.sel[i];
    return {i, s.stage == sparsify::detail::counting && abs_key(x) >= s.t ? 1u : 0u};
  }
};

struct count_pass {
  context c;
  GRADCOMP_HD tally operator()(std::uint64_t j) const {
    const std::uint32_t i = c.shard(j);
    const sparsify::detail::chunk_select& s = c.w.sel[i];
    return {i, s.stage == sparsify::detail::counting && abs_key(c.st.residual[j]) >= s.t ? 1u : 0u};
  }
};

struct finish_pass {  // a thread per shard
  context c;
  GRADCOMP_HD void operator()(std::uint64_t i) const {
    const auto s = static_cast<std::uint32_t>(i);
    sparsify::detail::after_pass(c.w.sel[i], c.search, c.st.plan[i].select, c.sample_of(s), c.w.pass_count[i]);
    c.w.pass_count[i] = 0;
  }
};

// 1 thread, after each pass's finish_pass: whether any shard still counts or ranks.
struct settle_stages {
  context c;
  GRADCOMP_HD void operator()(std::uint64_t) const {
    std::uint32_t counting = 0, ranking = 0;
    for (std::uint32_t i = 0; i < c.world; ++i) {
      counting |= c.w.sel[i].stage == sparsify::detail::counting ? 1u : 0u;
      ranking |= c.w.sel[i].stage == sparsify::detail::ranking ? 1u : 0u;
    }
    c.w.flags[0] = counting;
    c.w.flags[1] = ranking;
  }
};

struct radix_hist {
  context c;
  int pass;
  GRADCOMP_HD tally operator()(std::uint64_t j) const {
    const std::uint32_t i = c.shard(j);
    const std::uint32_t bin = sparsify::detail::radix_bin(c.w.sel[i], abs_key(c.st.residual[j]), pass);
    return bin == sparsify::detail::max_bins ? tally{no_segment, 0} : tally{i * sparsify::detail::max_bins + bin, 1};
  }
};

struct radix_pick {  // a thread per shard
  context c;
  int pass;
  GRADCOMP_HD void operator()(std::uint64_t i) const { sparsify::detail::radix_pick(c.w.sel[i], c.w.hist + i * sparsify::detail::max_bins, pass); }
};

struct count_ties {
  context c;
  GRADCOMP_HD tally operator()(std::uint64_t j) const {
    const std::uint32_t i = c.shard(j);
    if (!sparsify::detail::is_tie(c.w.sel[i], abs_key(c.st.residual[j]))) return {no_segment, 0};
    return {static_cast<std::uint32_t>(c.st.plan[i].tile0 + (j - i * c.shard_size) / tie_tile), 1};
  }
};

struct key_of {
  const float* x;
  GRADCOMP_HD std::uint32_t operator()(std::uint64_t i) const { return abs_key(x[i]); }
};

// A thread per shard: the tie cut (exact top-k only), then the next step's threshold.
struct end_select {
  context c;
  GRADCOMP_HD void operator()(std::uint64_t i) const {
    const shard_plan& p = c.st.plan[i];
    sparsify::detail::cut(c.w.sel[i], c.w.tile_ties + p.tile0, tie_tile, key_of{c.st.residual + p.offset});
    c.st.thresholds[i] = c.w.sel[i].threshold;
  }
};

struct kept_at {
  context c;
  GRADCOMP_HD bool operator()(std::uint64_t j) const {
    const std::uint32_t i = c.shard(j);
    return sparsify::detail::keeps(c.w.sel[i], abs_key(c.st.residual[j]), j - i * c.shard_size);
  }
};

// Word w of this rank's bitmap phase: 1-bit, or its sum-safe packing.
struct bitmap_words {
  context c;
  std::uint32_t* out;
  bool sum_safe;
  sketch::sum_safe_layout l;
  GRADCOMP_HD void operator()(std::uint64_t w) const {
    const kept_at keep{c};
    if (!sum_safe) {
      out[w] = sketch::bitmap_word(keep, w, c.n);
      return;
    }
    const std::uint64_t first = w * l.per_word;
    std::uint32_t bits = 0;
    for (std::uint32_t q = 0; q < l.per_word && first + q < c.n; ++q) bits |= (keep(first + q) ? 1u : 0u) << q;
    out[w] = sketch::sum_safe_fields(bits, l);
  }
};

}  // namespace detail
}  // namespace gradcomp::tagc
