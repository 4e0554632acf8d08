// The CPU threshold skeleton on its own: kept counts near the target, the kept set is exactly
// {key >= threshold} (or the exact top-k after the fallback), never more than capacity.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/core/philox.hpp>
#include <gradcomp/cpu/threshold_select.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "support/random.hpp"
#include "support/reference.hpp"

using namespace gradcomp;
using test::keys_of;
using test::reference_topk;
using rule = sparsify::threshold::rule;
using policy = sparsify::threshold;

namespace {

std::vector<float> gaussian(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

// Log-normal magnitudes (median 3e-4, sigma 1) with random signs.
std::vector<float> log_normal(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::lognormal_distribution<float> mag(std::log(3e-4f), 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (gen() & 1 ? -1.0f : 1.0f) * mag(gen);
  return v;
}

struct outcome {
  std::vector<std::uint32_t> indices;
  float threshold;
  unsigned passes;
  bool fallback;
  std::vector<std::size_t> sampled;  // positions asked of sample_key, in call order
};

outcome run(const std::vector<std::uint32_t>& keys, const policy::config& c, float previous = 0.0f,
            std::uint64_t step = 7, std::uint32_t seed = 1234, std::uint32_t chunk = 3) {
  const std::size_t n = keys.size(), cap = policy::kept(c, n);
  std::vector<std::uint64_t> ws(cpu::detail::threshold_selector::workspace_bytes(c, n) / 8 + 1);
  std::vector<std::uint32_t> out(cap + 1, 0xdeadbeefu);
  cpu::detail::threshold_selector sel(std::as_writable_bytes(std::span(ws)), c, n, seed, step, chunk, previous);
  std::size_t scanned = 0;
  bool in_order = true, ahead_ok = true;
  std::size_t ahead_calls = 0;
  outcome r;
  const auto key = [&](std::size_t i) { return keys[i]; };
  const std::size_t count = sel.select(
      [&](std::size_t i) {
        r.sampled.push_back(i);
        return keys[i];
      },
      [&](std::size_t i) {
        in_order &= i == scanned++;
        return keys[i];
      },
      key, out.data(),
      [&](std::size_t i, std::size_t m) {  // the prefetch hook names only elements still to come
        ahead_ok &= i >= scanned && m > 0 && i + m <= n;
        ++ahead_calls;
      });
  CHECK(in_order);
  CHECK(ahead_ok);
  if (n >= 4096) CHECK(ahead_calls > 0);
  CHECK(scanned == n);
  REQUIRE(count <= cap);
  CHECK(out[cap] == 0xdeadbeefu);
  r.indices.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(count));
  r.threshold = sel.threshold();
  r.passes = sel.passes();
  r.fallback = sel.used_fallback();
  return r;
}

// Everything that holds whichever path ran.
void check_consistent(const std::vector<std::uint32_t>& keys, const policy::config& c, const outcome& r) {
  const std::size_t n = keys.size(), k = policy::target(c, n);
  CHECK(r.indices.size() <= policy::kept(c, n));
  CHECK(std::adjacent_find(r.indices.begin(), r.indices.end(), std::greater_equal<>()) == r.indices.end());
  if (r.fallback) {
    CHECK(r.indices == reference_topk(keys, k));
    std::uint32_t smallest = ~0u;
    for (auto i : r.indices) smallest = std::min(smallest, keys[i]);
    CHECK(abs_key(r.threshold) == smallest);
    CHECK(r.passes >= 2);  // a threshold pass and the exact one
  } else {
    CHECK(r.indices.size() >= std::ceil(c.min_ratio * static_cast<double>(k)));
    std::vector<std::uint32_t> brute;
    for (std::size_t i = 0; i < n; ++i)
      if (keys[i] >= abs_key(r.threshold)) brute.push_back(static_cast<std::uint32_t>(i));
    CHECK(r.indices == brute);
    CHECK(r.passes <= c.max_tries);
  }
}

bool is_table_entry(const policy::config& c, float t) {
  for (std::size_t i = 0; i < policy::table_size(c); ++i)
    if (policy::table_entry(c, i) == t) return true;
  return false;
}

policy::config make(rule estimate, double density) {
  policy::config c;
  c.estimate = estimate;
  c.density = density;
  return c;
}

}  // namespace

TEST_CASE("kept count within [0.8k, 1.3k] on Gaussian, log-normal and Student-t data") {
  std::size_t runs = 0, estimated = 0;
  for (std::size_t n : {100000u, 1000000u}) {
    const std::vector<std::vector<float>> data = {gaussian(n, 31), log_normal(n, 32), test::heavy_tailed(n, 33, 5e-4f)};
    for (std::size_t d = 0; d < data.size(); ++d) {
      const auto keys = keys_of(data[d]);
      for (rule estimate : {rule::dgc, rule::tagc}) {
        for (double density : {0.001, 0.01, 0.1}) {
          CAPTURE(n);
          CAPTURE(d);
          CAPTURE(static_cast<int>(estimate));
          CAPTURE(density);
          const auto c = make(estimate, density);
          const auto r = run(keys, c);
          const double k = static_cast<double>(policy::target(c, n));
          CHECK(static_cast<double>(r.indices.size()) >= 0.8 * k);
          CHECK(static_cast<double>(r.indices.size()) <= std::ceil(1.3 * k));
          check_consistent(keys, c, r);
          if (estimate == rule::tagc && r.passes == 1 && !r.fallback) CHECK(is_table_entry(c, r.threshold));
          ++runs;
          estimated += !r.fallback;
        }
      }
    }
  }
  MESSAGE(estimated, " of ", runs, " runs without the exact fallback");
  CHECK(estimated * 4 >= runs * 3);
}

TEST_CASE("the first threshold follows the rules, or is the previous one when its pass is accepted") {
  const std::size_t n = 200000;
  const auto keys = keys_of(test::heavy_tailed(n, 41, 5e-4f));
  for (double density : {0.003, 0.01, 0.05}) {
    CAPTURE(density);
    auto c = make(rule::dgc, density);
    c.max_tries = 1;  // and a window that accepts any first threshold
    c.min_ratio = 0.0;
    c.max_ratio = 16.0;
    auto r = run(keys, c);
    REQUIRE(!r.fallback);
    std::vector<std::uint32_t> sample;
    for (auto i : r.sampled) sample.push_back(keys[i]);
    REQUIRE(sample.size() == policy::sample_size(c, n));
    std::sort(sample.begin(), sample.end(), std::greater<>());
    const auto rank = static_cast<std::size_t>(std::ceil(static_cast<double>(policy::target(c, n)) * sample.size() / n));
    CHECK(abs_key(r.threshold) == sample[rank - 1]);

    c.estimate = rule::tagc;
    std::size_t first = policy::table_size(c) - 1;
    for (std::size_t i = 0; i < policy::table_size(c); ++i) {
      const auto below = std::count_if(sample.begin(), sample.end(),
                                       [&](std::uint32_t s) { return s < abs_key(policy::table_entry(c, i)); });
      if (static_cast<double>(below) / static_cast<double>(sample.size()) >= 1.0 - density) {
        first = i;
        break;
      }
    }
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (float previous : {0.0f, 1e-9f, 1e-6f, 2e-5f, 3e-4f, 1e-3f, 5e-3f, 1e-2f, 1.0f, inf, nan, -1.0f}) {
      CAPTURE(previous);
      r = run(keys, c, previous);
      REQUIRE(!r.fallback);
      if (previous > 0.0f && std::isfinite(previous) && r.passes == 1) {  // accepted by its own pass
        CHECK(r.threshold == previous);
        CHECK(r.sampled.empty());
      } else {
        CHECK(r.threshold == policy::table_entry(c, first));
      }
    }
  }
}

TEST_CASE("TAGC steps back one table entry when the sample puts the first below the bounds") {
  // Recomputes the rule from the sample the selector read: the first entry with at least
  // 1 - density of the sample under it, or the entry before it when the sample's estimate
  // of the first is under min_ratio k and that of the one before is at most capacity.
  std::size_t stepped = 0, runs = 0;
  for (std::uint32_t seed = 0; seed < 6; ++seed) {
    const std::size_t n = 2000000;
    const auto keys = keys_of(test::heavy_tailed(n, 90 + seed, 1e-4f));
    for (double density : {0.001, 0.002, 0.005}) {
      CAPTURE(seed);
      CAPTURE(density);
      const auto c = make(rule::tagc, density);
      const auto r = run(keys, c);
      std::vector<std::uint32_t> sample;
      for (auto i : r.sampled) sample.push_back(keys[i]);
      REQUIRE(sample.size() == policy::sample_size(c, n));
      const auto at_least = [&](std::size_t i) {
        return static_cast<double>(std::count_if(sample.begin(), sample.end(), [&](std::uint32_t k) {
          return k >= abs_key(policy::table_entry(c, i));
        }));
      };
      const double s = static_cast<double>(sample.size()), scale = static_cast<double>(n) / s;
      std::size_t first = policy::table_size(c) - 1;
      for (std::size_t i = 0; i < policy::table_size(c); ++i) {
        if ((s - at_least(i)) / s >= 1.0 - density) {
          first = i;
          break;
        }
      }
      const double lo = std::ceil(c.min_ratio * static_cast<double>(policy::target(c, n)));
      const double cap = static_cast<double>(policy::kept(c, n));
      std::size_t expect = first;
      if (first > 0 && at_least(first) * scale < lo && at_least(first - 1) * scale <= cap) expect = first - 1;
      check_consistent(keys, c, r);
      if (r.passes == 1 && !r.fallback) {  // the rule's threshold was accepted by its pass
        CHECK(r.threshold == policy::table_entry(c, expect));
        ++runs;
        stepped += expect != first;
      }
    }
  }
  MESSAGE(stepped, " of ", runs, " one-pass runs stepped back");
  CHECK(runs >= 9);
  CHECK(stepped >= 2);
}

TEST_CASE("adversarial inputs: the exact top-k when the estimate fails, never above capacity") {
  const std::size_t n = 100000;
  std::vector<std::vector<std::uint32_t>> cases;
  cases.push_back(std::vector<std::uint32_t>(n, abs_key(1e-3f)));  // all equal
  cases.push_back(std::vector<std::uint32_t>(n, 0u));               // all zero
  std::vector<std::uint32_t> spikes(n, 0u);                         // a few huge among zeros
  for (std::size_t i = 0; i < 37; ++i) spikes[(i * 7919 + 11) % n] = abs_key(1e30f + static_cast<float>(i) * 1e24f);
  cases.push_back(spikes);
  auto above = test::heavy_tailed(n, 51, 10.0f);  // above the TAGC table
  cases.push_back(keys_of(above));
  auto below = test::heavy_tailed(n, 52, 1e-10f);  // below it
  cases.push_back(keys_of(below));
  std::vector<std::uint32_t> two_levels(n, abs_key(1e-4f));  // ties right at the target rank
  for (std::size_t i = 0; i < n; i += 50) two_levels[i] = abs_key(2e-3f);
  cases.push_back(two_levels);
  cases.push_back(keys_of(std::vector<float>(n, std::numeric_limits<float>::infinity())));
  for (std::size_t m = 0; m < cases.size(); ++m) {
    for (rule estimate : {rule::dgc, rule::tagc}) {
      for (double density : {0.001, 0.01, 0.1}) {
        for (float previous : {0.0f, 1e-3f}) {
          CAPTURE(m);
          CAPTURE(static_cast<int>(estimate));
          CAPTURE(density);
          CAPTURE(previous);
          const auto c = make(estimate, density);
          const auto r = run(cases[m], c, previous);
          check_consistent(cases[m], c, r);
          if (m < 3) CHECK(r.fallback);
        }
      }
    }
  }
}

TEST_CASE("the sample is Philox of (seed, step, chunk): same inputs give the same output") {
  const std::size_t n = 300000;
  const auto keys = keys_of(log_normal(n, 61));
  for (rule estimate : {rule::dgc, rule::tagc}) {
    const auto c = make(estimate, 0.01);
    const auto a = run(keys, c, 0.0f, 5, 99, 2);
    REQUIRE(a.sampled.size() == policy::sample_size(c, n));
    // Runs of 16 starting at Philox positions, read last run first.
    const std::size_t run_len = policy::run_length(n), runs = a.sampled.size() / run_len;
    std::vector<std::size_t> expect;
    for (std::size_t r = runs; r-- > 0;) {
      const std::size_t start = (std::uint64_t{philox_at(99, 5, 2, random_stream::sparsifier, r)} * (n - run_len + 1)) >> 32;
      for (std::size_t j = 0; j < run_len; ++j) expect.push_back(start + j);
    }
    CHECK(a.sampled == expect);
    const auto b = run(keys, c, 0.0f, 5, 99, 2);
    CHECK(b.indices == a.indices);
    CHECK(b.threshold == a.threshold);
    CHECK(b.sampled == a.sampled);
    cpu::isa_limit() = cpu::isa::baseline;
    const auto portable = run(keys, c, 0.0f, 5, 99, 2);
    cpu::isa_limit() = cpu::isa::avx512;
    CHECK(portable.indices == a.indices);
    CHECK(run(keys, c, 0.0f, 6, 99, 2).sampled != a.sampled);
    CHECK(run(keys, c, 0.0f, 5, 98, 2).sampled != a.sampled);
    CHECK(run(keys, c, 0.0f, 5, 99, 1).sampled != a.sampled);
  }
}

TEST_CASE("DGC with the previous step's threshold on the same data takes one pass") {
  const std::size_t n = 500000;
  const std::vector<std::vector<float>> data = {gaussian(n, 71), log_normal(n, 72), test::heavy_tailed(n, 73, 5e-4f)};
  for (std::size_t d = 0; d < data.size(); ++d) {
    const auto keys = keys_of(data[d]);
    for (double density : {0.01, 0.1}) {
      CAPTURE(d);
      CAPTURE(density);
      const auto c = make(rule::dgc, density);
      const auto first = run(keys, c, 0.0f, 1);
      REQUIRE(!first.fallback);
      const auto second = run(keys, c, first.threshold, 2);
      CHECK(second.passes == 1);
      CHECK(second.threshold == first.threshold);
      CHECK(second.indices == first.indices);
    }
  }
}

TEST_CASE("k = n keeps everything, tiny chunks") {
  const auto keys = keys_of(test::heavy_tailed(1000, 81));
  for (rule estimate : {rule::dgc, rule::tagc}) {
    const auto all = run(keys, make(estimate, 1.0));
    CHECK(all.indices == reference_topk(keys, keys.size()));
    CHECK(all.passes == 1);
    CHECK(run({}, make(estimate, 0.5)).indices.empty());
    for (std::size_t n : {1u, 2u, 255u, 256u, 257u}) {
      const auto small = keys_of(test::heavy_tailed(n, 82 + static_cast<std::uint32_t>(n)));
      for (double density : {0.001, 0.01, 0.1, 0.5, 0.999}) {
        CAPTURE(n);
        CAPTURE(density);
        const auto c = make(estimate, density);
        check_consistent(small, c, run(small, c, 0.0f));
        check_consistent(small, c, run(small, c, 1e-3f));
      }
    }
  }
}
