#pragma once
// The threshold sparsifier's search (cpu/threshold_select.hpp) as steps a GPU runs for many
// chunks at once without asking the host: the same kept set and the same next-step threshold
// as cpu::threshold_selector, for the same keys, (seed, step, chunk) and previous threshold.
//
// Per chunk, a `chunk_select` record moves through these stages, each advanced by one thread
// per chunk between data-parallel passes over the keys:
//   begin       (after the sample is drawn and sorted) previous > 0 and finite: count with it
//               first; else the start threshold from the sample (rule::dgc or rule::tagc).
//   counting    a pass counts the chunk's keys >= t; after_pass() accepts (lo <= count <= cap),
//               or takes the start threshold (after a first pass with the previous one), or
//               adjusts t from the sample, or gives up on thresholds: then
//   ranking     exact top-k: three histogram passes (digits of 11, 11 and 10 bits) find the
//               k-th largest key T and `need`, the number of keys == T that are kept; then
//   cutting     counts of keys == T per tile find the index of the need-th one (ties go to
//               the lower index), so the kept set is key > T, or key == T before `cut`.
//   done        kept: key > t, or key == t at a chunk index < cut (cut = count keeps every
//               key >= t); `threshold` is the next step's previous.
// The sample is sorted ascending (a device radix sort of (chunk << 32 | key)), so its r-th
// largest key and its count of keys >= t are an index and a binary search. The rule::tagc
// table is the host's (table_entry() through abs_key), computed once: its first entry above
// the sample quantile is a lower bound, which is what the CPU's gallop-and-bisect finds in a
// non-decreasing table (the host checks that it is).

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "threshold.hpp"

namespace gradcomp::sparsify::threshold_parallel {

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

// The search's settings as plain values (the table lives in device memory).
struct search_params {
  threshold::rule rule = threshold::rule::dgc;
  double density = 0.01;
  std::uint32_t max_tries = 3;
  std::uint32_t table_size = 0;
  const std::uint32_t* table = nullptr;  // abs_key(table_entry(c, i)), non-decreasing
};

// abs_key(table_entry(c, i)) for every i; false when the table is not non-decreasing (then the
// lower bound above differs from the CPU's search: not seen for any valid config).
inline bool table_keys(const threshold::config& c, std::uint32_t* out) {
  const std::size_t size = threshold::table_size(c);
  for (std::size_t i = 0; i < size; ++i) {
    out[i] = abs_key(threshold::table_entry(c, i));
    if (i > 0 && out[i] < out[i - 1]) return false;
  }
  return true;
}

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

// The sorted sample of one chunk: ascending 64-bit keys whose low 32 bits are the keys.
struct sample_view {
  const std::uint64_t* keys = nullptr;
  std::uint64_t size = 0;
  GRADCOMP_HD std::uint32_t at(std::uint64_t i) const { return static_cast<std::uint32_t>(keys[i]); }
  // The r-th largest key, 1 <= r <= size.
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

GRADCOMP_HD inline std::uint32_t dgc_start(const chunk_plan& c, const sample_view& v) {
  return v.kth_largest(clamp_rank(std::ceil(static_cast<double>(c.k) * static_cast<double>(v.size) / static_cast<double>(c.count)), v.size));
}

GRADCOMP_HD inline std::uint32_t tagc_start(const search_params& p, const chunk_plan& c, const sample_view& v) {
  const double below = 1.0 - p.density, s = static_cast<double>(v.size);
  const double want = std::ceil(below * s);
  std::uint64_t need = want <= 0.0 ? 0 : want >= s ? v.size : static_cast<std::uint64_t>(want);
  while (need > 0 && static_cast<double>(need - 1) / s >= below) --need;
  while (need < v.size && !(static_cast<double>(need) / s >= below)) ++need;
  const std::uint32_t q = need == 0 ? 0 : v.kth_largest(v.size - need + 1);
  std::uint32_t lo = 0, hi = p.table_size;  // the first entry whose key exceeds q
  if (need != 0) {
    while (lo < hi) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (q < p.table[mid]) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
  }
  std::uint32_t entry = lo < p.table_size ? lo : p.table_size - 1;
  if (entry > 0) {
    const double est = static_cast<double>(v.count_at_least(p.table[entry])) * static_cast<double>(c.count) / s;
    const double before = static_cast<double>(v.count_at_least(p.table[entry - 1])) * static_cast<double>(c.count) / s;
    if (est < static_cast<double>(c.lo) && before <= static_cast<double>(c.cap)) --entry;
  }
  return p.table[entry];
}

GRADCOMP_HD inline std::uint32_t start_key(const search_params& p, const chunk_plan& c, const sample_view& v) {
  return p.rule == threshold::rule::tagc ? tagc_start(p, c, v) : dgc_start(c, v);
}

GRADCOMP_HD inline std::uint32_t adjust_key(const chunk_plan& c, const sample_view& v, std::uint32_t t, std::uint64_t count) {
  std::uint64_t r = v.count_at_least(t);
  r = r < 1 ? 1 : r;
  const std::uint64_t next = count == 0 ? (4 * r < v.size ? 4 * r : v.size)
                                        : clamp_rank(std::round(static_cast<double>(r) * static_cast<double>(c.k) / static_cast<double>(count)), v.size);
  return v.kth_largest(next);
}

GRADCOMP_HD inline void to_ranking(chunk_select& s, const chunk_plan& c) {
  s.stage = ranking;
  s.exact = 1;
  s.need = c.k;
  s.prefix = 0;
  s.mask = 0;
}

// The record a chunk starts a step with. Empty chunks are done and keep their threshold.
GRADCOMP_HD inline chunk_select begin(const search_params& p, const chunk_plan& c, const sample_view& v, float previous) {
  chunk_select s;
  s.threshold = previous;
  if (c.count == 0) return s;
  if (c.k >= c.count) {  // keep everything
    s.cut = c.count;
    s.threshold = 0.0f;
    return s;
  }
  s.stage = counting;
  if (previous > 0.0f && is_finite_bits(float_bits(previous))) {
    s.t = abs_key(previous);
    s.with_previous = 1;
  } else {
    s.t = start_key(p, c, v);
  }
  return s;
}

// After a counting pass found `count` keys >= t.
GRADCOMP_HD inline void after_pass(chunk_select& s, const search_params& p, const chunk_plan& c, const sample_view& v,
                                   std::uint64_t count) {
  if (s.stage != counting) return;
  ++s.passes;
  if (c.lo <= count && count <= c.cap) {
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

// --- Exact top-k (ranking): digits of keys at bits 31..21, 20..10 and 9..0.
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

}  // namespace gradcomp::sparsify::threshold_parallel
