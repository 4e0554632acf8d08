// quantize::terngrad: unbiasedness, values in {-s, 0, +s}, the error per group, golden bytes,
// edge cases, untrusted metadata and codes, terngrad after top-k.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/core/byteio.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/quantize/terngrad.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "support/frames.hpp"
#include "support/quantize.hpp"
#include "support/quantizer_contract.hpp"
#include "support/random.hpp"

using namespace gradcomp;
using quantize::terngrad;

namespace {

constexpr float flt_max = std::numeric_limits<float>::max();

float max_abs_of(const std::vector<float>& x, std::size_t begin, std::size_t end) {
  float m = 0;
  for (std::size_t i = begin; i < std::min(end, x.size()); ++i) m = std::max(m, std::abs(x[i]));
  return m;
}

std::vector<float> scales_of(const std::vector<std::byte>& p) {
  std::vector<float> s(test::header_of(p).meta_bytes / 4);
  for (std::size_t q = 0; q < s.size(); ++q) s[q] = terngrad::load_meta(test::meta_of(p, q, 4)).scale;
  return s;
}

}  // namespace

TEST_CASE("terngrad: codec id and traits") {
  CHECK(terngrad::bits == 2);
  CHECK(terngrad::format_param({}) == (7u << 12));
  CHECK(terngrad::format_param({.group = 1024}) == (10u << 12));
  CHECK(test::with_quantizer<terngrad>().codec_id() == 0x01087000u);
  CHECK(terngrad::meta_bytes == 4);
  CHECK(terngrad::unbiased({}));
  CHECK(terngrad::stochastic({}));
  CHECK_FALSE(terngrad::summable);
  for (std::size_t bad : {std::size_t{0}, std::size_t{3}, std::size_t{100}, std::size_t{8192}})
    CHECK(test::with_quantizer<terngrad>({.quantize = {.group = bad}}).validate().code() == errc::invalid_argument);
}

TEST_CASE("terngrad: every value decodes to 0 or +-max|x| of its group, with x's sign") {
  const auto x = test::heavy_tailed(1000, 11);  // 1000: groups of 128 do not divide it
  for (std::size_t group : {std::size_t{1}, std::size_t{4}, std::size_t{128}, std::size_t{4096}}) {
    const test::with_quantizer<terngrad> comp({.quantize = {.group = group}});
    for (std::uint64_t step = 0; step < 4; ++step) {
      const auto p = test::compress_at(comp, x, step);
      const auto scales = scales_of(p);
      std::vector<float> d(x.size());
      REQUIRE(comp.decompress<float>(p, d).ok());
      for (std::size_t i = 0; i < x.size(); ++i) {
        const float s = scales[i / group];
        REQUIRE(s == max_abs_of(x, i / group * group, i / group * group + group));
        REQUIRE((d[i] == 0.0f || d[i] == std::copysign(s, x[i])));
        REQUIRE(std::abs(x[i] - d[i]) <= s);
      }
    }
  }
}

TEST_CASE("terngrad: unbiased, with variance s|x| - x^2 per value") {
  const auto x = test::heavy_tailed(256, 5, 1.0f);
  const std::size_t group = 64;
  const std::uint64_t steps = 4000;
  const test::with_quantizer<terngrad> comp({.quantize = {.group = group}});
  std::vector<double> mean(x.size(), 0.0), sq(x.size(), 0.0);
  for (std::uint64_t t = 0; t < steps; ++t) {
    const auto d = test::round_trip(comp, x, t);
    for (std::size_t i = 0; i < x.size(); ++i) {
      mean[i] += d[i];
      sq[i] += (double(d[i]) - x[i]) * (double(d[i]) - x[i]);
    }
  }
  for (std::size_t g0 = 0; g0 < x.size(); g0 += group) {
    const double s = max_abs_of(x, g0, g0 + group);
    double measured = 0, expected = 0, spread = 0;  // squared error of the group: mean, expectation, variance
    for (std::size_t i = g0; i < g0 + group; ++i) {
      const double p = std::abs(x[i]) / s;
      // One draw is within s of x, so its standard deviation is at most s / 2.
      REQUIRE_MESSAGE(std::abs(mean[i] / double(steps) - x[i]) <= 5.0 * (s / 2) / std::sqrt(double(steps)) + std::ldexp(s, -20),
                      "element " << i);
      measured += sq[i] / double(steps);
      expected += s * std::abs(x[i]) - double(x[i]) * x[i];
      spread += s * s * s * s * p * (1 - p) * (1 - 2 * p) * (1 - 2 * p);
    }
    CHECK(std::abs(measured - expected) <= 6 * std::sqrt(spread / double(steps)) + 1e-5 * expected);
  }
}

TEST_CASE("terngrad: golden bytes") {
  // Groups of 4: {2, -2, 0, -0} has s = 2 and exact codes 1, 3, 0, 2; {1, -1, 0.5, -0.25} has
  // s = 1 and exact codes 1, 3, then drawn with probabilities 1/2 and 1/4.
  const std::vector<float> x = {2.0f, -2.0f, 0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.25f};
  const test::with_quantizer<terngrad> comp({.quantize = {.group = 4}, .seed = 5});
  const auto p = test::compress_at(comp, x, 2);
  const auto h = test::header_of(p);
  CHECK(h.codec_id == 0x01082000u);
  CHECK(h.meta_bytes == 8);
  CHECK(h.value_bytes == 2);
  REQUIRE(p.size() == 88 + 8 + 8);
  CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(2.0f));
  CHECK(load_le<std::uint32_t>(p.data() + 92) == float_bits(1.0f));
  // Bit 0 = magnitude, bit 1 = sign; four codes per byte, lowest bits first.
  const unsigned b6 = unit_float(random16_at(5, 2, 0, random_stream::quantizer, 6)) < 0.5f;
  const unsigned b7 = unit_float(random16_at(5, 2, 0, random_stream::quantizer, 7)) < 0.25f;
  const std::uint8_t codes[] = {0x8d, 0xcd, 0, 0, 0, 0, 0, 0};
  CHECK(codes[1] == (1u | 3u << 2 | b6 << 4 | (2u | b7) << 6));
  for (std::size_t i = 0; i < 8; ++i) CHECK(std::to_integer<unsigned>(p[96 + i]) == codes[i]);
  const auto d = test::round_trip(comp, x, 2);
  CHECK(d == std::vector<float>{2.0f, -2.0f, 0.0f, 0.0f, 1.0f, -1.0f, 0.0f, -1.0f});
}

TEST_CASE("terngrad: edge cases") {
  using C = test::with_quantizer<terngrad>;
  const C comp({.quantize = {.group = 8}});
  SUBCASE("all zeros decode to zeros") {
    const std::vector<float> zeros(20, 0.0f);
    CHECK(test::round_trip(comp, zeros) == zeros);
  }
  SUBCASE("a single huge value keeps its group's others at zero, other groups unharmed") {
    auto x = test::heavy_tailed(24, 3);
    x[3] = -1e30f;
    const auto d = test::round_trip(comp, x);
    CHECK(d[3] == -1e30f);
    for (std::size_t i = 0; i < 8; ++i)
      if (i != 3) CHECK(d[i] == 0.0f);  // p ~ 1e-33: +-s only if the 16-bit random is 0
    for (std::size_t i = 8; i < 24; ++i) CHECK(std::abs(d[i] - x[i]) <= max_abs_of(x, i / 8 * 8, i / 8 * 8 + 8));
  }
  SUBCASE("largest and smallest floats") {
    const std::vector<float> x = {flt_max, -flt_max, 1.0f, 0.0f, 1e-45f, -1e-45f, 1e-45f, 0.0f};
    const auto d = test::round_trip(comp, x);
    CHECK(d[0] == flt_max);
    CHECK(d[1] == -flt_max);
    const test::with_quantizer<terngrad> pairs({.quantize = {.group = 2}});
    const auto dp = test::round_trip(pairs, x);
    CHECK(dp[4] == 1e-45f);  // subnormal scale: 1/s overflows, encode divides instead
    CHECK(dp[5] == -1e-45f);
    CHECK(dp[6] == 1e-45f);
    CHECK(dp[7] == 0.0f);
  }
  SUBCASE("NaN or inf input: the frame carries a non-finite scale and receivers reject it") {
    test::check_non_finite_input<C>({.quantize = {.group = 8}}, {std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::infinity()});
  }
}

TEST_CASE("terngrad: untrusted metadata and codes") {
  using C = test::with_quantizer<terngrad>;
  const C comp({.quantize = {.group = 8}});
  const auto good = test::check_untrusted_scales(comp);

  SUBCASE("all four codes decode: 0 -> +0, 1 -> +s, 2 -> -0, 3 -> -s") {
    auto p = good;
    const auto h = test::header_of(p);
    p[h.value_offset()] = std::byte{0xe4};  // codes 0, 1, 2, 3
    frame::seal(p);
    std::vector<float> out(20);
    REQUIRE(comp.decompress<float>(p, out).ok());
    const float s = scales_of(good)[0];
    CHECK(float_bits(out[0]) == float_bits(0.0f));
    CHECK(out[1] == s);
    CHECK(float_bits(out[2]) == float_bits(-0.0f));
    CHECK(out[3] == -s);
  }
}

TEST_CASE("terngrad: after top-k, groups run over the kept values") {
  using C = test::with_quantizer<terngrad, sparsify::topk>;
  const C comp({.sparsify = {.density = 0.1}, .quantize = {.group = 16}});
  const auto x = test::heavy_tailed(1000, 8);
  const auto p = test::compress_at(comp, x);
  const auto h = test::header_of(p);
  CHECK(h.kept_count == 100);
  CHECK(h.meta_bytes == 7 * 4);
  CHECK(h.value_bytes == 25);
  const auto scales = scales_of(p);
  const auto d = test::round_trip(comp, x);
  float kept_max = 0;
  for (float v : x) kept_max = std::max(kept_max, std::abs(v));
  CHECK(*std::max_element(scales.begin(), scales.end()) == kept_max);
  for (std::size_t i = 0; i < x.size(); ++i)
    if (d[i] != 0.0f) {
      CHECK(std::find(scales.begin(), scales.end(), std::abs(d[i])) != scales.end());
      CHECK(std::signbit(d[i]) == std::signbit(x[i]));
    }
}
