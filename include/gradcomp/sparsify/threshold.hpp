#pragma once
// sparsify::threshold: keep the elements with |x| >= t, where t is estimated from a random
// sample of |x| instead of an exact selection (DGC, Lin et al. 2018; TAGC). Aimed at
// k = ceil(density * n) kept values; the kept count is data dependent and the frame says it.
//
//   0. With a previous step's threshold for this chunk, one pass tries it first (below); if the
//      count lands in [min_ratio k, max_ratio k] no sample is drawn (the steady state).
//   1. Sample: sample_size(n) values of the chunk, in runs of sample_run consecutive values (one
//      cache line of fp32: a random line costs as much as a random value) starting at
//      positions drawn with Philox (key = seed, step; counter = chunk, stream sparsifier),
//      with replacement.
//   2. Threshold from the sample:
//        rule::dgc   the sample's top-k threshold;
//        rule::tagc  the smallest entry of a log-spaced table (steps_per_decade entries per
//                    decade over [table_min, table_max]) under which at least 1 - density of
//                    the sample lies, searched from the previous step's entry.
//   3. One pass keeps |x| >= t (fused with the feedback's x = g + e). If the count leaves
//      [min_ratio k, max_ratio k], t is adjusted from the sample and the pass repeated, at
//      most max_tries passes in all; after that an exact top-k of the chunk (k values) is
//      sent, so the kept count never exceeds capacity(n) = min(n, ceil(max_ratio k)).
// The threshold used is kept in the state as the next step's start (state::thresholds).

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/ids.hpp"
#include "../core/options.hpp"
#include "topk.hpp"

namespace gradcomp::sparsify {

struct threshold {
  using policy_kind = sparsifier_tag;
  enum class rule : std::uint8_t { dgc = 0, tagc = 1 };
  struct config {
    double density = 0.01;           // target fraction kept, in (0, 1]
    rule estimate = rule::dgc;       // how the threshold is found from the sample
    double sample_fraction = 0.01;   // of the chunk, in (0, 1]; at least min_sample positions
    double min_ratio = 0.8;          // accepted kept count: [min_ratio k, max_ratio k]
    double max_ratio = 1.3;
    unsigned max_tries = 3;          // threshold passes before the exact top-k fallback, >= 1
    // rule::tagc: the threshold table, up to 1 (the top 0.1% of a heavy-tailed gradient of
    // scale 1e-3 lies above 1e-2).
    double table_min = 1e-6;
    double table_max = 1.0;
    unsigned steps_per_decade = 23;
    // The members a tool sets by name (core/options.hpp).
    static constexpr auto options() {
      return std::tuple{option{"density", &config::density}, option{"estimate", &config::estimate},
                        option{"sample_fraction", &config::sample_fraction}};
    }
  };
  static constexpr std::uint8_t id = ids::sparsifier::threshold;
  static constexpr bool is_dense = false;
  static constexpr selection kind = selection::threshold;
  static constexpr std::size_t min_sample = 256;
  static constexpr std::size_t sample_run = 16;

  static status validate(const config& c) {
    if (!valid_density(c.density)) return {errc::invalid_argument, "threshold density must be in (0, 1]"};
    if (!(c.sample_fraction > 0.0 && c.sample_fraction <= 1.0))
      return {errc::invalid_argument, "threshold sample_fraction must be in (0, 1]"};
    if (!(c.min_ratio >= 0.0 && c.min_ratio <= 1.0 && c.max_ratio >= 1.0 && c.max_ratio <= 16.0))
      return {errc::invalid_argument, "threshold needs 0 <= min_ratio <= 1 <= max_ratio <= 16"};
    if (c.max_tries < 1 || c.max_tries > 16) return {errc::invalid_argument, "threshold max_tries must be in [1, 16]"};
    if (!(c.table_min > 0.0 && c.table_max > c.table_min && c.table_max < 1e30) || c.steps_per_decade < 1 ||
        c.steps_per_decade > 1000 || std::log10(c.table_max / c.table_min) * c.steps_per_decade > 10000)
      return {errc::invalid_argument, "threshold table needs 0 < table_min < table_max and at most 10000 entries"};
    return {};
  }
  // The target k.
  GRADCOMP_HD static std::size_t target(const config& c, std::size_t n) { return topk::kept({c.density}, n); }
  // Capacity of a frame: the most values a chunk of n elements can keep.
  GRADCOMP_HD static std::size_t kept(const config& c, std::size_t n) {
    const double cap = std::ceil((c.max_ratio >= 1.0 && c.max_ratio <= 16.0 ? c.max_ratio : 16.0) *
                                 static_cast<double>(target(c, n)));
    return cap < static_cast<double>(n) ? static_cast<std::size_t>(cap) : n;
  }
  // Values in the sample of a chunk of n elements: whole runs of run_length(n).
  static std::size_t sample_size(const config& c, std::size_t n) {
    if (n == 0) return 0;
    auto s = static_cast<std::size_t>(std::ceil(c.sample_fraction * static_cast<double>(n)));
    s = s < min_sample ? (n < min_sample ? n : min_sample) : s;
    const std::size_t run = run_length(n);
    return (s + run - 1) / run * run;
  }
  static std::size_t run_length(std::size_t n) { return n < sample_run ? n : sample_run; }
  // Entries of the rule::tagc table: table_min * 10^(i / steps_per_decade), i < table_size.
  static std::size_t table_size(const config& c) {
    return static_cast<std::size_t>(std::floor(std::log10(c.table_max / c.table_min) * c.steps_per_decade + 1e-9)) + 1;
  }
  static float table_entry(const config& c, std::size_t i) {
    return static_cast<float>(c.table_min * std::pow(10.0, static_cast<double>(i) / c.steps_per_decade));
  }
};

}  // namespace gradcomp::sparsify
