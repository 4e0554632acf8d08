#include <gradcomp/core/numeric.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <cstring>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__x86_64__) && defined(__SSE2__)
#include <xmmintrin.h>
#endif

using namespace gradcomp;

namespace {

// Independent reference: pick the nearer of the two bf16 neighbours in double arithmetic.
std::uint16_t bf16_reference(float x) {
  if (std::isnan(x)) return static_cast<std::uint16_t>((float_bits(x) >> 16) | 0x40u);
  const std::uint32_t u = float_bits(x);
  const auto down = static_cast<std::uint16_t>(u >> 16);  // truncation toward zero
  const auto up = static_cast<std::uint16_t>(down + 1);   // next magnitude (may be inf)
  const double xd = x, dd = float_from_bf16_bits(down), ud = float_from_bf16_bits(up);
  if ((u & 0xffffu) == 0) return down;
  const double to_down = std::fabs(xd - dd), to_up = std::fabs(ud - xd);
  if (std::isinf(ud)) {  // the gap to infinity counts as one more ulp of the largest finite
    const double ulp = std::ldexp(1.0, 127 - 7);
    return std::fabs(xd) - std::fabs(dd) < ulp / 2 || (std::fabs(xd) - std::fabs(dd) == ulp / 2 && !(down & 1u)) ? down : up;
  }
  if (to_down < to_up) return down;
  if (to_up < to_down) return up;
  return (down & 1u) ? up : down;
}

}  // namespace

TEST_CASE("bf16 conversion rounds to nearest even, keeps subnormals, quiets NaN") {
  // A sweep with a prime stride covers every exponent and many mantissas, plus neighbours of
  // the rounding boundaries.
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 65521) {
    for (std::uint32_t d : {0u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u}) {
      const auto bits = static_cast<std::uint32_t>(u + d);
      const float x = bits_float(bits);
      REQUIRE_MESSAGE(bf16_bits_from_float(x) == bf16_reference(x), "bits " << bits);
    }
  }
  CHECK(bf16_bits_from_float(1.0f) == 0x3f80);
  CHECK(bf16_bits_from_float(-0.0f) == 0x8000);
  CHECK(bf16_bits_from_float(bits_float(0x3f808000u)) == 0x3f80);  // tie to even (down)
  CHECK(bf16_bits_from_float(bits_float(0x3f818000u)) == 0x3f82);  // tie to even (up)
  CHECK(bf16_bits_from_float(bits_float(0x00000001u)) == 0x0000);  // smallest subnormal
  CHECK(bf16_bits_from_float(bits_float(0x00010000u)) == 0x0001);  // subnormal kept
  CHECK(bf16_bits_from_float(std::numeric_limits<float>::max()) == 0x7f80);  // overflow: inf
  CHECK(bf16_bits_from_float(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(bf16_bits_from_float(bits_float(0x7f800001u)) == 0x7fc0);  // signalling NaN quieted
  CHECK(bf16_bits_from_float(bits_float(0xff800001u)) == 0xffc0);
  for (std::uint32_t h = 0; h < 0x10000; ++h) {  // decode is exact; re-encoding is the identity
    const float x = float_from_bf16_bits(static_cast<std::uint16_t>(h));
    CHECK(float_bits(x) == h << 16);
    if (!std::isnan(x)) REQUIRE(bf16_bits_from_float(x) == h);
  }
}

#if defined(__FLT16_MANT_DIG__) && (defined(__x86_64__) || defined(__aarch64__))
TEST_CASE("fp16 conversion matches the compiler's _Float16 (IEEE binary16, round to nearest even)") {
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 65521) {
    for (std::uint32_t d : {0u, 0xfffu, 0x1000u, 0x1001u, 0x3000u}) {
      const float x = bits_float(static_cast<std::uint32_t>(u + d));
      if (std::isnan(x)) continue;
      const _Float16 ref = static_cast<_Float16>(x);
      std::uint16_t ref_bits;
      std::memcpy(&ref_bits, &ref, 2);
      REQUIRE_MESSAGE(fp16_bits_from_float(x) == ref_bits, "bits " << float_bits(x));
    }
  }
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    _Float16 v;
    const auto hb = static_cast<std::uint16_t>(h);
    std::memcpy(&v, &hb, 2);
    const float x = float_from_fp16_bits(hb);
    if (std::isnan(x)) continue;
    REQUIRE(float_bits(x) == float_bits(static_cast<float>(v)));
  }
}
#endif

#if defined(__x86_64__) && defined(__SSE2__)
TEST_CASE("fp16 encoding gives the same bits with flush-to-zero and denormals-are-zero set") {
  // Its subnormal rounding adds 0.5 in float arithmetic; these modes must not change a bit.
  std::vector<std::uint16_t> plain;
  const auto sweep = [](auto&& each) {
    for (std::uint64_t u = 0; u <= 0xffffffffull; u += 4099) each(bits_float(static_cast<std::uint32_t>(u)));
    for (std::uint32_t u = 0x33000000u; u <= 0x38800000u; u += 511) each(bits_float(u));  // fp16 subnormals
  };
  sweep([&](float x) { plain.push_back(fp16_bits_from_float(x)); });
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  std::size_t i = 0, mismatches = 0;
  sweep([&](float x) { mismatches += fp16_bits_from_float(x) != plain[i++]; });
  _mm_setcsr(saved);
  CHECK(i == plain.size());
  CHECK(mismatches == 0);
}
#endif

TEST_CASE("fp16 edge cases") {
  CHECK(fp16_bits_from_float(1.0f) == 0x3c00);
  CHECK(fp16_bits_from_float(65504.0f) == 0x7bff);
  CHECK(fp16_bits_from_float(65519.99f) == 0x7bff);
  CHECK(fp16_bits_from_float(65520.0f) == 0x7c00);  // no saturation
  CHECK(fp16_bits_from_float(-1e9f) == 0xfc00);
  CHECK(fp16_bits_from_float(std::ldexp(1.0f, -24)) == 0x0001);       // smallest subnormal
  CHECK(fp16_bits_from_float(std::ldexp(1.0f, -25)) == 0x0000);       // tie to even: zero
  CHECK(fp16_bits_from_float(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(fp16_bits_from_float(std::ldexp(3.0f, -25)) == 0x0002);       // 1.5 ulp: tie to even
  CHECK(fp16_bits_from_float(std::ldexp(1023.5f, -24)) == 0x0400);    // carries into normal
  CHECK(fp16_bits_from_float(-0.0f) == 0x8000);
  CHECK(fp16_bits_from_float(bits_float(0x7f800001u)) == 0x7e00);     // quiet NaN
  CHECK(fp16_bits_from_float(bits_float(0xffc00000u)) == 0xfe00);
  CHECK(std::isinf(float_from_fp16_bits(0x7c00)));
  CHECK(std::isnan(float_from_fp16_bits(0x7e00)));
  CHECK(float_from_fp16_bits(0x0001) == std::ldexp(1.0f, -24));
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto hb = static_cast<std::uint16_t>(h);
    const float x = float_from_fp16_bits(hb);
    if (!std::isnan(x)) REQUIRE(fp16_bits_from_float(x) == hb);
  }
}

TEST_CASE("value types") {
  const bf16_t b = bf16_t::from_float(3.0f);
  CHECK(b.to_float() == 3.0f);
  CHECK(to_float(b) == 3.0f);
  CHECK(from_float<bf16_t>(3.0f) == b);
  CHECK(fp16_t::from_float(0.5f).to_float() == 0.5f);
  CHECK(dtype_of<float> == dtype::f32);
  CHECK(dtype_of<bf16_t> == dtype::bf16);
  static_assert(gradient_element<float> && gradient_element<bf16_t>);
  static_assert(!gradient_element<double> && !gradient_element<fp16_t>);
}
