#include <gradcomp/core/reduce.hpp>
#include <gradcomp/cpu/compact.hpp>
#include <gradcomp/cpu/dispatch.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
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

TEST_CASE("tree_sum matches the documented order for every n, mixed magnitudes and signs") {
  // Random signs, exponents over 2^-20 .. 2^20 and mantissas, with some +-0: any change in the
  // order of the additions changes some of these sums' bits.
  std::mt19937 gen(20240611);
  std::vector<float> x(max_tree_sum);
  for (auto& v : x) {
    const std::uint32_t r = static_cast<std::uint32_t>(gen());
    const std::uint32_t magnitude = (107u + (r >> 5) % 41u) << 23 | (static_cast<std::uint32_t>(gen()) & 0x7fffffu);
    v = bits_float((r & 0x80000000u) | ((r & 31u) == 0 ? 0u : magnitude));
  }
  const auto square = [](float a) { return a * a; };
  for (std::size_t n = 0; n <= max_tree_sum; ++n) {
    CAPTURE(n);
    const std::vector<float> head(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<float> squares(n);
    for (std::size_t i = 0; i < n; ++i) squares[i] = square(x[i]);
    const std::uint32_t want = float_bits(reference_tree_sum(head));
    const std::uint32_t want_squares = float_bits(reference_tree_sum(squares));
    float got[4];
    got[0] = tree_sum(x.data(), n);
    got[1] = tree_sum(x.data(), n, square);
    cpu::detail::run_best([&]() GRADCOMP_LOOP_BODY {  // the AVX2 build of the loops, where the CPU has it
      got[2] = tree_sum(x.data(), n);
      got[3] = tree_sum(x.data(), n, square);
    });
    const bool same = float_bits(got[0]) == want && float_bits(got[1]) == want_squares &&
                      float_bits(got[2]) == want && float_bits(got[3]) == want_squares;
    CHECK(same);  // one check per n, not four
  }
  // -0 sums: -0 only where no +0 padding is added (n a power of two).
  const std::vector<float> zeros(64, -0.0f);
  for (std::size_t n : {1u, 2u, 3u, 4u, 5u, 8u, 16u, 17u, 32u, 64u}) {
    CAPTURE(n);
    const std::vector<float> head(zeros.begin(), zeros.begin() + static_cast<std::ptrdiff_t>(n));
    CHECK(float_bits(tree_sum(zeros.data(), n)) == float_bits(reference_tree_sum(head)));
  }
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
  const auto count = cpu::detail::compact_indices(100, [](std::size_t i) { return i % 7 == 3; }, out.data(), 10);
  CHECK(count == 14);
  for (std::size_t m = 0; m < 10; ++m) CHECK(load_le<std::uint32_t>(out.data() + 4 * m) == 7 * m + 3);
}
