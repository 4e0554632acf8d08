// quantize::fp8_e4m3 / fp8_e5m2: plain casts and power-of-two group scales; error bounds,
// golden bytes, saturation, non-finite inputs and untrusted metadata.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/core/byteio.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/quantize/fp8.hpp>

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
using quantize::fp8_e4m3;
using quantize::fp8_e5m2;

namespace {

constexpr float infinity = std::numeric_limits<float>::infinity();
constexpr float quiet_nan = std::numeric_limits<float>::quiet_NaN();
constexpr float flt_max = std::numeric_limits<float>::max();

// Mantissa bits and exponent bias of the format.
template <class Q>
constexpr int mantissa_bits = Q::e4m3 ? 3 : 2;
template <class Q>
constexpr int bias = Q::e4m3 ? 7 : 15;

template <class Q>
float cast(float x) {
  return Q::e4m3 ? float_from_fp8_e4m3_bits(fp8_e4m3_bits_from_float(x)) : float_from_fp8_e5m2_bits(fp8_e5m2_bits_from_float(x));
}

// The documented scale: the smallest 2^k, k in [-126, 127 - emax], with amax / 2^k <= max.
template <class Q>
double expected_scale(float amax) {
  int k = -126;
  while (k < 127 - Q::emax && double(amax) > std::ldexp(double(Q::max), k)) ++k;
  return std::ldexp(1.0, k);
}

// The documented bound: max(2^-(M+1) |x|, 2^-(bias+M) s) while |x| / s is within the range.
template <class Q>
double bound(float x, double s) {
  return std::max(std::ldexp(std::abs(double(x)), -(mantissa_bits<Q> + 1)), std::ldexp(s, -(bias<Q> + mantissa_bits<Q>)));
}

template <class Q>
void check_bound(const std::vector<float>& x, std::size_t group) {
  const test::with_quantizer<Q> comp({.quantize = {.group = group}});
  const auto p = test::compress_at(comp, x);
  std::vector<float> d(x.size());
  REQUIRE(comp.template decompress<float>(p, d).ok());
  const std::size_t span = group ? group : x.size();
  for (std::size_t g0 = 0; g0 < x.size(); g0 += span) {
    const std::size_t g1 = std::min(x.size(), g0 + span);
    float amax = 0;
    for (std::size_t i = g0; i < g1; ++i) amax = std::max(amax, std::abs(x[i]));
    double s = 1;
    if (group) {
      s = bits_float(load_le<std::uint32_t>(test::meta_of(p, g0 / group, 4)));
      REQUIRE(s == expected_scale<Q>(amax));
    }
    for (std::size_t i = g0; i < g1; ++i) {
      if (std::abs(x[i]) / s > Q::max) continue;  // plain mode beyond the format's range
      REQUIRE_MESSAGE(std::abs(double(x[i]) - d[i]) <= bound<Q>(x[i], s), "element " << i << " group " << group);
      // Scaling by a power of two is exact: the result is the plain cast of x / s, times s.
      REQUIRE(float_bits(d[i]) == float_bits(float(cast<Q>(float(x[i] / s)) * s)));
    }
  }
}

template <class Q>
void check_family() {
  for (float scale : {1e-30f, 1e-3f, 1.0f, 1e3f, 1e30f}) {
    const auto x = test::heavy_tailed(1000, 11, scale);  // 1000: groups of 128 do not divide it
    for (std::size_t group : {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{128}, std::size_t{4096}})
      check_bound<Q>(x, group);
  }
}

std::vector<unsigned> bytes_at(const std::vector<std::byte>& p, std::size_t at, std::size_t n) {
  std::vector<unsigned> v;
  for (std::size_t i = 0; i < n; ++i) v.push_back(std::to_integer<unsigned>(p[at + i]));
  return v;
}

}  // namespace

TEST_CASE("fp8: codec id and traits") {
  CHECK(fp8_e4m3::id == 4);
  CHECK(fp8_e5m2::id == 5);
  CHECK(fp8_e4m3::format_param({}) == 0);
  CHECK(fp8_e4m3::format_param({.group = 1}) == 1);  // scaled groups of 1 differ from plain
  CHECK(fp8_e5m2::format_param({.group = 128}) == ((7u << 12) | 1u));
  CHECK(fp8_e5m2::format_param({.group = 4096}) == ((12u << 12) | 1u));
  CHECK(test::with_quantizer<fp8_e4m3>().codec_id() == 0x01040000u);
  CHECK(test::with_quantizer<fp8_e5m2>({.quantize = {.group = 32}}).codec_id() == 0x01055001u);
  CHECK(fp8_e4m3::group_size({}) == 0);
  CHECK(fp8_e4m3::meta_bytes == 4);
  CHECK_FALSE(fp8_e4m3::unbiased({}));
  CHECK_FALSE(fp8_e4m3::stochastic({.group = 8}));
  CHECK(test::with_quantizer<fp8_e4m3>().validate().ok());
  for (std::size_t bad : {std::size_t{3}, std::size_t{100}, std::size_t{8192}})
    CHECK(test::with_quantizer<fp8_e5m2>({.quantize = {.group = bad}}).validate().code() == errc::invalid_argument);
}

TEST_CASE("fp8: error within the documented bound, plain and scaled, heavy-tailed data") {
  check_family<fp8_e4m3>();
  check_family<fp8_e5m2>();
}

TEST_CASE("fp8: every finite code round-trips exactly, plain and scaled") {
  const auto check = [](auto q, auto from_bits) {
    using Q = decltype(q);
    std::vector<float> x;
    for (unsigned c = 0; c < 256; ++c)
      if (std::isfinite(from_bits(std::uint8_t(c)))) x.push_back(from_bits(std::uint8_t(c)));
    for (std::size_t group : {std::size_t{0}, std::size_t{256}}) {
      const auto d = test::round_trip(test::with_quantizer<Q>({.quantize = {.group = group}}), x);
      for (std::size_t i = 0; i < x.size(); ++i) CHECK(float_bits(d[i]) == float_bits(x[i]));
    }
  };
  check(fp8_e4m3{}, float_from_fp8_e4m3_bits);
  check(fp8_e5m2{}, float_from_fp8_e5m2_bits);
}

TEST_CASE("fp8: golden bytes") {
  SUBCASE("e4m3 plain") {
    const test::with_quantizer<fp8_e4m3> comp;
    const auto p = test::compress_at(comp, {1.0f, -2.0f, 0.1f, 448.0f, 1000.0f, infinity, quiet_nan, 1e-3f});
    const auto h = test::header_of(p);
    CHECK(h.codec_id == 0x01040000u);
    CHECK(h.meta_bytes == 0);
    REQUIRE(p.size() == 88 + 8);
    CHECK(bytes_at(p, 88, 8) == std::vector<unsigned>{0x38, 0xc0, 0x1d, 0x7e, 0x7e, 0x7f, 0x7f, 0x01});
  }
  SUBCASE("e5m2 plain") {
    const test::with_quantizer<fp8_e5m2> comp;
    const auto p = test::compress_at(comp, {1.0f, -2.0f, 0.1f, 57344.0f, 61440.0f, -infinity, quiet_nan, 1e-5f});
    REQUIRE(p.size() == 88 + 8);
    CHECK(bytes_at(p, 88, 8) == std::vector<unsigned>{0x3c, 0xc0, 0x2e, 0x7b, 0x7c, 0xfc, 0x7e, 0x01});
  }
  SUBCASE("e4m3 scaled, groups of 4") {
    const test::with_quantizer<fp8_e4m3> comp({.quantize = {.group = 4}});
    const auto p = test::compress_at(comp, {1.0f, -3.0f, 0.25f, 100.0f, 5e-3f});
    const auto h = test::header_of(p);
    CHECK(h.codec_id == 0x01042001u);
    CHECK(h.meta_bytes == 8);
    REQUIRE(p.size() == 88 + 8 + 8);
    CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(0.25f));  // 100 / 0.25 = 400 <= 448
    CHECK(load_le<std::uint32_t>(p.data() + 92) == float_bits(0x1p-16f));
    // 4, -12, 1, 400 -> 384 (tie to even), 327.68 -> 320
    CHECK(bytes_at(p, 96, 8) == std::vector<unsigned>{0x48, 0xd4, 0x38, 0x7c, 0x7a, 0, 0, 0});
    const auto d = test::round_trip(comp, {1.0f, -3.0f, 0.25f, 100.0f, 5e-3f});
    CHECK(d == std::vector<float>{1.0f, -3.0f, 0.25f, 96.0f, 320 * 0x1p-16f});
  }
  SUBCASE("e5m2 scaled, groups of 4") {
    const test::with_quantizer<fp8_e5m2> comp({.quantize = {.group = 4}});
    const auto p = test::compress_at(comp, {1.0f, -3.0f, 0.25f, 100.0f, 5e-3f});
    REQUIRE(p.size() == 88 + 8 + 8);
    CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(0x1p-9f));  // 100 * 512 = 51200 <= 57344
    CHECK(load_le<std::uint32_t>(p.data() + 92) == float_bits(0x1p-23f));
    CHECK(bytes_at(p, 96, 8) == std::vector<unsigned>{0x60, 0xe6, 0x58, 0x7a, 0x79, 0, 0, 0});
  }
}

TEST_CASE("fp8: plain e4m3 saturates finite overflow, plain e5m2 overflows to infinity") {
  const std::vector<float> x = {448.0f, 464.0f, 465.0f, 500.0f, 1e30f, -1e30f, flt_max, 61439.0f, 61440.0f};
  const auto d4 = test::round_trip(test::with_quantizer<fp8_e4m3>(), x);
  CHECK(d4 == std::vector<float>{448, 448, 448, 448, 448, -448, 448, 448, 448});
  const auto d5 = test::round_trip(test::with_quantizer<fp8_e5m2>(), x);
  CHECK(d5 == std::vector<float>{448, 448, 448, 512, infinity, -infinity, infinity, 57344, infinity});
}

TEST_CASE("fp8: edge cases") {
  const auto both = [](auto check) {
    check(fp8_e4m3{});
    check(fp8_e5m2{});
  };
  SUBCASE("zeros decode to zeros with their sign, plain and scaled") {
    both([](auto q) {
      using Q = decltype(q);
      std::vector<float> x(20, 0.0f);
      x[3] = -0.0f;
      for (std::size_t group : {std::size_t{0}, std::size_t{8}}) {
        const auto d = test::round_trip(test::with_quantizer<Q>({.quantize = {.group = group}}), x);
        for (std::size_t i = 0; i < x.size(); ++i) CHECK(float_bits(d[i]) == float_bits(x[i]));
      }
    });
  }
  SUBCASE("a huge value takes its group's range, other groups unharmed") {
    both([](auto q) {
      using Q = decltype(q);
      auto x = test::heavy_tailed(24, 3);
      x[3] = 1e30f;
      const auto d = test::round_trip(test::with_quantizer<Q>({.quantize = {.group = 8}}), x);
      CHECK(std::abs(d[3] - 1e30f) <= std::ldexp(1e30f, -(mantissa_bits<Q> + 1)));
      for (std::size_t i = 0; i < 8; ++i) CHECK(std::abs(double(d[i]) - x[i]) <= bound<Q>(x[i], expected_scale<Q>(1e30f)));
      for (std::size_t g0 = 8; g0 < 24; g0 += 8) {
        float amax = 0;
        for (std::size_t i = g0; i < g0 + 8; ++i) amax = std::max(amax, std::abs(x[i]));
        for (std::size_t i = g0; i < g0 + 8; ++i) CHECK(std::abs(double(d[i]) - x[i]) <= bound<Q>(x[i], expected_scale<Q>(amax)));
      }
    });
  }
  SUBCASE("largest floats: no overflow when scaled, beyond 1.75 * 2^127 saturation") {
    both([](auto q) {
      using Q = decltype(q);
      const std::vector<float> x = {flt_max, -flt_max, 1e38f, 0x1.cp127f, 1.0f};
      const auto d = test::round_trip(test::with_quantizer<Q>({.quantize = {.group = 8}}), x);
      CHECK(d[0] == 0x1.cp127f);
      CHECK(d[1] == -0x1.cp127f);
      CHECK(std::abs(d[2] - 1e38f) <= std::ldexp(1e38f, -(mantissa_bits<Q> + 1)));
      CHECK(d[3] == 0x1.cp127f);
      CHECK(d[4] == 0.0f);  // 1 / s is below half the smallest subnormal (s = 2^119 or 2^112)
    });
  }
  SUBCASE("plain: NaN and infinity are carried as the format carries them") {
    const std::vector<float> x = {quiet_nan, infinity, -infinity, 1.0f};
    const auto d4 = test::round_trip(test::with_quantizer<fp8_e4m3>(), x);
    CHECK(std::isnan(d4[0]));
    CHECK(std::isnan(d4[1]));  // E4M3 has no infinity
    CHECK(std::isnan(d4[2]));
    CHECK(d4[3] == 1.0f);
    const auto d5 = test::round_trip(test::with_quantizer<fp8_e5m2>(), x);
    CHECK(std::isnan(d5[0]));
    CHECK(d5[1] == infinity);
    CHECK(d5[2] == -infinity);
    // A strict receiver rejects a frame carrying them; a strict sender refuses to send them.
    using C = test::with_quantizer<fp8_e4m3>;
    const C strict({.allow_non_finite = false});
    std::vector<float> out(4, 5.0f);
    CHECK(strict.decompress<float>(test::compress_at(C(), x), out).code() == errc::non_finite_value);
    CHECK(out == std::vector<float>(4, 5.0f));
    state st = strict.make_state(4);
    std::vector<std::byte> payload(strict.max_payload_bytes<float>(4));
    CHECK(strict.compress<float>(x, st, payload).error().code() == errc::non_finite_value);
  }
  SUBCASE("scaled: NaN or infinity input gives a non-finite scale and receivers reject the frame") {
    both([](auto q) {
      using Q = decltype(q);
      const test::with_quantizer<Q> comp({.quantize = {.group = 8}});
      for (float bad : {quiet_nan, infinity, -infinity}) {
        auto x = test::heavy_tailed(16, 4);
        x[10] = bad;
        const auto p = test::compress_at(comp, x);
        float amax = 0;
        for (std::size_t i = 0; i < 8; ++i) amax = std::max(amax, std::abs(x[i]));
        CHECK(bits_float(load_le<std::uint32_t>(test::meta_of(p, 0, 4))) == expected_scale<Q>(amax));  // finite group
        CHECK_FALSE(std::isfinite(bits_float(load_le<std::uint32_t>(test::meta_of(p, 1, 4)))));
        std::vector<float> out(16, 5.0f);
        CHECK(comp.template decompress<float>(p, out).code() == errc::non_finite_value);
        CHECK(out == std::vector<float>(16, 5.0f));
      }
    });
  }
}

TEST_CASE("fp8: untrusted metadata is validated before anything is written") {
  const auto run = [](auto q, float largest_ok) {
    using Q = decltype(q);
    using C = test::with_quantizer<Q>;
    const C comp({.quantize = {.group = 8}});
    const auto x = test::heavy_tailed(20, 6);
    const auto good = test::compress_at(comp, x);
    const auto tampered = [&](std::size_t group, float v) {
      auto p = good;
      test::poke<std::uint32_t>(p, frame::header_bytes + 4 * group, float_bits(v));
      frame::seal(p);
      std::vector<float> out(20, 2.0f);
      const status s = comp.template accumulate<float>(p, out);
      if (!s) CHECK(out == std::vector<float>(20, 2.0f));
      return s.code();
    };
    CHECK(tampered(1, -1.0f) == errc::bad_meta);
    CHECK(tampered(1, -0.0f) == errc::bad_meta);
    CHECK(tampered(1, 0.0f) == errc::bad_meta);       // not a power of two
    CHECK(tampered(2, 3.0f) == errc::bad_meta);
    CHECK(tampered(0, 0x1p-127f) == errc::bad_meta);  // subnormal
    CHECK(tampered(0, quiet_nan) == errc::non_finite_value);
    CHECK(tampered(2, infinity) == errc::non_finite_value);
    CHECK(tampered(0, 2 * largest_ok) == errc::non_finite_value);  // max * s overflows
    CHECK(tampered(0, largest_ok) == errc::ok);
    CHECK(tampered(1, 0x1p-126f) == errc::ok);
  };
  run(fp8_e4m3{}, 0x1p119f);
  run(fp8_e5m2{}, 0x1p112f);
}

TEST_CASE("fp8: after top-k, groups run over the kept values") {
  using C = test::with_quantizer<fp8_e4m3, sparsify::topk>;
  const C comp({.sparsify = {.density = 0.1}, .quantize = {.group = 16}});
  const auto x = test::heavy_tailed(1000, 8);
  const auto p = test::compress_at(comp, x);
  const auto h = test::header_of(p);
  CHECK(h.kept_count == 100);
  CHECK(h.meta_bytes == 7 * 4);
  CHECK(h.value_bytes == 100);
  const auto d = test::round_trip(comp, x);
  std::size_t sent = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (d[i] != 0.0f) {
      ++sent;
      // Kept values are the largest: none falls below the normal range of its group.
      CHECK(std::abs(double(d[i]) - x[i]) <= std::ldexp(std::abs(double(x[i])), -4));
    }
  CHECK(sent == 100);
}

TEST_CASE("fp8: error feedback keeps what rounding lost") {
  using C = test::with_quantizer<fp8_e5m2, sparsify::dense, feedback::residual>;
  for (std::size_t group : {std::size_t{0}, std::size_t{32}}) {
    test::check_feedback_keeps_rounding(C({.quantize = {.group = group}}));
  }
}
