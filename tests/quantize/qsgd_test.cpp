// quantize::qsgd: unbiasedness, the variance bound per bucket, golden bytes, edge cases,
// untrusted metadata, groups that do not divide the chunk, and qsgd after top-k.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/core/byteio.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/quantize/qsgd.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "support/frames.hpp"
#include "support/quantize.hpp"
#include "support/random.hpp"

using namespace gradcomp;

namespace {

constexpr float flt_max = std::numeric_limits<float>::max();

double norm_of(const std::vector<float>& x, std::size_t begin, std::size_t end) {
  double s = 0;
  for (std::size_t i = begin; i < end; ++i) s += double(x[i]) * x[i];
  return std::sqrt(s);
}

// The norms a frame carries, one per group.
template <class Q>
std::vector<float> norms_of(const std::vector<std::byte>& p) {
  const auto h = test::header_of(p);
  std::vector<float> norms(h.meta_bytes / 4);
  for (std::size_t q = 0; q < norms.size(); ++q) norms[q] = Q::load_meta(test::meta_of(p, q, 4)).norm;
  return norms;
}

// Over `steps` steps, per bucket: the mean squared error against the expectation
// sum (N/s)^2 p(1 - p) (N the frame's norm, p the fraction of |x| s / N) and against the
// paper's bound min(n/s^2, sqrt(n)/s) ||v||^2; `strict` also holds the measured mean to it.
template <class Q>
void check_variance(const std::vector<float>& x, std::size_t group, unsigned levels, std::uint64_t steps, bool strict) {
  const test::with_quantizer<Q> comp({.quantize = {.group = group, .levels = levels}});
  const std::size_t buckets = (x.size() + group - 1) / group;
  std::vector<double> mse(buckets, 0.0);
  std::vector<float> norms;
  for (std::uint64_t t = 0; t < steps; ++t) {
    const auto p = test::compress_at(comp, x, t);
    if (t == 0) norms = norms_of<Q>(p);
    std::vector<float> d(x.size());
    REQUIRE(comp.template decompress<float>(p, d).ok());
    for (std::size_t i = 0; i < x.size(); ++i) mse[i / group] += (double(d[i]) - x[i]) * (double(d[i]) - x[i]);
  }
  const double s = levels;
  for (std::size_t b = 0; b < buckets; ++b) {
    const std::size_t b0 = b * group, b1 = std::min(x.size(), b0 + group), n = b1 - b0;
    const double norm = norm_of(x, b0, b1), step = norms[b] / s;
    CHECK(norms[b] == doctest::Approx(norm).epsilon(1e-6));
    double expected = 0, spread = 0;  // mean and variance of one step's squared error
    for (std::size_t i = b0; i < b1; ++i) {
      const double y = std::abs(x[i]) / step, p = y - std::floor(y);
      expected += step * step * p * (1 - p);
      spread += std::pow(step, 4) * p * (1 - p) * (1 - 2 * p) * (1 - 2 * p);
    }
    const double measured = mse[b] / double(steps);
    const double bound = std::min(double(n) / (s * s), std::sqrt(double(n)) / s) * norm * norm;
    INFO("bucket " << b << " n " << n << " s " << levels << " measured " << measured << " expected " << expected
                   << " bound " << bound);
    CHECK(expected <= bound * (1 + 1e-5));
    CHECK(std::abs(measured - expected) <= 6 * std::sqrt(spread / double(steps)) + 1e-5 * expected + 1e-10 * norm * norm);
    if (strict) CHECK(measured <= bound);
  }
}

}  // namespace

TEST_CASE("qsgd: codec id and traits") {
  using Q4 = quantize::qsgd<>;
  using Q8 = quantize::qsgd<8>;
  CHECK(Q4::bits == 4);
  CHECK(Q4::config{}.levels == 7);
  CHECK(Q8::config{}.levels == 127);
  CHECK(quantize::qsgd<2>::config{}.levels == 1);
  CHECK(Q4::format_param({}) == ((9u << 12) | 7u));
  CHECK(Q8::format_param({.group = 4096, .levels = 100}) == ((12u << 12) | 100u));
  CHECK(test::with_quantizer<Q4>().codec_id() == 0x01079007u);
  CHECK(Q4::meta_bytes == 4);
  CHECK(Q4::unbiased({}));
  CHECK(Q4::stochastic({}));
  CHECK_FALSE(Q4::summable);
  for (std::size_t bad : {std::size_t{0}, std::size_t{3}, std::size_t{100}, std::size_t{8192}})
    CHECK(test::with_quantizer<Q4>({.quantize = {.group = bad}}).validate().code() == errc::invalid_argument);
  for (unsigned bad : {0u, 8u, 4095u})
    CHECK(test::with_quantizer<Q4>({.quantize = {.levels = bad}}).validate().code() == errc::invalid_argument);
  CHECK(test::with_quantizer<Q4>({.quantize = {.levels = 1}}).validate().ok());
  CHECK(test::with_quantizer<Q8>({.quantize = {.levels = 128}}).validate().code() == errc::invalid_argument);
}

TEST_CASE("qsgd: unbiased") {
  const auto x = test::heavy_tailed(256, 5, 1.0f);
  const std::uint64_t steps = 4000;
  const auto check = [&]<class Q>(Q, unsigned levels) {
    const test::with_quantizer<Q> comp({.quantize = {.group = 64, .levels = levels}});
    const auto mean = test::mean_decoded(comp, x, steps);
    for (std::size_t i = 0; i < x.size(); ++i) {
      // One draw is within a step ||v||/s of x, so its standard deviation is at most half that.
      const double norm = norm_of(x, i / 64 * 64, i / 64 * 64 + 64), step = norm / levels;
      REQUIRE_MESSAGE(std::abs(mean[i] - x[i]) <= 5.0 * (step / 2) / std::sqrt(double(steps)) + std::ldexp(norm, -20),
                      "element " << i << " levels " << levels);
    }
  };
  check(quantize::qsgd<2>{}, 1);
  check(quantize::qsgd<4>{}, 7);
  check(quantize::qsgd<4>{}, 2);
  check(quantize::qsgd<8>{}, 127);
}

TEST_CASE("qsgd: mean squared error per bucket within min(n/s^2, sqrt(n)/s) ||v||^2") {
  // Heavy-tailed values, and equal magnitudes (where the sqrt(n)/s bound is nearly tight).
  for (std::size_t n : {std::size_t{1}, std::size_t{16}, std::size_t{512}, std::size_t{4096}}) {
    const std::size_t size = std::max<std::size_t>(2 * n, 256);
    const auto x = test::heavy_tailed(size, 21);
    std::vector<float> flat(size);
    for (std::size_t i = 0; i < size; ++i) flat[i] = (i % 3 == 0 ? -0.5f : 0.5f);
    for (unsigned s : {1u, 3u, 7u}) {
      check_variance<quantize::qsgd<4>>(x, n, s, 200, true);
      check_variance<quantize::qsgd<4>>(flat, n, s, 200, false);
    }
    check_variance<quantize::qsgd<2>>(x, n, 1, 200, true);
    check_variance<quantize::qsgd<8>>(x, n, 127, 200, true);
    check_variance<quantize::qsgd<8>>(flat, n, 20, 200, false);
  }
  // A last bucket shorter than the others.
  check_variance<quantize::qsgd<4>>(test::heavy_tailed(1000, 22), 512, 7, 200, true);
}

TEST_CASE("qsgd: stochastic rounding depends on seed and step only") {
  const auto x = test::heavy_tailed(3000, 2);
  using C = test::with_quantizer<quantize::qsgd<4>>;
  const C a({.seed = 7});
  const C b({.seed = 8});
  CHECK(test::round_trip(a, x, 3) == test::round_trip(a, x, 3));
  CHECK(test::round_trip(a, x, 3) != test::round_trip(a, x, 4));
  CHECK(test::round_trip(a, x, 3) != test::round_trip(b, x, 3));
}

TEST_CASE("qsgd: golden bytes") {
  // Buckets of 4, s = 5: {3, -4, 0, -0} has norm 5 and exact levels 3, 4, 0, 0; {1, -1, 1, 1}
  // has norm 2 and y = 2.5 (level 2 or 3, drawn); {0.5} has norm 0.5 and level 5.
  const test::with_quantizer<quantize::qsgd<4>> comp({.quantize = {.group = 4, .levels = 5}, .seed = 3});
  const auto p = test::compress_at(comp, {3.0f, -4.0f, 0.0f, -0.0f, 1.0f, -1.0f, 1.0f, 1.0f, 0.5f}, 9);
  const auto h = test::header_of(p);
  CHECK(h.codec_id == 0x01072005u);
  CHECK(h.meta_bytes == 12);
  CHECK(h.value_bytes == 5);
  REQUIRE(p.size() == 88 + 16 + 8);
  CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(5.0f));
  CHECK(load_le<std::uint32_t>(p.data() + 92) == float_bits(2.0f));
  CHECK(load_le<std::uint32_t>(p.data() + 96) == float_bits(0.5f));
  CHECK(load_le<std::uint32_t>(p.data() + 100) == 0);  // padding
  // Sign bit 8 | level, two codes per byte, low nibble first. The drawn levels, recomputed:
  std::uint8_t drawn[4];
  for (std::size_t m = 4; m < 8; ++m)
    drawn[m - 4] = static_cast<std::uint8_t>(2 + (unit_float(random16_at(3, 9, 0, random_stream::quantizer, m)) < 0.5f));
  const std::uint8_t codes[] = {0xc3, 0x80, 0xb2, 0x23, 0x05, 0, 0, 0};
  CHECK(codes[2] == (drawn[0] | (8 | drawn[1]) << 4));
  CHECK(codes[3] == (drawn[2] | drawn[3] << 4));
  for (std::size_t i = 0; i < 8; ++i) CHECK(std::to_integer<unsigned>(p[104 + i]) == codes[i]);
  const auto d = test::round_trip(comp, {3.0f, -4.0f, 0.0f, -0.0f, 1.0f, -1.0f, 1.0f, 1.0f, 0.5f}, 9);
  CHECK(d == std::vector<float>{3.0f, -4.0f, 0.0f, -0.0f, 0.8f, -1.2f, 1.2f, 0.8f, 0.5f});
}

TEST_CASE("qsgd: edge cases") {
  using C = test::with_quantizer<quantize::qsgd<4>>;
  const C comp({.quantize = {.group = 8}});
  SUBCASE("all zeros decode to zeros") {
    const std::vector<float> zeros(20, 0.0f);
    CHECK(test::round_trip(comp, zeros) == zeros);
  }
  SUBCASE("a single huge value keeps its group's others near zero, other groups unharmed") {
    auto x = test::heavy_tailed(24, 3);
    x[3] = -1e30f;
    const auto d = test::round_trip(comp, x);
    CHECK(d[3] == doctest::Approx(-1e30f).epsilon(1e-6));
    for (std::size_t i = 0; i < 8; ++i)
      if (i != 3) CHECK(d[i] == 0.0f);  // y ~ 1e-32: level 1 only if the 16-bit random is 0
    for (std::size_t i = 8; i < 24; ++i)
      CHECK(std::abs(d[i] - x[i]) <= norm_of(x, i / 8 * 8, i / 8 * 8 + 8) / 7 * (1 + 1e-5));
  }
  SUBCASE("huge and tiny groups: the norm neither overflows nor underflows") {
    for (float scale : {1e25f, 1e-30f, 1e-40f}) {
      const auto x = test::heavy_tailed(16, 12, scale);
      const auto p = test::compress_at(comp, x);
      const auto norms = norms_of<quantize::qsgd<4>>(p);
      CHECK(norms[0] == doctest::Approx(norm_of(x, 0, 8)).epsilon(scale < 1e-38f ? 1e-3 : 1e-6));
      CHECK(norms[1] == doctest::Approx(norm_of(x, 8, 16)).epsilon(scale < 1e-38f ? 1e-3 : 1e-6));
      const auto d = test::round_trip(comp, x);
      for (std::size_t i = 0; i < 16; ++i) CHECK(std::abs(d[i] - x[i]) <= norms[i / 8] / 7 * (1 + 1e-5) + 1e-43);
    }
  }
  SUBCASE("largest floats do not overflow") {
    const std::vector<float> x = {flt_max, -flt_max, 1.0f, flt_max};
    const auto d = test::round_trip(comp, x);
    CHECK(d[0] == doctest::Approx(x[0]).epsilon(1e-6));
    CHECK(d[1] == doctest::Approx(x[1]).epsilon(1e-6));
    CHECK(d[3] == doctest::Approx(x[3]).epsilon(1e-6));
    for (unsigned s = 1; s <= 127; ++s) {  // level s decodes finite for every s
      const test::with_quantizer<quantize::qsgd<8>> wide({.quantize = {.group = 8, .levels = s}});
      const auto dw = test::round_trip(wide, x);
      CHECK(dw[0] == doctest::Approx(x[0]).epsilon(1e-6));
    }
  }
  SUBCASE("NaN or inf input: the frame carries a non-finite norm and receivers reject it") {
    test::check_non_finite_input<C>({.quantize = {.group = 8}}, {std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()});
  }
}

TEST_CASE("qsgd: untrusted metadata and codes") {
  const auto x = test::heavy_tailed(20, 6);
  const auto tampered = [&](const auto& comp, std::size_t offset, std::uint32_t v) {
    return test::decode_tampered(comp, test::compress_at(comp, x), offset, v, 20);
  };
  const test::with_quantizer<quantize::qsgd<4>> comp({.quantize = {.group = 8}});
  const std::size_t meta = frame::header_bytes;
  CHECK(tampered(comp, meta + 4, float_bits(-1.0f)) == errc::bad_meta);  // group 1 norm negative
  CHECK(tampered(comp, meta + 4, float_bits(-0.0f)) == errc::bad_meta);
  CHECK(tampered(comp, meta, float_bits(std::numeric_limits<float>::quiet_NaN())) == errc::non_finite_value);
  CHECK(tampered(comp, meta + 8, float_bits(std::numeric_limits<float>::infinity())) == errc::non_finite_value);
  CHECK(tampered(comp, meta, 0) == errc::ok);  // norm 0 is a valid (all-zero) group
  // FLT_MAX: 25 * (FLT_MAX / 25) rounds to infinity, so with s = 25 level s would not decode finite.
  CHECK(std::isinf(25.0f * (flt_max / 25.0f)));
  const test::with_quantizer<quantize::qsgd<8>> s25({.quantize = {.group = 8, .levels = 25}});
  CHECK(tampered(s25, meta, float_bits(flt_max)) == errc::non_finite_value);
  CHECK(tampered(s25, meta, float_bits(flt_max) - 1) == errc::ok);

  SUBCASE("a level above s decodes as s") {
    const test::with_quantizer<quantize::qsgd<4>> s5({.quantize = {.group = 8, .levels = 5}});
    auto p = test::compress_at(s5, x);
    const auto h = test::header_of(p);
    const float norm = quantize::qsgd<4>::load_meta(test::meta_of(p, 0, 4)).norm;
    p[h.value_offset()] = std::byte{0x7f};  // codes 15 (-, level 7) and 7 (+, level 7)
    frame::seal(p);
    std::vector<float> out(20);
    REQUIRE(s5.decompress<float>(p, out).ok());
    CHECK(out[0] == -(5.0f * (norm / 5.0f)));
    CHECK(out[1] == 5.0f * (norm / 5.0f));
  }
}

TEST_CASE("qsgd: a group size that does not divide the chunk") {
  using Q = quantize::qsgd<4>;
  const test::with_quantizer<Q> comp;  // buckets of 512
  const auto x = test::heavy_tailed(1000, 17);
  const auto p = test::compress_at(comp, x);
  CHECK(test::header_of(p).meta_bytes == 8);
  const auto norms = norms_of<Q>(p);
  CHECK(norms[0] == doctest::Approx(norm_of(x, 0, 512)).epsilon(1e-6));
  CHECK(norms[1] == doctest::Approx(norm_of(x, 512, 1000)).epsilon(1e-6));
  const auto d = test::round_trip(comp, x);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::abs(d[i] - x[i]) < norms[i / 512] / 7 * (1 + 1e-5));
}

TEST_CASE("qsgd: after top-k, buckets run over the kept values") {
  using C = test::with_quantizer<quantize::qsgd<4>, sparsify::topk>;
  const C comp({.sparsify = {.density = 0.1}, .quantize = {.group = 16}});
  const auto x = test::heavy_tailed(1000, 8);
  const auto h = test::header_of(test::compress_at(comp, x));
  CHECK(h.kept_count == 100);
  CHECK(h.meta_bytes == 7 * 4);
  CHECK(h.value_bytes == 50);
  // The kept positions: the 100 largest |x|, ascending; buckets of 16 of them.
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return std::abs(x[a]) > std::abs(x[b]); });
  std::vector<std::size_t> kept(order.begin(), order.begin() + 100);
  std::sort(kept.begin(), kept.end());
  std::vector<double> bucket_norm(7, 0.0);
  for (std::size_t m = 0; m < kept.size(); ++m) bucket_norm[m / 16] += double(x[kept[m]]) * x[kept[m]];
  for (auto& b : bucket_norm) b = std::sqrt(b);
  const std::uint64_t steps = 2000;
  const auto mean = test::mean_decoded(comp, x, steps);
  const auto d = test::round_trip(comp, x);
  std::vector<bool> is_kept(x.size(), false);
  for (std::size_t m = 0; m < kept.size(); ++m) {
    const std::size_t i = kept[m];
    is_kept[i] = true;
    const double step = bucket_norm[m / 16] / 7;
    CHECK(std::abs(d[i] - x[i]) < step * (1 + 1e-5));
    CHECK(std::abs(mean[i] - x[i]) <= 5.0 * (step / 2) / std::sqrt(double(steps)) + 1e-6 * step);
  }
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!is_kept[i]) CHECK(d[i] == 0.0f);
}
