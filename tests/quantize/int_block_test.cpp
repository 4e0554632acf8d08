// quantize::int_block: error bounds, unbiased stochastic rounding, packing, golden bytes,
// non-finite inputs and untrusted metadata.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/core/byteio.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/quantize/int_block.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "support/frames.hpp"
#include "support/quantize.hpp"
#include "support/quantizer_contract.hpp"
#include "support/random.hpp"

using namespace gradcomp;
using quantize::int_range;
using quantize::rounding;

namespace {

template <class Q>
void check_bound(const std::vector<float>& x, std::size_t group, rounding round) {
  const test::with_quantizer<Q> comp({.quantize = {.group = group, .round = round}});
  const auto d = test::round_trip(comp, x);
  for (std::size_t g0 = 0; g0 < x.size(); g0 += group) {
    const std::size_t g1 = std::min(x.size(), g0 + group);
    float lo = x[g0], hi = x[g0], amax = 0;
    for (std::size_t i = g0; i < g1; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
      amax = std::max(amax, std::abs(x[i]));
    }
    const float s = Q::asymmetric ? hi / Q::levels - lo / Q::levels : amax / Q::levels;
    const float step_bound = round == rounding::nearest ? s / 2 : s;
    for (std::size_t i = g0; i < g1; ++i)
      REQUIRE_MESSAGE(std::abs(x[i] - d[i]) <= step_bound + std::ldexp(amax, -20), "element " << i << " group " << group);
  }
}

template <class Q>
void check_family() {
  const auto x = test::heavy_tailed(1000, 11);  // 1000: groups of 128 do not divide it
  for (std::size_t group : {std::size_t{1}, std::size_t{4}, std::size_t{128}, std::size_t{4096}})
    for (rounding r : {rounding::nearest, rounding::stochastic}) check_bound<Q>(x, group, r);
}

}  // namespace

TEST_CASE("int_block: codec id and traits") {
  using Q8 = quantize::int_block<8>;
  using A4 = quantize::int_block<4, int_range::asymmetric>;
  CHECK(Q8::format_param({}) == ((7u << 12) | 8u));
  CHECK(A4::format_param({.group = 1024}) == ((10u << 12) | 0x10u | 4u));
  CHECK(test::with_quantizer<Q8>().codec_id() == 0x01067008u);
  CHECK(Q8::meta_bytes == 4);
  CHECK(A4::meta_bytes == 8);
  CHECK_FALSE(Q8::unbiased({}));
  CHECK(Q8::unbiased({.round = rounding::stochastic}));
  for (std::size_t bad : {std::size_t{0}, std::size_t{3}, std::size_t{100}, std::size_t{8192}})
    CHECK(test::with_quantizer<Q8>({.quantize = {.group = bad}}).validate().code() == errc::invalid_argument);
}

TEST_CASE("int_block: error within the documented bound, every width and range") {
  check_family<quantize::int_block<8>>();
  check_family<quantize::int_block<4>>();
  check_family<quantize::int_block<2>>();
  check_family<quantize::int_block<8, int_range::asymmetric>>();
  check_family<quantize::int_block<4, int_range::asymmetric>>();
  check_family<quantize::int_block<2, int_range::asymmetric>>();
}

TEST_CASE("int_block: stochastic rounding is unbiased") {
  const auto x = test::heavy_tailed(256, 5, 1.0f);
  const std::uint64_t steps = 4000;
  const auto check = [&]<class Q>(Q) {
    const test::with_quantizer<Q> comp({.quantize = {.group = 64, .round = rounding::stochastic}});
    const auto mean = test::mean_decoded(comp, x, steps);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::abs(v));
    for (std::size_t i = 0; i < x.size(); ++i) {
      // One draw is within a step s of x, so its standard deviation is at most s / 2.
      float g_max = 0, g_lo = x[i / 64 * 64], g_hi = g_lo;
      for (std::size_t j = i / 64 * 64; j < i / 64 * 64 + 64; ++j) {
        g_max = std::max(g_max, std::abs(x[j]));
        g_lo = std::min(g_lo, x[j]);
        g_hi = std::max(g_hi, x[j]);
      }
      const double s = Q::asymmetric ? (g_hi - g_lo) / Q::levels : g_max / Q::levels;
      REQUIRE_MESSAGE(std::abs(mean[i] - x[i]) <= 5.0 * (s / 2) / std::sqrt(double(steps)) + std::ldexp(amax, -20),
                      "element " << i);
    }
  };
  check(quantize::int_block<8>{});
  check(quantize::int_block<4>{});
  check(quantize::int_block<2>{});
  check(quantize::int_block<4, int_range::asymmetric>{});
}

TEST_CASE("int_block: nearest rounding is deterministic, stochastic depends on seed and step only") {
  const auto x = test::heavy_tailed(3000, 2);
  using C = test::with_quantizer<quantize::int_block<4>>;
  const C near;
  CHECK(test::compress_at(near, x, 0) != test::compress_at(near, x, 1));  // the step is in the header
  const C a({.quantize = {.round = rounding::stochastic}, .seed = 7});
  const C b({.quantize = {.round = rounding::stochastic}, .seed = 8});
  CHECK(test::round_trip(a, x, 3) == test::round_trip(a, x, 3));
  CHECK(test::round_trip(a, x, 3) != test::round_trip(a, x, 4));
  CHECK(test::round_trip(a, x, 3) != test::round_trip(b, x, 3));
}

TEST_CASE("int_block: golden bytes") {
  SUBCASE("int8 symmetric") {
    const test::with_quantizer<quantize::int_block<8>> comp({.quantize = {.group = 4}});
    const auto p = test::compress_at(comp, {1.0f, -2.1f, 0.5f, 4.0f}, 9);
    const auto h = test::header_of(p);
    CHECK(h.codec_id == 0x01062008u);
    CHECK(h.meta_bytes == 4);
    CHECK(h.value_bytes == 4);
    REQUIRE(p.size() == 88 + 8 + 8);
    CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(4.0f / 127.0f));
    CHECK(load_le<std::uint32_t>(p.data() + 92) == 0);  // padding
    const std::uint8_t codes[] = {159, 60, 143, 254, 0, 0, 0, 0};
    for (std::size_t i = 0; i < 8; ++i) CHECK(std::to_integer<unsigned>(p[96 + i]) == codes[i]);
  }
  SUBCASE("int4 symmetric packs two codes per byte, low nibble first") {
    const test::with_quantizer<quantize::int_block<4>> comp({.quantize = {.group = 4}});
    const auto p = test::compress_at(comp, {1.0f, -1.5f, 0.25f, 4.0f, 3.0f});
    REQUIRE(p.size() == 88 + 8 + 8);  // two groups: 8 meta bytes; 5 codes: 3 bytes
    CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(4.0f / 7.0f));
    CHECK(load_le<std::uint32_t>(p.data() + 92) == float_bits(3.0f / 7.0f));
    const std::uint8_t codes[] = {0x49, 0xe7, 0x0e, 0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < 8; ++i) CHECK(std::to_integer<unsigned>(p[96 + i]) == codes[i]);
  }
  SUBCASE("int8 asymmetric") {
    const test::with_quantizer<quantize::int_block<8, int_range::asymmetric>> comp({.quantize = {.group = 4}});
    const auto p = test::compress_at(comp, {-1.0f, 0.0f, 0.9f, 3.0f});
    REQUIRE(p.size() == 88 + 8 + 8);
    CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(3.0f / 255.0f - (-1.0f) / 255.0f));
    CHECK(load_le<std::uint32_t>(p.data() + 92) == float_bits(-1.0f));
    const std::uint8_t codes[] = {0, 64, 121, 255};
    for (std::size_t i = 0; i < 4; ++i) CHECK(std::to_integer<unsigned>(p[96 + i]) == codes[i]);
  }
}

TEST_CASE("int_block: edge cases") {
  using C = test::with_quantizer<quantize::int_block<8>>;
  const C comp({.quantize = {.group = 8}});
  SUBCASE("all zeros decode to zeros") {
    const std::vector<float> zeros(20, 0.0f);
    CHECK(test::round_trip(comp, zeros) == zeros);
  }
  SUBCASE("a single huge value keeps its group's others near zero, other groups unharmed") {
    auto x = test::heavy_tailed(24, 3);
    x[3] = 1e30f;
    const auto d = test::round_trip(comp, x);
    CHECK(d[3] == doctest::Approx(1e30f).epsilon(1e-6));
    for (std::size_t i = 8; i < 24; ++i) CHECK(std::abs(d[i] - x[i]) <= 0.01f * 1e-2f);
  }
  SUBCASE("largest floats do not overflow") {
    const std::vector<float> x = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 1.0f};
    const auto d = test::round_trip(comp, x);
    CHECK(d[0] == doctest::Approx(x[0]).epsilon(1e-6));
    CHECK(d[1] == doctest::Approx(x[1]).epsilon(1e-6));
  }
  SUBCASE("NaN or inf input: the frame carries a non-finite scale and receivers reject it") {
    test::check_non_finite_input<C>({.quantize = {.group = 8}}, {std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::infinity()});
  }
}

TEST_CASE("int_block: untrusted metadata is validated before anything is written") {
  using C = test::with_quantizer<quantize::int_block<4, int_range::asymmetric>>;
  const C comp({.quantize = {.group = 8}});
  const auto x = test::heavy_tailed(20, 6);
  const auto good = test::compress_at(comp, x);
  const auto tampered = [&](std::size_t offset, float v) { return test::decode_tampered(comp, good, offset, float_bits(v), 20); };
  const std::size_t meta = frame::header_bytes;
  CHECK(tampered(meta + 8, -1.0f) == errc::bad_meta);  // group 1 scale negative
  CHECK(tampered(meta + 8, -0.0f) == errc::bad_meta);
  CHECK(tampered(meta, std::numeric_limits<float>::quiet_NaN()) == errc::non_finite_value);
  CHECK(tampered(meta + 16, std::numeric_limits<float>::infinity()) == errc::non_finite_value);
  CHECK(tampered(meta + 4, std::numeric_limits<float>::infinity()) == errc::non_finite_value);  // lo
  CHECK(tampered(meta, 3e38f) == errc::non_finite_value);  // lo + 15 s overflows
  CHECK(tampered(meta, 0.0f) == errc::ok);                  // scale 0 is a valid (constant) group
}

TEST_CASE("int_block: after top-k, groups run over the kept values") {
  using C = test::with_quantizer<quantize::int_block<8>, sparsify::topk>;
  const C comp({.sparsify = {.density = 0.1}, .quantize = {.group = 16}});
  const auto x = test::heavy_tailed(1000, 8);
  const auto p = test::compress_at(comp, x);
  const auto h = test::header_of(p);
  CHECK(h.kept_count == 100);
  CHECK(h.meta_bytes == 7 * 4);
  CHECK(h.value_bytes == 100);
  const auto d = test::round_trip(comp, x);
  std::size_t sent = 0;
  float kept_max = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (d[i] != 0.0f) {
      ++sent;
      kept_max = std::max(kept_max, std::abs(x[i]));
    }
  CHECK(sent <= 100);
  for (std::size_t i = 0; i < x.size(); ++i)
    if (d[i] != 0.0f) CHECK(std::abs(d[i] - x[i]) <= kept_max / 127 / 2 * 1.0001f);
}

TEST_CASE("int_block: error feedback keeps what rounding lost") {
  using C = test::with_quantizer<quantize::int_block<2>, sparsify::dense, feedback::residual>;
  test::check_feedback_keeps_rounding(C({.quantize = {.group = 32}}));
}
