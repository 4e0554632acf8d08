// quantize::piecewise: error bounds per region, the breakpoint search (best among its
// candidates, better than uniform), unbiased stochastic rounding, golden bytes, edge cases,
// untrusted metadata, top-k and error feedback.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/core/byteio.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/quantize/int_block.hpp>
#include <gradcomp/quantize/piecewise.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "support/frames.hpp"
#include "support/quantize.hpp"
#include "support/quantizer_contract.hpp"
#include "support/random.hpp"

using namespace gradcomp;
using quantize::rounding;

namespace {

// Group q's meta as the frame carries it (the receiver's view: derived from M and k).
template <class Q>
typename Q::meta group_meta(const std::vector<std::byte>& payload, std::size_t q) {
  return Q::load_meta(test::meta_of(payload, q, Q::meta_bytes));
}

// The documented allowance for float arithmetic: 2^-20 M + 2^-140.
double eps(double max) { return std::ldexp(max, -20) + std::ldexp(1.0, -140); }

// |x - decoded| within the documented bound: sc/2 in the centre (|x| <= p), st/2 in the tails
// (sc and st for stochastic rounding), plus eps.
template <class Q>
void check_bound(const std::vector<float>& x, std::size_t group, rounding round) {
  const test::with_quantizer<Q> comp({.quantize = {.group = group, .round = round}});
  const auto payload = test::compress_at(comp, x);
  const auto d = test::round_trip(comp, x);
  const double f = round == rounding::nearest ? 0.5 : 1.0;
  for (std::size_t g0 = 0, q = 0; g0 < x.size(); g0 += group, ++q) {
    const std::size_t g1 = std::min(x.size(), g0 + group);
    float amax = 0;
    for (std::size_t i = g0; i < g1; ++i) amax = std::max(amax, std::abs(x[i]));
    const auto m = group_meta<Q>(payload, q);
    REQUIRE(m.max == amax);
    REQUIRE(m.k >= 1);
    REQUIRE(m.k <= 16);
    for (std::size_t i = g0; i < g1; ++i) {
      const double step = std::abs(x[i]) <= m.p ? m.sc : m.st;
      REQUIRE_MESSAGE(std::abs(double(x[i]) - d[i]) <= f * step + eps(amax),
                      "element " << i << " group " << group << " k " << int(m.k));
    }
  }
}

template <class Q>
void check_family() {
  const auto x = test::heavy_tailed(1000, 11);  // 1000: groups of 128 do not divide it
  for (std::size_t group : {std::size_t{1}, std::size_t{4}, std::size_t{128}, std::size_t{4096}})
    for (rounding r : {rounding::nearest, rounding::stochastic}) check_bound<Q>(x, group, r);
  // Huge and subnormal magnitudes.
  for (float scale : {1e35f, std::ldexp(1.0f, -135)})
    for (rounding r : {rounding::nearest, rounding::stochastic})
      check_bound<Q>(test::heavy_tailed(1000, 13, scale), 16, r);
}

// Sum of squared errors over x[g0, g1) with breakpoint index k and nearest rounding, in double.
template <class Q>
double candidate_error(const std::vector<float>& x, std::size_t g0, std::size_t g1, float max, std::uint8_t k) {
  const auto m = Q::derive(max, k);
  double e = 0;
  for (std::size_t i = g0; i < g1; ++i) {
    const double d = double(x[i]) - Q::decode({}, m, Q::encode({}, m, x[i], 0));
    e += d * d;
  }
  return e;
}

// The chosen breakpoint is the best candidate (to float summation), the frame decodes to exactly
// encode/decode with it, and the total error beats uniform quantization with as many bits.
// Returns the error ratio piecewise / uniform.
template <class Q, class Uniform>
double check_search(const std::vector<float>& x, std::size_t group, Uniform uniform) {
  const test::with_quantizer<Q> comp({.quantize = {.group = group, .search = 16}});
  const auto payload = test::compress_at(comp, x);
  const auto d = test::round_trip(comp, x);
  double total = 0, total_uniform = 0;
  for (std::size_t g0 = 0, q = 0; g0 < x.size(); g0 += group, ++q) {
    const std::size_t g1 = std::min(x.size(), g0 + group);
    const auto sent = group_meta<Q>(payload, q);
    const auto m = Q::derive(sent.max, sent.k);  // the sender's meta: encode needs its reciprocals
    for (std::size_t i = g0; i < g1; ++i) REQUIRE(d[i] == Q::decode({}, m, Q::encode({}, m, x[i], 0)));
    const double chosen = candidate_error<Q>(x, g0, g1, m.max, m.k);
    for (std::uint8_t k = 1; k <= 16; ++k) {
      const double other = candidate_error<Q>(x, g0, g1, m.max, k);
      REQUIRE_MESSAGE(chosen <= other * (1 + 1e-5), "group " << q << " chose k " << int(m.k) << " over " << int(k));
    }
    total += chosen;
    total_uniform += uniform(x, g0, g1);
  }
  return total / total_uniform;
}

// Squared error of int_block<B> (symmetric, nearest) over x[g0, g1), through its own encode/decode.
template <unsigned B>
double int_block_error(const std::vector<float>& x, std::size_t g0, std::size_t g1) {
  using I = quantize::int_block<B>;
  const auto m = I::fit({}, x.data() + g0, g1 - g0);
  double e = 0;
  for (std::size_t i = g0; i < g1; ++i) {
    const double d = double(x[i]) - I::decode({}, m, I::encode({}, m, x[i], 0));
    e += d * d;
  }
  return e;
}

// 3-bit symmetric uniform (7 levels, step max|x| / 3), which int_block does not offer.
double uniform3_error(const std::vector<float>& x, std::size_t g0, std::size_t g1) {
  double amax = 0, e = 0;
  for (std::size_t i = g0; i < g1; ++i) amax = std::max(amax, double(std::abs(x[i])));
  const double s = amax / 3;
  for (std::size_t i = g0; i < g1; ++i) {
    const double q = s > 0 ? std::clamp(std::nearbyint(x[i] / s), -3.0, 3.0) * s : 0.0;
    e += (x[i] - q) * (x[i] - q);
  }
  return e;
}

template <class Q>
void check_levels() {
  // Every code decodes to a finite value within [-M, M]; every used code's value encodes back
  // to it (the unused code 2^(Bits-1) - 1 reads as the centre's top level).
  for (float max : {1.0f, 3e-5f, 1e30f, std::numeric_limits<float>::max(), std::ldexp(1.0f, -120)})
    for (std::uint8_t k = 1; k <= 16; ++k) {
      const auto m = Q::derive(max, k);
      REQUIRE(Q::check_meta({}, m).ok());
      for (unsigned c = 0; c < (1u << Q::bits); ++c) {
        const auto code = static_cast<typename Q::code_type>(c);
        const float v = Q::decode({}, m, code);
        REQUIRE(std::isfinite(v));
        REQUIRE(std::abs(v) <= max);
        const unsigned unused = Q::region_codes - 1;
        const unsigned expect = c == unused ? unused - 1 : c;
        REQUIRE_MESSAGE(Q::encode({}, m, v, 0) == expect, "code " << c << " M " << max << " k " << int(k));
      }
      CHECK(Q::decode({}, m, static_cast<typename Q::code_type>(Q::centre_levels)) == 0.0f);
      CHECK(Q::decode({}, m, static_cast<typename Q::code_type>(Q::region_codes + Q::tail_levels - 1)) == max);
      CHECK(Q::decode({}, m, static_cast<typename Q::code_type>((1u << Q::bits) - 1)) == -max);
    }
}

}  // namespace

TEST_CASE("piecewise: codec id and traits") {
  using P4 = quantize::piecewise<>;
  using P3 = quantize::piecewise<3>;
  static_assert(P4::bits == 4 && P4::id == 10 && !P4::summable && P4::meta_bytes == 5);
  CHECK(P4::format_param({}) == ((7u << 12) | 4u));
  CHECK(P3::format_param({.group = 1024}) == ((10u << 12) | 3u));
  CHECK(quantize::piecewise<8>::format_param({.group = 1}) == 8u);
  CHECK(test::with_quantizer<P4>().codec_id() == 0x010a7004u);
  CHECK_FALSE(P4::unbiased({}));
  CHECK(P4::unbiased({.round = rounding::stochastic}));
  CHECK(P4::stochastic({.round = rounding::stochastic}));
  for (std::size_t bad : {std::size_t{0}, std::size_t{3}, std::size_t{100}, std::size_t{8192}})
    CHECK(test::with_quantizer<P4>({.quantize = {.group = bad}}).validate().code() == errc::invalid_argument);
}

TEST_CASE("piecewise: every code decodes within [-M, M] and levels encode back to their code") {
  check_levels<quantize::piecewise<3>>();
  check_levels<quantize::piecewise<4>>();
  check_levels<quantize::piecewise<5>>();
  check_levels<quantize::piecewise<8>>();
}

TEST_CASE("piecewise: error within the documented bound, every width") {
  check_family<quantize::piecewise<3>>();
  check_family<quantize::piecewise<4>>();
  check_family<quantize::piecewise<6>>();
  check_family<quantize::piecewise<8>>();
}

TEST_CASE("piecewise: the breakpoint is the best candidate and beats uniform quantization") {
  const auto x = test::heavy_tailed(1 << 14, 21);
  const double r3 = check_search<quantize::piecewise<3>>(x, 128, uniform3_error);
  const double r4 = check_search<quantize::piecewise<4>>(x, 128, int_block_error<4>);
  const double r8 = check_search<quantize::piecewise<8>>(x, 128, int_block_error<8>);
  MESSAGE("squared error / uniform's, t(3) data, groups of 128: 3 bits " << r3 << ", 4 bits " << r4 << ", 8 bits "
                                                                        << r8);
  CHECK(r3 < 0.6);
  CHECK(r4 < 0.45);
  CHECK(r8 < 0.35);
  // Other group sizes, and a last group shorter than the others.
  const auto y = test::heavy_tailed(3000, 22);
  CHECK(check_search<quantize::piecewise<4>>(y, 32, int_block_error<4>) < 0.6);
  CHECK(check_search<quantize::piecewise<4>>(y, 1024, int_block_error<4>) < 0.45);
  // Gaussian-like data has no tails to speak of: still no worse than uniform.
  std::vector<float> z(4096);
  for (std::size_t i = 0; i < z.size(); ++i) z[i] = static_cast<float>(std::sin(0.37 * double(i)) * 1e-2);
  CHECK(check_search<quantize::piecewise<4>>(z, 128, int_block_error<4>) < 1.0);
}

namespace {
// Total squared error of a compress / decompress round trip with the given search width.
template <class Q>
double total_error(const std::vector<float>& x, std::uint8_t search) {
  const test::with_quantizer<Q> comp({.quantize = {.search = search}});
  const auto d = test::round_trip(comp, x);
  double e = 0;
  for (std::size_t i = 0; i < x.size(); ++i) e += (double(x[i]) - d[i]) * (double(x[i]) - d[i]);
  return e;
}
}  // namespace

TEST_CASE("piecewise: the model-ranked search stays close to the exhaustive one") {
  const auto t3 = test::heavy_tailed(1 << 16, 81);
  std::vector<float> mostly_zero = t3;
  for (std::size_t i = 0; i < mostly_zero.size(); ++i)
    if (i % 5 != 0) mostly_zero[i] = 0.0f;
  for (const std::vector<float>* x : {&t3, static_cast<const std::vector<float>*>(&mostly_zero)}) {
    const double all3 = total_error<quantize::piecewise<3>>(*x, 16), all4 = total_error<quantize::piecewise<4>>(*x, 16);
    const double three3 = total_error<quantize::piecewise<3>>(*x, 3), three4 = total_error<quantize::piecewise<4>>(*x, 3);
    const double one4 = total_error<quantize::piecewise<4>>(*x, 1);
    MESSAGE("error / exhaustive search's: 3 bits " << three3 / all3 << ", 4 bits " << three4 / all4
                                                   << "; model alone (search 1), 4 bits " << one4 / all4);
    CHECK(three3 >= all3);
    CHECK(three4 >= all4);
    CHECK(three3 <= 1.10 * all3);
    CHECK(three4 <= 1.10 * all4);
    CHECK(one4 >= three4 * (1 - 1e-9));
  }
  const test::with_quantizer<quantize::piecewise<4>> bad({.quantize = {.search = 0}});
  CHECK(bad.validate().code() == errc::invalid_argument);
  const test::with_quantizer<quantize::piecewise<4>> too_wide({.quantize = {.search = 17}});
  CHECK(too_wide.validate().code() == errc::invalid_argument);
}

TEST_CASE("piecewise: stochastic rounding is unbiased") {
  const auto x = test::heavy_tailed(256, 5, 1.0f);
  const std::uint64_t steps = 4000;
  const auto check = [&]<class Q>(Q) {
    const test::with_quantizer<Q> comp({.quantize = {.group = 64, .round = rounding::stochastic}});
    const auto payload = test::compress_at(comp, x);
    const auto mean = test::mean_decoded(comp, x, steps);
    for (std::size_t i = 0; i < x.size(); ++i) {
      // The breakpoint depends only on the values, so every step has the same meta. One draw
      // is within a step of x, so its standard deviation is at most step / 2.
      const auto m = group_meta<Q>(payload, i / 64);
      const double step = std::abs(x[i]) <= m.p ? m.sc : m.st;
      REQUIRE_MESSAGE(std::abs(mean[i] - x[i]) <= 5.0 * (step / 2) / std::sqrt(double(steps)) + eps(m.max),
                      "element " << i);
    }
  };
  check(quantize::piecewise<3>{});
  check(quantize::piecewise<4>{});
  check(quantize::piecewise<8>{});
}

TEST_CASE("piecewise: nearest rounding is deterministic, stochastic depends on seed and step only") {
  const auto x = test::heavy_tailed(3000, 2);
  using C = test::with_quantizer<quantize::piecewise<4>>;
  const C near;
  CHECK(test::round_trip(near, x, 0) == test::round_trip(near, x, 1));
  const C a({.quantize = {.round = rounding::stochastic}, .seed = 7});
  const C b({.quantize = {.round = rounding::stochastic}, .seed = 8});
  CHECK(test::round_trip(a, x, 3) == test::round_trip(a, x, 3));
  CHECK(test::round_trip(a, x, 3) != test::round_trip(a, x, 4));
  CHECK(test::round_trip(a, x, 3) != test::round_trip(b, x, 3));
}

TEST_CASE("piecewise: golden bytes") {
  SUBCASE("4 bits: two codes per byte, low nibble first") {
    // x = {-16, 0, 2, 4}, M = 16, candidates p = k / 2. L = 3, T = 4. k = 12 (p = 6) is the
    // smallest with zero error: centre step sc = 2 holds 0, 2, 4; tail step st = (16 - 6) / 4
    // = 2.5 gives 8.5, 11, 13.5, 16. (p = 4 misses 2; below p = 4 the value 4 falls between
    // levels, since no tail level can be 4.) Codes: -16: tail, negative, j = 0 -> 8|4|3 = 15;
    // 0: q = 0 -> 3; 2: q = 1 -> 4; 4: q = 2 -> 5. Bytes 0x3f, 0x54.
    const test::with_quantizer<quantize::piecewise<4>> comp({.quantize = {.group = 4, .search = 16}});
    const auto p = test::compress_at(comp, {-16.0f, 0.0f, 2.0f, 4.0f}, 9);
    const auto h = test::header_of(p);
    CHECK(h.codec_id == 0x010a2004u);
    CHECK(h.meta_bytes == 5);
    CHECK(h.value_bytes == 2);
    REQUIRE(p.size() == 88 + 8 + 8);
    CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(16.0f));
    CHECK(std::to_integer<unsigned>(p[92]) == 12);
    for (std::size_t i = 93; i < 96; ++i) CHECK(std::to_integer<unsigned>(p[i]) == 0);  // padding
    const std::uint8_t codes[] = {0x3f, 0x54, 0, 0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < 8; ++i) CHECK(std::to_integer<unsigned>(p[96 + i]) == codes[i]);
    CHECK(test::round_trip(comp, {-16.0f, 0.0f, 2.0f, 4.0f}) == std::vector<float>{-16.0f, 0.0f, 2.0f, 4.0f});
  }
  SUBCASE("3 bits: codes cross byte boundaries; a one-value group ties at every p") {
    // Group 0: x = {8, -2, 0, 5}, M = 8, p = k / 4, L = 1, T = 2: levels 0, +-p, +-(4 + p/2),
    // +-8. k = 8 (p = 2) is exact (0, 2, 5, 8) and no smaller p holds 2. Codes: 8: tail j = 0
    // -> 4|0|1 = 5; -2: q = -1 -> 0; 0 -> 1; 5: tail j = 1 -> 4|0|0 = 4.
    // Group 1: x = {-0.75}, M = 0.75: -M is exact for every p, so k = 1; code 4|2|1 = 7.
    // Packed: 5 | 0 << 3 | 1 << 6 | 4 << 9 | 7 << 12 = 0x7845.
    const test::with_quantizer<quantize::piecewise<3>> comp({.quantize = {.group = 4, .search = 16}});
    const std::vector<float> x = {8.0f, -2.0f, 0.0f, 5.0f, -0.75f};
    const auto p = test::compress_at(comp, x);
    const auto h = test::header_of(p);
    CHECK(h.codec_id == 0x010a2003u);
    CHECK(h.meta_bytes == 10);
    CHECK(h.value_bytes == 2);
    REQUIRE(p.size() == 88 + 16 + 8);
    CHECK(load_le<std::uint32_t>(p.data() + 88) == float_bits(8.0f));
    CHECK(std::to_integer<unsigned>(p[92]) == 8);
    CHECK(load_le<std::uint32_t>(p.data() + 93) == float_bits(0.75f));
    CHECK(std::to_integer<unsigned>(p[97]) == 1);
    const std::uint8_t codes[] = {0x45, 0x78, 0, 0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < 8; ++i) CHECK(std::to_integer<unsigned>(p[104 + i]) == codes[i]);
    CHECK(test::round_trip(comp, x) == x);
  }
}

TEST_CASE("piecewise: edge cases") {
  using C = test::with_quantizer<quantize::piecewise<4>>;
  const C comp({.quantize = {.group = 8}});
  SUBCASE("all zeros decode to zeros") {
    const std::vector<float> zeros(20, 0.0f);
    CHECK(test::round_trip(comp, zeros) == zeros);
  }
  SUBCASE("a single huge value is exact, the rest of its group decodes to 0, other groups unharmed") {
    auto x = test::heavy_tailed(24, 3);
    x[3] = 1e30f;
    const auto p = test::compress_at(comp, x);
    const auto d = test::round_trip(comp, x);
    CHECK(d[3] == 1e30f);
    for (std::size_t i = 0; i < 8; ++i)
      if (i != 3) CHECK(d[i] == 0.0f);
    using Q = quantize::piecewise<4>;
    for (std::size_t i = 8; i < 24; ++i) CHECK(std::abs(d[i] - x[i]) <= group_meta<Q>(p, i / 8).st);
  }
  SUBCASE("all equal values are exact (M is a level)") {
    for (float v : {0.3f, -0.3f, 7e-20f}) {
      const std::vector<float> x(20, v);
      CHECK(test::round_trip(comp, x) == x);
    }
    std::vector<float> x(20, 2.5f);
    for (std::size_t i = 0; i < x.size(); i += 3) x[i] = -2.5f;
    CHECK(test::round_trip(comp, x) == x);
  }
  SUBCASE("largest floats do not overflow") {
    const float big = std::numeric_limits<float>::max();
    const std::vector<float> x = {big, -big, 1.0f, big / 3};
    const auto d = test::round_trip(comp, x);
    CHECK(d[0] == big);
    CHECK(d[1] == -big);
    CHECK(d[2] == 0.0f);
    CHECK(std::abs(double(d[3]) - double(big) / 3) <= double(big) / 8);  // within half a tail step (<= M / 8 at 4 bits)
  }
  SUBCASE("subnormal groups stay finite and within M") {
    const std::vector<float> x = {1e-40f, -3e-41f, 0.0f, 1e-45f, 5e-39f, -5e-39f, 2e-39f, 1e-42f};
    const auto d = test::round_trip(comp, x);
    for (std::size_t i = 0; i < x.size(); ++i) {
      CHECK(std::isfinite(d[i]));
      CHECK(std::abs(d[i]) <= 5e-39f);
      CHECK(std::abs(d[i] - x[i]) <= 5e-39f / 2);
    }
  }
  SUBCASE("NaN or inf input: the frame carries a non-finite M and receivers reject it") {
    test::check_non_finite_input<C>({.quantize = {.group = 8}}, {std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()});
  }
}

TEST_CASE("piecewise: untrusted metadata is validated before anything is written") {
  using C = test::with_quantizer<quantize::piecewise<4>>;
  const C comp({.quantize = {.group = 8}});
  const auto x = test::heavy_tailed(20, 6);
  const auto good = test::compress_at(comp, x);
  const auto decode = [&](const std::vector<std::byte>& p) {
    std::vector<float> out(20, 2.0f);
    const status s = comp.accumulate<float>(p, out);
    if (!s) CHECK(out == std::vector<float>(20, 2.0f));
    return s.code();
  };
  const auto tampered_max = [&](std::size_t group, float v) {
    auto p = good;
    test::poke<std::uint32_t>(p, frame::header_bytes + 5 * group, float_bits(v));
    frame::seal(p);
    return decode(p);
  };
  const auto tampered_k = [&](std::size_t group, std::uint8_t k) {
    auto p = good;
    test::poke<std::uint8_t>(p, frame::header_bytes + 5 * group + 4, k);
    frame::seal(p);
    return decode(p);
  };
  CHECK(decode(good) == errc::ok);
  CHECK(tampered_max(1, -1.0f) == errc::bad_meta);  // M negative
  CHECK(tampered_max(1, -0.0f) == errc::bad_meta);
  CHECK(tampered_max(0, std::numeric_limits<float>::quiet_NaN()) == errc::non_finite_value);
  CHECK(tampered_max(2, std::numeric_limits<float>::infinity()) == errc::non_finite_value);
  CHECK(tampered_k(0, 0) == errc::bad_meta);    // p = 0 with M > 0
  CHECK(tampered_k(1, 17) == errc::bad_meta);   // no candidate
  CHECK(tampered_k(2, 255) == errc::bad_meta);  // p > M
  CHECK(tampered_k(2, 16) == errc::ok);         // another candidate: a valid (if worse) frame
  CHECK(tampered_max(0, 0.0f) == errc::ok);     // M = 0: a group of zeros
  CHECK(tampered_max(0, std::numeric_limits<float>::max()) == errc::ok);  // large M still decodes finite
}

TEST_CASE("piecewise: after top-k, groups run over the kept values") {
  using Q = quantize::piecewise<4>;
  using C = test::with_quantizer<Q, sparsify::topk>;
  const C comp({.sparsify = {.density = 0.1}, .quantize = {.group = 16}});
  const auto x = test::heavy_tailed(1000, 8);
  const auto p = test::compress_at(comp, x);
  const auto h = test::header_of(p);
  CHECK(h.kept_count == 100);
  CHECK(h.meta_bytes == 7 * 5);  // 100 kept values: 6 groups of 16 and one of 4
  CHECK(h.value_bytes == 50);
  const auto d = test::round_trip(comp, x);
  std::vector<bool> kept(x.size(), false);
  const auto where = test::frame_indices(p);
  for (std::size_t m = 0; m < h.kept_count; ++m) {
    const std::size_t j = where[m];
    kept[j] = true;
    const auto meta = group_meta<Q>(p, m / 16);
    const double step = std::abs(x[j]) <= meta.p ? meta.sc : meta.st;
    CHECK(std::abs(double(x[j]) - d[j]) <= step / 2 + eps(meta.max));
  }
  for (std::size_t j = 0; j < x.size(); ++j)
    if (!kept[j]) CHECK(d[j] == 0.0f);
}

TEST_CASE("piecewise: error feedback keeps what rounding lost") {
  using C = test::with_quantizer<quantize::piecewise<3>, sparsify::dense, feedback::residual>;
  test::check_feedback_keeps_rounding(C({.quantize = {.group = 32}}));
}

TEST_CASE("piecewise: accumulate adds decompress's values, NaN canonical, whatever the group size") {
  const float starts[] = {0.0f, -0.0f, 2.5f, -1e-3f, 1e-41f, std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          bits_float(0x7fa00001u), bits_float(0xffc00000u)};
  const auto x = test::heavy_tailed(6003, 17);  // a partial last group, and more than the prefetch distance
  const auto check = [&](const auto& comp) {
    auto st = comp.make_state(x.size());
    std::vector<std::byte> payload(comp.template max_payload_bytes<float>(x.size()));
    payload.resize(comp.template compress<float>(x, st, payload).value());
    std::vector<float> decoded(x.size()), sum(x.size());
    REQUIRE(comp.template decompress<float>(payload, decoded).ok());
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = starts[(i * 7 + i / 13) % std::size(starts)];
    const std::vector<float> before = sum;
    REQUIRE(comp.template accumulate<float>(payload, sum).ok());
    for (std::size_t i = 0; i < sum.size(); ++i) {
      CAPTURE(i);
      REQUIRE(float_bits(sum[i]) == float_bits(canonical_nan(before[i] + decoded[i])));
    }
  };
  for (const std::size_t group : {8u, 128u, 1024u}) {
    CAPTURE(group);
    check(test::with_quantizer<quantize::piecewise<4>>({.quantize = {.group = group}}));
    // frames that start past element 0
    check(compressor<partition::chunks, sparsify::dense, quantize::piecewise<4>, feedback::none>(
        {.partition = {.chunk_bytes = 8192}, .quantize = {.group = group}}));
  }
}
