// quantize::sign: golden bytes, the scale is mean |x|, the error identity per group, error
// feedback over many steps, edge cases and untrusted metadata.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/core/byteio.hpp>
#include <gradcomp/core/reduce.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/quantize/sign.hpp>

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

namespace {

constexpr float flt_max = std::numeric_limits<float>::max();

std::vector<float> scales_of(const std::vector<std::byte>& p) {
  std::vector<float> s(test::header_of(p).meta_bytes / 4);
  for (std::size_t q = 0; q < s.size(); ++q) s[q] = quantize::sign::load_meta(test::meta_of(p, q, 4)).scale;
  return s;
}

}  // namespace

TEST_CASE("sign: codec id and traits") {
  using quantize::sign;
  CHECK(sign::bits == 1);
  CHECK(sign::format_param({}) == (7u << 12));
  CHECK(sign::format_param({.group = 1}) == 0);
  CHECK(test::with_quantizer<sign>().codec_id() == 0x01097000u);
  CHECK(sign::meta_bytes == 4);
  CHECK_FALSE(sign::unbiased({}));
  CHECK_FALSE(sign::stochastic({}));
  CHECK_FALSE(sign::summable);
  for (std::size_t bad : {std::size_t{0}, std::size_t{3}, std::size_t{100}, std::size_t{8192}})
    CHECK(test::with_quantizer<sign>({.quantize = {.group = bad}}).validate().code() == errc::invalid_argument);
}

TEST_CASE("sign: golden bytes") {
  // Groups of 8: mean |x| = 21/8 and (0.5 + 1.5)/2; bit 1 = negative, 8 codes per byte, LSB first.
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, -4.0f, 0.0f, -0.0f, 5.0f, -6.0f, 0.5f, -1.5f};
  const test::with_quantizer<quantize::sign> comp({.quantize = {.group = 8}});
  const auto p = test::compress_at(comp, x, 4);
  const auto h = test::header_of(p);
  CHECK(h.codec_id == 0x01093000u);
  CHECK(h.meta_bytes == 8);
  CHECK(h.value_bytes == 2);
  REQUIRE(p.size() == 88 + 8 + 8);
  CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(2.625f));
  CHECK(load_le<std::uint32_t>(p.data() + 92) == float_bits(1.0f));
  const std::uint8_t codes[] = {0x8a, 0x02, 0, 0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < 8; ++i) CHECK(std::to_integer<unsigned>(p[96 + i]) == codes[i]);
  const auto d = test::round_trip(comp, x, 4);
  const std::vector<float> expect = {2.625f, -2.625f, 2.625f, -2.625f, 2.625f, 2.625f, 2.625f, -2.625f, 1.0f, -1.0f};
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(float_bits(d[i]) == float_bits(expect[i]));  // zeros decode as +
  CHECK(test::compress_at(comp, x, 4) == p);  // deterministic
}

TEST_CASE("sign: the scale is mean |x| and the error is ||v||^2 - ||v||_1^2 / n per group") {
  const auto x = test::heavy_tailed(1000, 13);  // 1000: the last group of 128 is shorter
  for (std::size_t group : {std::size_t{1}, std::size_t{8}, std::size_t{128}, std::size_t{4096}}) {
    const test::with_quantizer<quantize::sign> comp({.quantize = {.group = group}});
    const auto p = test::compress_at(comp, x);
    const auto scales = scales_of(p);
    const auto d = test::round_trip(comp, x);
    for (std::size_t g0 = 0, q = 0; g0 < x.size(); g0 += group, ++q) {
      const std::size_t n = std::min(group, x.size() - g0);
      // The documented order, bit for bit, and close to the exact mean.
      const float tree = tree_sum(x.data() + g0, n, [](float v) { return std::abs(v); }) / static_cast<float>(n);
      CHECK(float_bits(scales[q]) == float_bits(tree));
      double l1 = 0, l2 = 0, err = 0;
      for (std::size_t i = g0; i < g0 + n; ++i) {
        l1 += std::abs(x[i]);
        l2 += double(x[i]) * x[i];
        err += (double(d[i]) - x[i]) * (double(d[i]) - x[i]);
        REQUIRE(d[i] == (x[i] < 0 ? -scales[q] : scales[q]));
      }
      CHECK(scales[q] == doctest::Approx(l1 / double(n)).epsilon(1e-6));
      CHECK(err == doctest::Approx(l2 - l1 * l1 / double(n)).epsilon(1e-5).scale(1e-6 * l2));
      CHECK(err <= (1 - 1 / double(n)) * l2 * (1 + 1e-6) + 1e-30);
    }
  }
}

TEST_CASE("sign: with error feedback the residual stays bounded and nothing is lost") {
  using C = test::with_quantizer<quantize::sign, sparsify::dense, feedback::residual>;
  const std::size_t group = 64, n = 1000, groups = (n + group - 1) / group;
  const C comp({.quantize = {.group = group}});
  state st = comp.make_state(n);
  std::vector<double> sent(n, 0.0), total(n, 0.0), g_norm_max(groups, 0.0);
  std::vector<std::byte> payload(comp.max_payload_bytes<float>(n));
  for (std::uint32_t step = 0; step < 100; ++step) {
    // A fixed direction plus fresh noise, like gradients of consecutive steps.
    auto g = test::heavy_tailed(n, 100);
    const auto noise = test::heavy_tailed(n, 200 + step);
    for (std::size_t i = 0; i < n; ++i) g[i] += noise[i];
    const std::vector<float> e = st.residual;
    REQUIRE(comp.compress<float>(g, st, payload).ok());
    std::vector<float> d(n, 0.0f);
    REQUIRE(comp.decompress<float>(payload, d).ok());
    for (std::size_t i = 0; i < n; ++i) {
      sent[i] += d[i];
      total[i] += g[i];
    }
    for (std::size_t q = 0; q < groups; ++q) {
      const std::size_t g0 = q * group, g1 = std::min(n, g0 + group), m = g1 - g0;
      double x2 = 0, g2 = 0, e2 = 0;
      for (std::size_t i = g0; i < g1; ++i) {
        const double x = g[i] + e[i];  // what was compressed
        x2 += x * x;
        g2 += double(g[i]) * g[i];
        e2 += double(st.residual[i]) * st.residual[i];
      }
      g_norm_max[q] = std::max(g_norm_max[q], std::sqrt(g2));
      // Each step contracts: ||e'|| <= c ||g + e||, c = sqrt(1 - 1/m); so ||e|| never exceeds
      // c / (1 - c) times the largest ||g|| seen.
      const double c = std::sqrt(1 - 1 / double(m));
      INFO("step " << step << " group " << q);
      CHECK(e2 <= c * c * x2 * (1 + 1e-5));
      CHECK(std::sqrt(e2) <= c / (1 - c) * g_norm_max[q] * (1 + 1e-5));
    }
  }
  // Everything not sent is in the residual: sent + residual == sum of gradients (to float rounding).
  for (std::size_t i = 0; i < n; ++i)
    CHECK(sent[i] + st.residual[i] == doctest::Approx(total[i]).epsilon(1e-4).scale(1e-3));
}

TEST_CASE("sign: edge cases") {
  using C = test::with_quantizer<quantize::sign>;
  const C comp({.quantize = {.group = 8}});
  SUBCASE("all zeros decode to +0") {
    const std::vector<float> zeros = {0.0f, -0.0f, 0.0f};
    const auto d = test::round_trip(comp, zeros);
    for (float v : d) CHECK(float_bits(v) == 0u);
  }
  SUBCASE("a single huge value sets its own group's scale only") {
    auto x = test::heavy_tailed(24, 3);
    x[3] = -1e30f;
    const auto scales = scales_of(test::compress_at(comp, x));
    CHECK(scales[0] == doctest::Approx(1e30 / 8).epsilon(1e-6));
    CHECK(scales[1] < 1.0f);
    CHECK(scales[2] < 1.0f);
  }
  SUBCASE("largest floats: the sum overflows, the mean does not") {
    const std::vector<float> all(8, -flt_max);
    CHECK(scales_of(test::compress_at(comp, all))[0] == flt_max);
    CHECK(test::round_trip(comp, all) == all);
    const std::vector<float> mixed = {flt_max, -flt_max, 1.0f, flt_max, 0.0f, 3e38f, 1e-3f, 2e38f};
    const double mean = (3.0 * flt_max + 1.0 + 3e38 + 1e-3 + 2e38) / 8;
    CHECK(scales_of(test::compress_at(comp, mixed))[0] == doctest::Approx(mean).epsilon(1e-6));
  }
  SUBCASE("NaN or inf input: the frame carries a non-finite scale and receivers reject it") {
    test::check_non_finite_input<C>({.quantize = {.group = 8}}, {std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()});
  }
}

TEST_CASE("sign: untrusted metadata is validated before anything is written") {
  using C = test::with_quantizer<quantize::sign>;
  const C comp({.quantize = {.group = 8}});
  test::check_untrusted_scales(comp);
}

TEST_CASE("sign: after top-k, groups run over the kept values") {
  using C = test::with_quantizer<quantize::sign, sparsify::topk>;
  const C comp({.sparsify = {.density = 0.1}, .quantize = {.group = 16}});
  const auto x = test::heavy_tailed(1000, 8);
  const auto p = test::compress_at(comp, x);
  const auto h = test::header_of(p);
  CHECK(h.kept_count == 100);
  CHECK(h.meta_bytes == 7 * 4);
  CHECK(h.value_bytes == 13);
  const auto scales = scales_of(p);
  const auto d = test::round_trip(comp, x);
  std::size_t sent = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (d[i] != 0.0f) {
      ++sent;
      CHECK(std::signbit(d[i]) == std::signbit(x[i]));
      CHECK(std::find(scales.begin(), scales.end(), std::abs(d[i])) != scales.end());
    }
  CHECK(sent == 100);
}
