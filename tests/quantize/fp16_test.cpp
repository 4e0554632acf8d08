// quantize::fp16's F16C hooks against the scalar conversions (core/numeric.hpp), whose
// rounding numeric_test checks against the compiler's _Float16.
#include <gradcomp/quantize/fp16.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "support/quantize.hpp"

using namespace gradcomp;

#if GRADCOMP_CPU_DISPATCH
namespace {
using Q = quantize::fp16;

// Every 4099th float bit pattern (all signs, binades, NaN payloads), plus every 511th in
// the range that rounds to fp16 subnormals, plus each rounding boundary's neighbours in
// every binade, and a count that leaves a scalar tail.
std::vector<float> sweep() {
  std::vector<float> x;
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 4099) x.push_back(bits_float(static_cast<std::uint32_t>(u)));
  for (std::uint32_t u = 0x33000000u; u <= 0x38800000u; u += 511) x.push_back(bits_float(u));
  for (std::uint32_t e = 0; e < 256; ++e)
    for (std::uint32_t m : {0x0u, 0xfffu, 0x1000u, 0x1001u, 0x2fffu, 0x3000u, 0x3001u, 0x7fffffu})
      for (std::uint32_t sign : {0u, 0x80000000u}) x.push_back(bits_float(sign | e << 23 | m));
  x.resize(x.size() / 8 * 8 + 5);
  return x;
}
}  // namespace

TEST_CASE("fp16: the F16C encoder gives fp16_bits_from_float's bits, also with FTZ and DAZ set") {
  if (!cpu::avx2_active()) {
    MESSAGE("no AVX2 and F16C on this CPU: skipped");
    return;
  }
  const std::vector<float> x = sweep();
  for (bool flush : {false, true}) {
    CAPTURE(flush);
    std::vector<std::uint16_t> codes(x.size() + 1, 0x5555);  // + 1: a guard past n
    const unsigned saved = _mm_getcsr();
    if (flush) _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
    Q::encode_avx2({}, {}, x.data(), x.size(), codes.data());
    _mm_setcsr(saved);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < x.size(); ++i) mismatches += codes[i] != fp16_bits_from_float(x[i]);
    CHECK(mismatches == 0);
    CHECK(codes.back() == 0x5555);
  }
}

TEST_CASE("fp16: the F16C decoder gives float_from_fp16_bits' bits for every code") {
  if (!cpu::avx2_active()) {
    MESSAGE("no AVX2 and F16C on this CPU: skipped");
    return;
  }
  std::vector<std::uint16_t> codes(0x10000 + 3);  // every code, then a scalar tail
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint16_t>(i * 40503u);
  for (std::size_t i = 0; i < 0x10000; ++i) codes[i] = static_cast<std::uint16_t>(i);
  test::check_avx2_decoder<Q>({}, {}, codes);  // plain and non-temporal stores
  // every code again, scattered (40503 is odd), so eights mix infinities and NaNs with numbers
  std::vector<std::uint16_t> mixed(0x10000);
  for (std::size_t i = 0; i < mixed.size(); ++i) mixed[i] = static_cast<std::uint16_t>(i * 40503u);
  test::check_avx2_decoder<Q>({}, {}, mixed);
  std::vector<float> out(codes.size());
  Q::decode_avx2({}, {}, codes.data(), codes.size(), out.data());
  // signalling NaN codes stay signalling, as in float_from_fp16_bits
  CHECK(float_bits(out[0x7c01]) == 0x7f802000u);
  CHECK(float_bits(out[0xfd00]) == 0xffa00000u);
}

TEST_CASE("fp16: the F16C accumulator adds float_from_fp16_bits' values, NaN canonical, for every code") {
  if (!cpu::avx2_active()) {
    MESSAGE("no AVX2 and F16C on this CPU: skipped");
    return;
  }
  std::vector<std::uint16_t> codes(0x10000 + 3);  // every code, then a scalar tail
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint16_t>(i < 0x10000 ? i : i * 40503u);
  for (const bool flush : {false, true}) test::check_avx2_accumulator<Q>({}, {}, codes, flush);
}
#endif
