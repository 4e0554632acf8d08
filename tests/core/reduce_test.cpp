#include <gradcomp/core/reduce.hpp>
#include <gradcomp/cpu/compact.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <vector>

#include "support/random.hpp"

using namespace gradcomp;

namespace {
// The documented order, written as literally as possible.
float reference_tree_sum(std::vector<float> v) {
  std::size_t p = 1;
  while (p < v.size()) p *= 2;
  v.resize(p, 0.0f);
  while (p > 1) {
    p /= 2;
    for (std::size_t i = 0; i < p; ++i) v[i] = v[i] + v[i + p];
  }
  return v.empty() ? 0.0f : v[0];
}
}  // namespace

TEST_CASE("tree_sum follows the documented order bit for bit") {
  for (std::size_t n : {0u, 1u, 2u, 3u, 5u, 8u, 100u, 127u, 128u, 129u, 1000u, 4096u}) {
    const auto x = test::heavy_tailed(n, static_cast<std::uint32_t>(n), 1.0f);
    CHECK(float_bits(tree_sum(x.data(), n)) == float_bits(reference_tree_sum(x)));
    std::vector<float> squares(n);
    for (std::size_t i = 0; i < n; ++i) squares[i] = x[i] * x[i];
    CHECK(float_bits(tree_sum(x.data(), n, [](float a) { return a * a; })) == float_bits(reference_tree_sum(squares)));
  }
  const float ones[3] = {1.0f, 2.0f, 4.0f};
  CHECK(tree_sum(ones, 3) == 7.0f);
}

TEST_CASE("max_abs") {
  const float x[] = {1.0f, -3.0f, 2.0f, -0.0f};
  CHECK(max_abs(x, 4) == 3.0f);
  CHECK(max_abs(x, 0) == 0.0f);
  const float with_nan[] = {1.0f, NAN, INFINITY};
  CHECK(std::isnan(max_abs(with_nan, 3)));
}

TEST_CASE("compact_indices writes kept indices ascending and counts past capacity") {
  std::vector<std::byte> out(4 * 10);
  const auto count = cpu::compact_indices(100, [](std::size_t i) { return i % 7 == 3; }, out.data(), 10);
  CHECK(count == 14);
  for (std::size_t m = 0; m < 10; ++m) CHECK(load_le<std::uint32_t>(out.data() + 4 * m) == 7 * m + 3);
}
