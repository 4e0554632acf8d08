#include <gradcomp/core/fp8.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>

#if defined(__x86_64__) && defined(__SSE2__)
#include <xmmintrin.h>
#endif

using namespace gradcomp;

namespace {

struct fp8_format {
  const char* name;
  int mantissa_bits;
  int bias;
  bool ieee;  // E5M2: infinities and NaNs in the top exponent. E4M3: only S.1111.111 is NaN.
  std::uint8_t (*encode)(float);
  float (*decode)(std::uint8_t);
};

const fp8_format e4m3{"e4m3", 3, 7, false, fp8_e4m3_bits_from_float, float_from_fp8_e4m3_bits};
const fp8_format e5m2{"e5m2", 2, 15, true, fp8_e5m2_bits_from_float, float_from_fp8_e5m2_bits};

// The magnitude the fields of a code stand for, read as if the exponent range went on (so
// E4M3 0x7f reads 480 and E5M2 0x7c reads 2^16): the spec's value for every finite code.
double field_magnitude(const fp8_format& f, std::uint8_t c) {
  const int e = (c & 0x7f) >> f.mantissa_bits;
  const int m = c & ((1 << f.mantissa_bits) - 1);
  if (e == 0) return std::ldexp(m, 1 - f.bias - f.mantissa_bits);
  return std::ldexp((1 << f.mantissa_bits) + m, e - f.bias - f.mantissa_bits);
}

bool is_nan_code(const fp8_format& f, std::uint8_t c) {
  const int top = (0x7f >> f.mantissa_bits) << f.mantissa_bits;  // top exponent, zero mantissa
  return f.ieee ? (c & 0x7f) > top : (c & 0x7f) == 0x7f;
}

bool is_inf_code(const fp8_format& f, std::uint8_t c) {
  return f.ieee && (c & 0x7f) == ((0x7f >> f.mantissa_bits) << f.mantissa_bits);
}

// The value the spec gives a code (NaN for NaN codes).
double spec_value(const fp8_format& f, std::uint8_t c) {
  double magnitude = field_magnitude(f, c);
  if (is_nan_code(f, c)) magnitude = std::numeric_limits<double>::quiet_NaN();
  if (is_inf_code(f, c)) magnitude = std::numeric_limits<double>::infinity();
  return (c & 0x80) ? -magnitude : magnitude;
}

// field_magnitude of the codes 0..0x7f, ascending.
const std::array<double, 128>& magnitude_table(const fp8_format& f) {
  static const auto make = [](const fp8_format& g) {
    std::array<double, 128> t{};
    for (int c = 0; c < 128; ++c) t[c] = field_magnitude(g, static_cast<std::uint8_t>(c));
    return t;
  };
  static const std::array<double, 128> e4m3_table = make(e4m3), e5m2_table = make(e5m2);
  return f.ieee ? e5m2_table : e4m3_table;
}

// Slow independent encoder: the two neighbouring magnitudes of |x| in double arithmetic, the
// nearer one, ties to the even mantissa (the even code). Past the largest finite code the next
// magnitude (480 / 2^16) stands for the out-of-range side: E4M3 saturates, E5M2 gives infinity.
std::uint8_t reference_encode(const fp8_format& f, float x) {
  const auto sign = static_cast<std::uint8_t>(std::signbit(x) ? 0x80 : 0);
  const std::uint8_t nan_code = f.ieee ? 0x7e : 0x7f;
  const std::uint8_t past_max = f.ieee ? 0x7c : 0x7f;  // index of the "next magnitude"
  const std::uint8_t overflow = f.ieee ? 0x7c : 0x7e;  // what rounding to it turns into
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | nan_code);
  if (std::isinf(x)) return static_cast<std::uint8_t>(sign | (f.ieee ? 0x7c : 0x7f));
  const std::array<double, 128>& magnitudes = magnitude_table(f);
  const double ax = std::fabs(static_cast<double>(x));
  if (ax >= magnitudes[past_max]) return static_cast<std::uint8_t>(sign | overflow);
  int lo = 0;  // binary search for magnitudes[lo] <= ax < magnitudes[lo + 1]
  for (int step = 64; step > 0; step /= 2) {
    if (lo + step < past_max && magnitudes[lo + step] <= ax) lo += step;
  }
  const double to_lo = ax - magnitudes[lo], to_hi = magnitudes[lo + 1] - ax;
  int code = to_lo < to_hi ? lo : to_hi < to_lo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  if (code == past_max) code = overflow;
  return static_cast<std::uint8_t>(sign | code);
}

struct reference_row {
  std::uint32_t bits;
  std::uint8_t e4m3;
  std::uint8_t e5m2;
};

// From tools/gen_fp8_reference.py: ml_dtypes' codes with gradcomp's overflow/inf/NaN rules.
constexpr reference_row reference_table[] = {
#include "fp8_reference.inc"
};

void check_reference_table() {
  int mismatches = 0;
  for (const reference_row& row : reference_table) {
    const float x = bits_float(row.bits);
    if (fp8_e4m3_bits_from_float(x) != row.e4m3 || fp8_e5m2_bits_from_float(x) != row.e5m2) {
      if (++mismatches <= 10) {
        FAIL_CHECK("bits 0x" << std::hex << row.bits << ": e4m3 " << int{fp8_e4m3_bits_from_float(x)} << " want "
                             << int{row.e4m3} << ", e5m2 " << int{fp8_e5m2_bits_from_float(x)} << " want "
                             << int{row.e5m2});
      }
    }
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("fp8 decoding gives every code its exact spec value") {
  for (const fp8_format* f : {&e4m3, &e5m2}) {
    CAPTURE(f->name);
    int nans = 0;
    for (int i = 0; i < 256; ++i) {
      const auto c = static_cast<std::uint8_t>(i);
      CAPTURE(i);
      const float got = f->decode(c);
      const double want = spec_value(*f, c);
      if (std::isnan(want)) {
        ++nans;
        CHECK(float_bits(got) == 0x7fc00000u);  // canonical quiet NaN, whatever the code's sign
      } else {
        REQUIRE(static_cast<double>(static_cast<float>(want)) == want);  // every fp8 value is a float
        CHECK(float_bits(got) == float_bits(static_cast<float>(want)));  // bits: -0 keeps its sign
      }
    }
    CHECK(nans == (f->ieee ? 6 : 2));
  }
  CHECK(float_from_fp8_e4m3_bits(0x01) == std::ldexp(1.0f, -9));
  CHECK(float_from_fp8_e4m3_bits(0x7e) == fp8_e4m3_max);
  CHECK(float_from_fp8_e4m3_bits(0xfe) == -fp8_e4m3_max);
  CHECK(float_from_fp8_e5m2_bits(0x01) == std::ldexp(1.0f, -16));
  CHECK(float_from_fp8_e5m2_bits(0x7b) == fp8_e5m2_max);
  CHECK(float_from_fp8_e5m2_bits(0xfc) == -std::numeric_limits<float>::infinity());
  CHECK(float_bits(float_from_fp8_e4m3_bits(0x80)) == 0x80000000u);
}

TEST_CASE("fp8 encoding inverts decoding for every non-NaN code") {
  for (const fp8_format* f : {&e4m3, &e5m2}) {
    CAPTURE(f->name);
    for (int i = 0; i < 256; ++i) {
      const auto c = static_cast<std::uint8_t>(i);
      if (is_nan_code(*f, c)) continue;
      CAPTURE(i);
      CHECK(f->encode(f->decode(c)) == c);
      CHECK(reference_encode(*f, f->decode(c)) == c);
    }
  }
  CHECK(fp8_e4m3_bits_from_float(-0.0f) == 0x80);
  CHECK(fp8_e5m2_bits_from_float(-0.0f) == 0x80);
}

TEST_CASE("fp8 encoding matches the ml_dtypes reference table") {
  REQUIRE(std::size(reference_table) > 4000);
  check_reference_table();
  // The table and the slow reference encoder in this file agree too.
  for (const reference_row& row : reference_table) {
    const float x = bits_float(row.bits);
    if (reference_encode(e4m3, x) != row.e4m3 || reference_encode(e5m2, x) != row.e5m2) {
      FAIL("reference encoder and table disagree at bits 0x" << std::hex << row.bits);
    }
  }
}

#if defined(__x86_64__) && defined(__SSE2__)
TEST_CASE("fp8 conversions give the same bits with flush-to-zero and denormals-are-zero set") {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  check_reference_table();
  for (int i = 0; i < 256; ++i) {
    const auto c = static_cast<std::uint8_t>(i);
    for (const fp8_format* f : {&e4m3, &e5m2}) {
      const double want = spec_value(*f, c);
      if (!std::isnan(want)) CHECK(float_bits(f->decode(c)) == float_bits(static_cast<float>(want)));
    }
  }
  _mm_setcsr(saved);
}
#endif

TEST_CASE("fp8 encoding equals the slow reference over a sweep of float bit patterns") {
  // Every 97th of the 2^32 patterns: all exponents, signs and NaN payloads, many mantissas.
  std::uint64_t checked = 0;
  int mismatches = 0;
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 97) {
    const float x = bits_float(static_cast<std::uint32_t>(u));
    for (const fp8_format* f : {&e4m3, &e5m2}) {
      const std::uint8_t got = f->encode(x), want = reference_encode(*f, x);
      if (got != want && ++mismatches <= 10) {
        FAIL_CHECK(f->name << " bits 0x" << std::hex << u << ": got " << int{got} << " want " << int{want});
      }
    }
    ++checked;
  }
  CHECK(mismatches == 0);
  CHECK(checked == 0x100000000ull / 97 + 1);
}

TEST_CASE("fp8 e4m3 saturates finite overflow and turns infinity and NaN into NaN") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(fp8_e4m3_bits_from_float(448.0f) == 0x7e);
  CHECK(fp8_e4m3_bits_from_float(449.0f) == 0x7e);
  CHECK(fp8_e4m3_bits_from_float(464.0f) == 0x7e);  // halfway to 480: ties to even, 448
  CHECK(fp8_e4m3_bits_from_float(465.0f) == 0x7e);  // would round to 480: saturates
  CHECK(fp8_e4m3_bits_from_float(1e30f) == 0x7e);
  CHECK(fp8_e4m3_bits_from_float(std::numeric_limits<float>::max()) == 0x7e);
  CHECK(fp8_e4m3_bits_from_float(-std::numeric_limits<float>::max()) == 0xfe);
  CHECK(fp8_e4m3_bits_from_float(inf) == 0x7f);
  CHECK(fp8_e4m3_bits_from_float(-inf) == 0xff);
  CHECK(fp8_e4m3_bits_from_float(bits_float(0x7fc00000u)) == 0x7f);
  CHECK(fp8_e4m3_bits_from_float(bits_float(0x7f800001u)) == 0x7f);  // signalling NaN
  CHECK(fp8_e4m3_bits_from_float(bits_float(0xffc00000u)) == 0xff);
  CHECK(fp8_e4m3_bits_from_float(1.0f) == 0x38);
  CHECK(fp8_e4m3_bits_from_float(1.0625f) == 0x38);  // halfway 1 and 1.125: even, down
  CHECK(fp8_e4m3_bits_from_float(1.1875f) == 0x3a);  // halfway 1.125 and 1.25: even, up
  CHECK(fp8_e4m3_bits_from_float(std::ldexp(1.0f, -9)) == 0x01);   // smallest subnormal
  CHECK(fp8_e4m3_bits_from_float(std::ldexp(1.0f, -10)) == 0x00);  // half of it: even, zero
  CHECK(fp8_e4m3_bits_from_float(bits_float(0x3a800001u)) == 0x01);
  CHECK(fp8_e4m3_bits_from_float(std::ldexp(3.0f, -10)) == 0x02);   // 1.5 subnormal ulps: even
  CHECK(fp8_e4m3_bits_from_float(std::ldexp(15.0f, -10)) == 0x08);  // 7.5 ulps: carries to 2^-6
  CHECK(fp8_e4m3_bits_from_float(bits_float(0x00000001u)) == 0x00);  // float subnormal
  CHECK(fp8_e4m3_bits_from_float(-std::ldexp(1.0f, -20)) == 0x80);
  CHECK(std::isnan(float_from_fp8_e4m3_bits(0xff)));
  CHECK(float_bits(float_from_fp8_e4m3_bits(0xff)) == 0x7fc00000u);
}

TEST_CASE("fp8 e5m2 overflows to infinity as IEEE rounding does and quiets NaN") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(fp8_e5m2_bits_from_float(57344.0f) == 0x7b);
  CHECK(fp8_e5m2_bits_from_float(std::nextafter(61440.0f, 0.0f)) == 0x7b);
  CHECK(fp8_e5m2_bits_from_float(61440.0f) == 0x7c);  // halfway to 2^16: ties to even, infinity
  CHECK(fp8_e5m2_bits_from_float(-1e30f) == 0xfc);
  CHECK(fp8_e5m2_bits_from_float(inf) == 0x7c);
  CHECK(fp8_e5m2_bits_from_float(-inf) == 0xfc);
  CHECK(fp8_e5m2_bits_from_float(bits_float(0x7f800001u)) == 0x7e);
  CHECK(fp8_e5m2_bits_from_float(bits_float(0xffffffffu)) == 0xfe);
  CHECK(fp8_e5m2_bits_from_float(1.0f) == 0x3c);
  CHECK(fp8_e5m2_bits_from_float(1.125f) == 0x3c);  // halfway 1 and 1.25: even, down
  CHECK(fp8_e5m2_bits_from_float(1.375f) == 0x3e);  // halfway 1.25 and 1.5: even, up
  CHECK(fp8_e5m2_bits_from_float(std::ldexp(1.0f, -16)) == 0x01);
  CHECK(fp8_e5m2_bits_from_float(std::ldexp(1.0f, -17)) == 0x00);
  CHECK(fp8_e5m2_bits_from_float(bits_float(0x37000001u)) == 0x01);
  CHECK(fp8_e5m2_bits_from_float(std::ldexp(7.0f, -17)) == 0x04);  // 3.5 ulps: carries to 2^-14
  CHECK(float_bits(float_from_fp8_e5m2_bits(0xfd)) == 0x7fc00000u);
  CHECK(float_bits(float_from_fp8_e5m2_bits(0x7f)) == 0x7fc00000u);
  CHECK(std::isinf(float_from_fp8_e5m2_bits(0x7c)));
}
