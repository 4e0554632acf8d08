// The orthogonal transforms (transform/hadamard.hpp, transform/dct.hpp): blocks cover any chunk
// length; the randomized Hadamard transform and the DCT-II against their definitions computed
// in double, norm preserved, the inverse returning the input to fp32 rounding; the signs the
// same for the same (seed, chunk) and different otherwise; and the lower int4 error on
// heavy-tailed data that the rotation exists for.
#include <gradcomp/cpu/transform.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/transform/dct.hpp>
#include <gradcomp/transform/hadamard.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "support/random.hpp"

using namespace gradcomp;
namespace tf = gradcomp::transform;

namespace {

double norm2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return s;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return d / scale;
}

}  // namespace

TEST_CASE("transform blocks: powers of two that cover a chunk in order") {
  for (std::size_t n : {1, 2, 3, 7, 64, 100, 1000, 4097}) {
    std::size_t covered = 0;
    tf::for_each_block(n, 64, [&](std::size_t at, std::size_t b) {
      CHECK(at == covered);
      CHECK(tf::is_power_of_two(b));
      CHECK(b <= 64);
      covered += b;
    });
    CHECK(covered == n);
  }
}

TEST_CASE("randomized Hadamard: the definition, norms, the inverse, the signs") {
  const tf::hadamard::config c{.block = 64, .seed = 11};
  for (std::size_t n : {64, 200, 1000}) {
    const std::vector<float> x = test::heavy_tailed(n, static_cast<std::uint32_t>(n), 1.0f);
    std::vector<float> y = x;
    gradcomp::cpu::detail::transform_chunk<tf::hadamard>(c, 7, y.data(), n, false);
    // Against y = s H D x in double, block by block.
    std::vector<float> want(n);
    tf::for_each_block(n, c.block, [&](std::size_t at, std::size_t b) {
      const unsigned m = tf::log2_of(b);
      const double s = std::ldexp(1.0, -static_cast<int>((m + 1) / 2));
      for (std::size_t i = 0; i < b; ++i) {
        double sum = 0;
        for (std::size_t j = 0; j < b; ++j) {
          const double h = (__builtin_popcountll(i & j) % 2) ? -1.0 : 1.0;
          sum += h * (tf::negated(c.seed, 7, at + j) ? -x[at + j] : x[at + j]);
        }
        want[at + i] = static_cast<float>(s * sum);
      }
    });
    CHECK(max_rel_diff(y, want) < 1e-6);
    // Orthogonal up to 1/sqrt(2) on blocks of odd log2 (64: even, so the norm is kept).
    if (n % 64 == 0) CHECK(norm2(y) == doctest::Approx(norm2(x)).epsilon(1e-5));
    gradcomp::cpu::detail::transform_chunk<tf::hadamard>(c, 7, y.data(), n, true);
    CHECK(max_rel_diff(y, x) < 1e-6);
  }
  // The same key gives the same signs; another chunk or seed others.
  int same = 0, other_chunk = 0, other_seed = 0;
  for (std::uint64_t j = 0; j < 256; ++j) {
    same += tf::negated(1, 2, j) == tf::negated(1, 2, j);
    other_chunk += tf::negated(1, 2, j) == tf::negated(1, 3, j);
    other_seed += tf::negated(1, 2, j) == tf::negated(2, 2, j);
  }
  CHECK(same == 256);
  for (int agree : {other_chunk, other_seed}) {
    CHECK(agree > 90);
    CHECK(agree < 166);  // about half agree
  }
}

TEST_CASE("chunked DCT-II: the definition, orthonormality and the inverse") {
  CHECK(tf::cos_pi(0, 1) == 1.0);
  for (std::uint64_t p = 0; p <= 8; ++p) CHECK(tf::cos_pi(p, 16) == doctest::Approx(std::cos(M_PI * p / 16.0)).epsilon(1e-15));
  CHECK(tf::sqrt_of(2.0) == doctest::Approx(std::sqrt(2.0)).epsilon(1e-15));
  const tf::dct::config c{.block = 64};
  for (std::size_t n : {2, 8, 64, 100, 640}) {
    const std::vector<float> x = test::heavy_tailed(n, static_cast<std::uint32_t>(n + 1), 1.0f);
    std::vector<float> y = x;
    gradcomp::cpu::detail::transform_chunk<tf::dct>(c, 0, y.data(), n, false);
    std::vector<float> want(n);
    tf::for_each_block(n, c.block, [&](std::size_t at, std::size_t b) {
      for (std::size_t k = 0; k < b; ++k) {
        double sum = 0;
        for (std::size_t i = 0; i < b; ++i) sum += x[at + i] * std::cos(M_PI * (2.0 * i + 1) * k / (2.0 * b));
        want[at + k] = static_cast<float>(sum * std::sqrt((k == 0 ? 1.0 : 2.0) / b));
      }
    });
    CHECK(max_rel_diff(y, want) < 2e-6);
    CHECK(norm2(y) == doctest::Approx(norm2(x)).epsilon(1e-5));
    gradcomp::cpu::detail::transform_chunk<tf::dct>(c, 0, y.data(), n, true);
    CHECK(max_rel_diff(y, x) < 2e-6);
  }
  // A smooth signal gathers in the low coefficients.
  std::vector<float> ramp(64);
  for (std::size_t i = 0; i < 64; ++i) ramp[i] = static_cast<float>(i) / 64.0f;
  gradcomp::cpu::detail::transform_chunk<tf::dct>(c, 0, ramp.data(), 64, false);
  double low = 0;
  for (std::size_t k = 0; k < 4; ++k) low += static_cast<double>(ramp[k]) * ramp[k];
  CHECK(low > 0.99 * norm2(ramp));
}

TEST_CASE("a rotation before int4 lowers the error on heavy-tailed values") {
  // int4 with a scale per 64 values, with and without the Hadamard transform of 64-blocks.
  using int4 = compressor<partition::whole, sparsify::dense, quantize::int_block<4>, feedback::none>;
  const int4 comp({.quantize = {.group = 64}});
  const std::size_t n = 1 << 14;
  std::vector<float> x = test::heavy_tailed(n, 3, 1.0f);
  for (std::size_t i = 0; i < n; i += 97) x[i] *= 30.0f;  // outliers
  const auto roundtrip = [&](std::vector<float> v) {
    state st = comp.make_state(n);
    std::vector<std::byte> p(comp.max_payload_bytes<float>(n));
    const auto w = comp.compress<float>(v, st, p);
    REQUIRE(w);
    std::vector<float> out(n);
    REQUIRE(comp.decompress<float>(std::span(p).first(*w), std::span(out)));
    return out;
  };
  const auto error = [&](const std::vector<float>& got) {
    double e = 0;
    for (std::size_t i = 0; i < n; ++i) e += (static_cast<double>(got[i]) - x[i]) * (got[i] - x[i]);
    return e / norm2(x);
  };
  const double plain = error(roundtrip(x));
  const tf::hadamard::config hc{.block = 64, .seed = 1};
  std::vector<float> y = x;
  gradcomp::cpu::detail::transform_chunk<tf::hadamard>(hc, 0, y.data(), n, false);
  std::vector<float> back = roundtrip(y);
  gradcomp::cpu::detail::transform_chunk<tf::hadamard>(hc, 0, back.data(), n, true);
  const double rotated = error(back);
  MESSAGE("int4 relative squared error: plain ", plain, ", rotated ", rotated);
  CHECK(rotated < 0.5 * plain);
}

TEST_CASE("transform blocks: numbered blocks are for_each_block's, in order") {
  for (std::size_t block : {2, 8, 64, 256})
    for (std::size_t n : {0, 1, 2, 3, 7, 63, 64, 100, 1000, 4097}) {
      std::size_t t = 0;
      tf::for_each_block(n, block, [&](std::size_t at, std::size_t b) {
        const tf::block_span s = tf::block_number(n, block, t++);
        CHECK(s.offset == at);
        CHECK(s.length == b);
      });
      CHECK(t == tf::block_count(n, block));
      CHECK(tf::block_number(n, block, t).length == 0);
    }
}
