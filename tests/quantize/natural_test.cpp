// quantize::natural: unbiased stochastic rounding to powers of two, its variance bound, the
// 9-bit codes and their packing, the ends of the float range and non-finite values.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/quantize/natural.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/frames.hpp"
#include "support/quantize.hpp"
#include "support/quantizer_contract.hpp"
#include "support/random.hpp"

using namespace gradcomp;
using quantize::natural;

namespace {

constexpr float infinity = std::numeric_limits<float>::infinity();
constexpr float quiet_nan = std::numeric_limits<float>::quiet_NaN();

using C = test::with_quantizer<natural>;

// The power of two 2^e <= |x| < 2^(e+1) (2^-126 for subnormal x) and the probability of
// rounding up, p = (|x| - 2^e) / 2^e.
struct neighbours {
  double low, p;
};
neighbours around(float x) {
  const double a = std::abs(double(x));
  if (a < 0x1p-126) return {0.0, a / 0x1p-126};
  int e;
  std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1)
  const double low = std::ldexp(1.0, e - 1);
  return {low, a / low - 1};
}

}  // namespace

TEST_CASE("natural: codec id and traits") {
  CHECK(C().codec_id() == 0x010b0000u);
  CHECK(natural::bits == 9);
  CHECK(natural::group_size({}) == 0);
  CHECK(natural::meta_bytes == 0);
  CHECK(natural::stochastic({}));
  CHECK(natural::unbiased({}));
  CHECK_FALSE(natural::summable);
  CHECK(C().validate().ok());
}

TEST_CASE("natural: every code round-trips") {
  for (std::uint32_t c = 0; c < 512; ++c) {
    const float v = natural::decode({}, {}, static_cast<std::uint16_t>(c));
    const unsigned e = c & 0xffu;
    if (e == 0xff) {
      CHECK(std::isnan(v));
      CHECK(float_bits(v) == 0x7fc00000u);
      CHECK(natural::encode({}, {}, v, 0) == 0x0ff);
      continue;
    }
    const double magnitude = e == 0 ? 0.0 : std::ldexp(1.0, int(e) - 127);
    CHECK(v == ((c & 0x100u) ? -magnitude : magnitude));
    CHECK(std::signbit(v) == bool(c & 0x100u));  // -0 too
    for (std::uint32_t random : {0u, 0x12345678u, 0xffffffffu}) CHECK(natural::encode({}, {}, v, random) == c);
  }
  // And through a frame: the 510 finite values come back bit for bit.
  std::vector<float> x;
  for (std::uint16_t c = 0; c < 512; ++c)
    if ((c & 0xffu) != 0xffu) x.push_back(natural::decode({}, {}, c));
  const auto d = test::round_trip(C(), x, 7);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(float_bits(d[i]) == float_bits(x[i]));
}

TEST_CASE("natural: each draw is a neighbouring power of two, unbiased, variance <= x^2 / 8") {
  auto x = test::heavy_tailed(256, 5, 1.0f);
  x[0] = 1.0f + 1.0f / 3;  // p = 1/3: the largest relative variance, exactly 1/8
  x[1] = -0x1.555556p-20f;
  const std::uint64_t steps = 4000;
  const C comp;
  std::vector<double> sum(x.size(), 0.0), sq(x.size(), 0.0);
  std::size_t off_grid = 0;  // draws that are not sign(x) times a neighbouring power of two
  for (std::uint64_t t = 0; t < steps; ++t) {
    const auto d = test::round_trip(comp, x, t);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const auto n = around(x[i]);
      const double a = std::abs(double(d[i]));
      off_grid += !(a == n.low || a == 2 * n.low) || std::signbit(d[i]) != std::signbit(x[i]) ||
                  !(std::abs(double(d[i]) - x[i]) <= std::abs(double(x[i])));
      sum[i] += d[i];
      sq[i] += (double(d[i]) - x[i]) * (double(d[i]) - x[i]);
    }
  }
  CHECK(off_grid == 0);
  double total_sq = 0, total_x2 = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto n = around(x[i]);
    const double variance = n.p * (1 - n.p) * n.low * n.low;  // exact, per draw
    CHECK(variance <= double(x[i]) * x[i] / 8 * (1 + 1e-12));
    // The mean of `steps` draws: within 5 standard deviations of x, plus the bias bound
    // (the probability is resolved to r >= 2^-16; see the header).
    CHECK_MESSAGE(std::abs(sum[i] / steps - x[i]) <= 5 * std::sqrt(variance / steps) + 0x1p-16 * n.low, "element " << i);
    // Squared errors lie in [0, low^2], so their mean is within 5 * low^2 / 2 / sqrt(steps).
    CHECK_MESSAGE(std::abs(sq[i] / steps - variance) <= 5 * n.low * n.low / 2 / std::sqrt(double(steps)) + 0x1p-16 * n.low * n.low,
                  "element " << i);
    total_sq += sq[i] / steps;
    total_x2 += double(x[i]) * x[i];
  }
  CHECK(total_sq <= total_x2 / 8);
}

TEST_CASE("natural: randomness depends on seed and step only") {
  const auto x = test::heavy_tailed(3000, 2);
  const C a({.seed = 7}), b({.seed = 8});
  CHECK(test::round_trip(a, x, 3) == test::round_trip(a, x, 3));
  CHECK(test::round_trip(a, x, 3) != test::round_trip(a, x, 4));
  CHECK(test::round_trip(a, x, 3) != test::round_trip(b, x, 3));
}

TEST_CASE("natural: golden bytes, 9-bit codes packed LSB first") {
  // Values whose rounding involves no randomness (powers of two, zeros, the reserved code,
  // saturation), so the bytes pin the code format alone.
  const std::vector<float> x = {1.0f, -2.0f, 0.0f, 0.5f, infinity, std::numeric_limits<float>::max(), -0.0f};
  const auto p = test::compress_at(C(), x);
  const auto h = test::header_of(p);
  CHECK(h.codec_id == 0x010b0000u);
  CHECK(h.meta_bytes == 0);
  CHECK(h.value_bytes == 8);  // 7 * 9 bits
  REQUIRE(p.size() == 88 + 8);
  // codes 0x07f, 0x180, 0x000, 0x07e, 0x0ff, 0x0fe, 0x100
  const std::uint8_t bytes[] = {0x7f, 0x00, 0x03, 0xf0, 0xf3, 0xcf, 0x1f, 0x40};
  for (std::size_t i = 0; i < 8; ++i) CHECK(std::to_integer<unsigned>(p[88 + i]) == bytes[i]);
}

TEST_CASE("natural: edge cases") {
  SUBCASE("zeros keep their sign") {
    const std::vector<float> x = {0.0f, -0.0f};
    const auto d = test::round_trip(C(), x);
    CHECK(float_bits(d[0]) == 0u);
    CHECK(float_bits(d[1]) == 0x80000000u);
  }
  SUBCASE("subnormals round to 0 or 2^-126, unbiased") {
    const std::vector<float> x = {0x1p-127f, -0x1.8p-130f, std::numeric_limits<float>::denorm_min(), 0x1.fffffcp-127f};
    const std::uint64_t steps = 4000;
    std::vector<double> sum(x.size(), 0.0);
    for (std::uint64_t t = 0; t < steps; ++t) {
      const auto d = test::round_trip(C(), x, t);
      for (std::size_t i = 0; i < x.size(); ++i) {
        REQUIRE((std::abs(d[i]) == 0.0f || std::abs(d[i]) == 0x1p-126f));
        REQUIRE(std::signbit(d[i]) == std::signbit(x[i]));
        sum[i] += d[i];
      }
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double p = std::abs(double(x[i])) / 0x1p-126;
      if (p < 1e-3) continue;  // too rare an event to average over 4000 steps (denorm_min)
      CHECK(std::abs(sum[i] / steps - x[i]) <= 5 * 0x1p-126 * std::sqrt(p * (1 - p) / steps) + 0x1p-16 * 0x1p-126);
    }
  }
  SUBCASE("|x| >= 2^127 saturates to 2^127; no finite value becomes non-finite") {
    const std::vector<float> x = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 0x1p127f, 0x1.8p127f};
    for (std::uint64_t t = 0; t < 50; ++t)
      CHECK(test::round_trip(C(), x, t) == std::vector<float>{0x1p127f, -0x1p127f, 0x1p127f, 0x1p127f});
  }
  SUBCASE("NaN and infinity travel as NaN (the reserved code)") {
    const std::vector<float> x = {quiet_nan, infinity, -infinity, 3.0f};
    const auto d = test::round_trip(C(), x);
    CHECK(std::isnan(d[0]));
    CHECK(std::isnan(d[1]));
    CHECK(std::isnan(d[2]));
    CHECK((d[3] == 2.0f || d[3] == 4.0f));
    // A strict receiver rejects the frame; a strict sender refuses the gradient.
    const C strict({.allow_non_finite = false});
    std::vector<float> out(4, 5.0f);
    CHECK(strict.decompress<float>(test::compress_at(C(), x), out).code() == errc::non_finite_value);
    CHECK(out == std::vector<float>(4, 5.0f));
    state st = strict.make_state(4);
    std::vector<std::byte> payload(strict.max_payload_bytes<float>(4));
    CHECK(strict.compress<float>(x, st, payload).error().code() == errc::non_finite_value);
  }
}

TEST_CASE("natural: after top-k, only the kept values are rounded") {
  using K = test::with_quantizer<natural, sparsify::topk>;
  const K comp({.sparsify = {.density = 0.1}});
  const auto x = test::heavy_tailed(1000, 8);
  const auto p = test::compress_at(comp, x);
  const auto h = test::header_of(p);
  CHECK(h.kept_count == 100);
  CHECK(h.meta_bytes == 0);
  CHECK(h.value_bytes == 113);  // ceil(100 * 9 / 8)
  const auto d = test::round_trip(comp, x);
  std::size_t sent = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (d[i] != 0.0f) {
      ++sent;
      const auto n = around(x[i]);
      CHECK((std::abs(double(d[i])) == n.low || std::abs(double(d[i])) == 2 * n.low));
      CHECK(std::signbit(d[i]) == std::signbit(x[i]));
    }
  CHECK(sent == 100);
}

TEST_CASE("natural: error feedback keeps what rounding lost") {
  using F = test::with_quantizer<natural, sparsify::dense, feedback::residual>;
  test::check_feedback_keeps_rounding(F{});
}
