// The keyed permutation behind random-k: a bijection of [0, n), the same for the same key,
// and uniform enough that every index is equally likely among the first k.
#include <gradcomp/core/permutation.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

using namespace gradcomp;

TEST_CASE("feistel_permutation is a bijection of 0..n-1") {
  for (std::uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 16ull, 17ull, 1000ull, 4097ull, 65536ull, 65537ull, 300001ull}) {
    CAPTURE(n);
    const feistel_permutation pi(n, 7, 3, 1);
    std::vector<bool> seen(n, false);
    bool ok = true;
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint32_t j = pi(static_cast<std::uint32_t>(i));
      ok &= j < n && !seen[j];
      if (j < n) seen[j] = true;
    }
    CHECK(ok);
  }
}

TEST_CASE("feistel_permutation depends on seed, step and chunk, and on nothing else") {
  const std::uint64_t n = 10007;
  const auto first = [&](std::uint32_t seed, std::uint64_t step, std::uint32_t chunk) {
    const feistel_permutation pi(n, seed, step, chunk);
    std::vector<std::uint32_t> v(100);
    for (std::uint32_t m = 0; m < v.size(); ++m) v[m] = pi(m);
    return v;
  };
  CHECK(first(1, 2, 3) == first(1, 2, 3));
  CHECK(first(1, 2, 3) != first(2, 2, 3));
  CHECK(first(1, 2, 3) != first(1, 3, 3));
  CHECK(first(1, 2, 3) != first(1, 2, 4));
}

TEST_CASE("the first k of the permutation cover every index uniformly over seeds (chi-square)") {
  // n = 100, k = 10, 20000 keys: each index is expected 2000 times. With 99 degrees of
  // freedom the statistic has mean 99 and standard deviation 14; 170 is 5 deviations out.
  const std::uint32_t n = 100, k = 10, keys = 20000;
  std::vector<double> hits(n, 0.0), first_hits(n, 0.0);
  for (std::uint32_t key = 0; key < keys; ++key) {
    const feistel_permutation pi(n, key, key / 7, 0);
    for (std::uint32_t m = 0; m < k; ++m) hits[pi(m)] += 1.0;
    first_hits[pi(0)] += 1.0;
  }
  const auto chi2 = [&](const std::vector<double>& h, double expect) {
    double s = 0;
    for (double c : h) s += (c - expect) * (c - expect) / expect;
    return s;
  };
  CHECK(chi2(hits, double(keys) * k / n) < 170.0);
  CHECK(chi2(first_hits, double(keys) / n) < 170.0);
}
