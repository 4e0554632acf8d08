#pragma once
// The threshold sparsifier's search (sparsify/threshold.hpp), written once: every decision it
// makes (where the sample's runs start, the start threshold, when a count is accepted, how the
// threshold is adjusted, when it gives up for the exact top-k, what the next step starts from)
// is a GRADCOMP_HD function of this header. Two executors run it:
//   - the CPU (cpu/threshold_select.hpp): one chunk at a time, passes fused with the caller's
//     per-element work, the sample unsorted (a radix select finds its r-th largest key);
//   - data-parallel steps (tagc/bitmap_steps.hpp: one GPU thread per element, per chunk): many
//     chunks at once without asking the host, the sample sorted (an index and a binary search).
// Both give the same kept set and the same next-step threshold for the same keys, (seed,
// step, chunk) and previous threshold.
//
// Per chunk, a `chunk_select` record moves through these stages:
//   begin_search  previous > 0 and finite: count with it first; else the start threshold from
//                 the sample (rule::dgc or rule::tagc).
//   counting      a pass counts the chunk's keys >= t; after_pass() accepts (lo <= count <=
//                 cap), or takes the start threshold (after a first pass with the previous one),
//                 or adjusts t from the sample, or gives up on thresholds: then
//   ranking       the exact top-k of the chunk (k keys, ties to the lower index). The parallel
//                 form finds the k-th largest key T with three histogram passes (digits of 11,
//                 11 and 10 bits) and `need`, the number of keys == T kept; then
//   cutting       counts of keys == T per tile find the index of the need-th one, so the kept
//                 set is key > T, or key == T before `cut`.
//   done          kept: key > t, or key == t at a chunk index < cut (cut = count keeps every
//                 key >= t); `threshold` is the next step's previous.
// The rule::tagc table's keys are computed on the host (table_keys) and read from memory.

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/philox.hpp"
#include "threshold.hpp"

namespace gradcomp::sparsify::detail {

// What a chunk of `count` keys needs, from the config (host, once).
struct chunk_plan {
  std::uint64_t count = 0;   // elements
  std::uint64_t k = 0;       // target(count)
  std::uint64_t cap = 0;     // kept(count): accepted counts are at most this
  std::uint64_t lo = 0;      // ceil(min_ratio k): accepted counts are at least this
  std::uint64_t sample = 0;  // sample_size(count)
  std::uint64_t run = 0;     // run_length(count)
};

inline chunk_plan plan_chunk(const threshold::config& c, std::size_t count) {
  chunk_plan p;
  p.count = count;
  p.k = threshold::target(c, count);
  p.cap = threshold::kept(c, count);
  p.lo = static_cast<std::uint64_t>(std::ceil(c.min_ratio * static_cast<double>(p.k)));
  p.sample = threshold::sample_size(c, count);
  p.run = threshold::run_length(count);
  return p;
}

GRADCOMP_HD inline bool accepted(const chunk_plan& c, std::uint64_t count) { return c.lo <= count && count <= c.cap; }

// Run r of the sample starts at this chunk index; `random` = philox_at(seed, step, chunk,
// random_stream::sparsifier, r). The run's keys are those of indices start .. start + run - 1.
GRADCOMP_HD inline std::uint64_t run_start(std::uint32_t random, const chunk_plan& c) {
  return (std::uint64_t{random} * (c.count - c.run + 1)) >> 32;
}

// The rule::tagc table's keys, abs_key(table_entry(c, i)), non-decreasing: computed on the host
// (a GPU's pow() may differ from the host's), uploaded once for a GPU.
struct table_view {
  const std::uint32_t* keys = nullptr;
  std::uint32_t size = 0;
};

inline void table_keys(const threshold::config& c, std::uint32_t* out) {
  const std::size_t size = threshold::table_size(c);
  for (std::size_t i = 0; i < size; ++i) out[i] = abs_key(threshold::table_entry(c, i));
}

// The search's settings as plain values.
struct search_params {
  threshold::rule rule = threshold::rule::dgc;
  double density = 0.01;
  std::uint32_t max_tries = 3;
  table_view table{};
};

// Passes over the keys that the stages can need: with a previous threshold, it and the start
// threshold each take one before max_tries counts.
constexpr std::uint32_t max_count_passes(const threshold::config& c) { return c.max_tries > 2 ? c.max_tries : 2; }

enum stage : std::uint32_t { done = 0, counting = 1, ranking = 2, cutting = 3 };

struct chunk_select {
  std::uint32_t stage = done;
  std::uint32_t t = 0;               // the threshold key (counting, done) or the k-th key (cutting)
  std::uint32_t passes = 0;          // threshold passes run
  std::uint32_t with_previous = 0;   // the pass running uses the previous threshold
  std::uint64_t cut = 0;             // done: keys == t are kept below this chunk index
  std::uint64_t need = 0;            // ranking: rank of the k-th key among the prefix's; cutting: keys == t kept
  std::uint32_t prefix = 0, mask = 0;  // ranking: the digits found so far
  float threshold = 0.0f;            // the next step's previous
  std::uint32_t exact = 0;           // the exact top-k was needed
};

// Whether element i (chunk index) with this key is kept (stage done).
GRADCOMP_HD inline bool keeps(const chunk_select& s, std::uint32_t key, std::uint64_t i) {
  return key > s.t || (key == s.t && i < s.cut);
}

// Whether the previous step's threshold is tried first.
GRADCOMP_HD inline bool usable_previous(float previous) { return previous > 0.0f && is_finite_bits(float_bits(previous)); }

// A sorted sample of one chunk: ascending 64-bit keys whose low 32 bits are the keys. A
// Sample offers size, kth_largest(r) for 1 <= r <= size, and count_at_least(t).
struct sorted_sample {
  const std::uint64_t* keys = nullptr;
  std::uint64_t size = 0;
  GRADCOMP_HD std::uint32_t at(std::uint64_t i) const { return static_cast<std::uint32_t>(keys[i]); }
  GRADCOMP_HD std::uint32_t kth_largest(std::uint64_t r) const { return at(size - r); }
  GRADCOMP_HD std::uint64_t count_at_least(std::uint32_t t) const {
    std::uint64_t lo = 0, hi = size;  // first index whose key is >= t
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (at(mid) < t) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return size - lo;
  }
};

GRADCOMP_HD inline std::uint64_t clamp_rank(double r, std::uint64_t s) {
  return r <= 1.0 ? 1 : r >= static_cast<double>(s) ? s : static_cast<std::uint64_t>(r);
}

// rule::dgc: the sample's top-k key, r = clamp(ceil(k s / n), 1, s).
template <class Sample>
GRADCOMP_HD inline std::uint32_t dgc_start(const chunk_plan& c, const Sample& v) {
  const auto s = static_cast<std::uint64_t>(v.size);
  return v.kth_largest(clamp_rank(std::ceil(static_cast<double>(c.k) * static_cast<double>(s) / static_cast<double>(c.count)), s));
}

// rule::tagc: key(e_i) for the smallest table entry e_i with #{sample < key(e_i)} / s >= 1 -
// density (the last entry if none): with `need` the fewest sample keys under such an entry,
// e_i qualifies iff the need-th smallest sample key q is < key(e_i), a lower bound in the
// non-decreasing table. Then, with est(i) = #{sample >= key(e_i)} n / s: if i > 0, est(i) < lo
// and est(i - 1) <= cap, e_(i-1) instead (a table step changes the count 1.3-2x; one pass
// instead of a pass and an adjusted one).
template <class Sample>
GRADCOMP_HD inline std::uint32_t tagc_start(const search_params& p, const chunk_plan& c, const Sample& v) {
  const auto size = static_cast<std::uint64_t>(v.size);
  const double below = 1.0 - p.density, s = static_cast<double>(size);
  const double want = std::ceil(below * s);
  std::uint64_t need = want <= 0.0 ? 0 : want >= s ? size : static_cast<std::uint64_t>(want);
  while (need > 0 && static_cast<double>(need - 1) / s >= below) --need;
  while (need < size && !(static_cast<double>(need) / s >= below)) ++need;
  const std::uint32_t q = need == 0 ? 0 : v.kth_largest(size - need + 1);
  std::uint32_t lo = 0, hi = p.table.size;  // the first entry whose key exceeds q
  if (need != 0) {
    while (lo < hi) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (q < p.table.keys[mid]) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
  }
  std::uint32_t entry = lo < p.table.size ? lo : p.table.size - 1;
  if (entry > 0) {
    const double est = static_cast<double>(v.count_at_least(p.table.keys[entry])) * static_cast<double>(c.count) / s;
    const double before = static_cast<double>(v.count_at_least(p.table.keys[entry - 1])) * static_cast<double>(c.count) / s;
    if (est < static_cast<double>(c.lo) && before <= static_cast<double>(c.cap)) --entry;
  }
  return p.table.keys[entry];
}

template <class Sample>
GRADCOMP_HD inline std::uint32_t start_key(const search_params& p, const chunk_plan& c, const Sample& v) {
  return p.rule == threshold::rule::tagc ? tagc_start(p, c, v) : dgc_start(c, v);
}

// After a pass found `count` keys >= t: r = max(1, #{sample >= t}), r' = clamp(round(r k /
// count), 1, s) (min(s, 4r) when count = 0), the r'-th largest sample key.
template <class Sample>
GRADCOMP_HD inline std::uint32_t adjust_key(const chunk_plan& c, const Sample& v, std::uint32_t t, std::uint64_t count) {
  const auto s = static_cast<std::uint64_t>(v.size);
  std::uint64_t r = v.count_at_least(t);
  r = r < 1 ? 1 : r;
  const std::uint64_t next = count == 0 ? (4 * r < s ? 4 * r : s)
                                        : clamp_rank(std::round(static_cast<double>(r) * static_cast<double>(c.k) / static_cast<double>(count)), s);
  return v.kth_largest(next);
}

GRADCOMP_HD inline void to_ranking(chunk_select& s, const chunk_plan& c) {
  s.stage = ranking;
  s.exact = 1;
  s.need = c.k;
  s.prefix = 0;
  s.mask = 0;
}

// The record a chunk starts a step with. Empty chunks are done and keep their threshold; a
// chunk with k = count keeps everything (threshold 0). The sample is read only when previous is
// not usable_previous().
template <class Sample>
GRADCOMP_HD inline chunk_select begin_search(const search_params& p, const chunk_plan& c, const Sample& v, float previous) {
  chunk_select s;
  s.threshold = previous;
  if (c.count == 0) return s;
  if (c.k >= c.count) {
    s.cut = c.count;
    s.threshold = 0.0f;
    return s;
  }
  s.stage = counting;
  if (usable_previous(previous)) {
    s.t = abs_key(previous);
    s.with_previous = 1;
  } else {
    s.t = start_key(p, c, v);
  }
  return s;
}

// After a counting pass found `count` keys >= t. The sample is read unless the count is
// accepted.
template <class Sample>
GRADCOMP_HD inline void after_pass(chunk_select& s, const search_params& p, const chunk_plan& c, const Sample& v,
                            std::uint64_t count) {
  if (s.stage != counting) return;
  ++s.passes;
  if (accepted(c, count)) {
    s.stage = done;
    s.cut = c.count;
    s.threshold = bits_float(s.t);
  } else if (s.with_previous != 0) {
    s.with_previous = 0;
    s.t = start_key(p, c, v);
  } else if (s.passes < p.max_tries) {
    const std::uint32_t next = adjust_key(c, v, s.t, count);
    if (next == s.t) {
      to_ranking(s, c);
    } else {
      s.t = next;
    }
  } else {
    to_ranking(s, c);
  }
}

// --- Exact top-k in the parallel form (ranking): digits of keys at bits 31..21, 20..10, 9..0.
GRADCOMP_HD constexpr std::uint32_t radix_shift(int pass) { return pass == 0 ? 21u : pass == 1 ? 10u : 0u; }
GRADCOMP_HD constexpr std::uint32_t radix_bins(int pass) { return pass == 2 ? 1024u : 2048u; }
inline constexpr std::uint32_t max_bins = 2048;

// The bin a key adds to in this pass, or max_bins when it does not count.
GRADCOMP_HD inline std::uint32_t radix_bin(const chunk_select& s, std::uint32_t key, int pass) {
  if (s.stage != ranking || (key & s.mask) != s.prefix) return max_bins;
  return (key >> radix_shift(pass)) & (radix_bins(pass) - 1);
}

// After the pass's histogram: the digit holding the need-th largest key; after pass 2 the k-th
// largest key T and the number of keys == T to keep.
template <class Count>
GRADCOMP_HD inline void radix_pick(chunk_select& s, const Count* hist, int pass) {
  if (s.stage != ranking) return;
  std::uint32_t b = radix_bins(pass) - 1;
  while (b > 0 && s.need > hist[b]) s.need -= hist[b--];
  s.prefix |= b << radix_shift(pass);
  s.mask |= (radix_bins(pass) - 1) << radix_shift(pass);
  if (pass == 2) {
    s.stage = cutting;
    s.t = s.prefix;
  }
}

// Cutting: whether a key is one of the ties counted per tile.
GRADCOMP_HD inline bool is_tie(const chunk_select& s, std::uint32_t key) { return s.stage == cutting && key == s.t; }

// Cutting, after the ties were counted per tile (tile_ties[j] for the chunk's tiles of
// `tile` elements): finds the index of the need-th tie and finishes the chunk. key(i) is the
// key of chunk index i.
template <class Count, class Key>
GRADCOMP_HD inline void cut(chunk_select& s, const Count* tile_ties, std::uint64_t tile, const Key& key) {
  if (s.stage != cutting) return;
  std::uint64_t left = s.need, j = 0;
  while (left > tile_ties[j]) left -= tile_ties[j++];
  std::uint64_t i = j * tile;
  for (;; ++i)
    if (key(i) == s.t && --left == 0) break;
  s.stage = done;
  s.cut = i + 1;
  s.threshold = bits_float(s.t);
}

}  // namespace gradcomp::sparsify::detail
