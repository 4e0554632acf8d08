#pragma once
// quantize::fp16: values cast to IEEE binary16, round to nearest even, subnormals kept.
// Bound: |x - q(x)| <= 2^-11 |x| for 2^-14 <= |x| < 65520, <= 2^-25 below; |x| >= 65520
// becomes infinity (no saturation: overflow must stay visible to loss scaling).
// Summable (fp16 SUM).

#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/numeric.hpp"
#include "../cpu/dispatch.hpp"

#if GRADCOMP_CPU_DISPATCH
#include <immintrin.h>
#endif

namespace gradcomp::quantize {

struct fp16 : ungrouped_quantizer {
  using code_type = std::uint16_t;
  static constexpr unsigned bits = 16;
  static constexpr std::uint8_t id = 3;
  static constexpr bool unbiased(const config&) { return false; }
  static constexpr bool summable = true;

  GRADCOMP_HD static code_type encode(const config&, const meta&, float x, std::uint32_t) { return fp16_bits_from_float(x); }
  GRADCOMP_HD static float decode(const config&, const meta&, code_type c) { return float_from_fp16_bits(c); }

#if GRADCOMP_CPU_DISPATCH
  // encode() and decode() of n values with F16C (part of the AVX2 version's ISA): the same
  // bits. vcvtps2ph rounds to nearest even (the mode in its immediate, whatever MXCSR says),
  // keeps fp16 subnormals, overflows to infinity and makes a NaN quiet with its top ten
  // payload bits, as fp16_bits_from_float does; a float below 2^-126, which DAZ would read as
  // zero, gives a zero code either way. vcvtph2ps is exact but makes a signalling NaN quiet,
  // so codes with exponent 31 take float_from_fp16_bits' bits.
  GRADCOMP_TARGET_AVX2 static void encode_avx2(const config&, const meta&, const float* x, std::size_t n,
                                               code_type* out) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (std::size_t t = 0; t < n % 8; ++t) out[i + t] = fp16_bits_from_float(x[i + t]);  // (see fp8's encode_avx2)
  }
  template <bool Streaming = false>
  GRADCOMP_TARGET_AVX2 static void decode_avx2(const config&, const meta&, const code_type* codes, std::size_t n,
                                               float* out) {
    const __m256i exponent = _mm256_set1_epi32(0x7c00);
    const __m128i exponent16 = _mm_set1_epi16(0x7c00);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
      // No infinity or NaN among the eight (a gradient's usual case): the conversion alone.
      if (_mm_testz_si128(_mm_cmpeq_epi16(_mm_and_si128(h, exponent16), exponent16), exponent16)) {
        detail::store8_avx2<Streaming>(out + i, _mm256_cvtph_ps(h));
        continue;
      }
      const __m256i w = _mm256_cvtepu16_epi32(h);
      const __m256i special = _mm256_or_si256(  // sign, all-ones exponent, payload as it is
          _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16),
                          _mm256_set1_epi32(0x7f800000)),
          _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x3ff)), 13));
      const __m256i is_special = _mm256_cmpeq_epi32(_mm256_and_si256(w, exponent), exponent);
      detail::store8_avx2<Streaming>(out + i, _mm256_blendv_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(special),
                                                               _mm256_castsi256_ps(is_special)));
    }
    for (std::size_t t = 0; t < n % 8; ++t) out[i + t] = float_from_fp16_bits(codes[i + t]);
  }

  // decode_avx2 added to sum[0, n) in the same pass, NaN canonical as canonical_nan makes it
  // (vcvtph2ps's quieted NaN becomes the canonical one all the same): fp16 accumulate measured
  // 0.69x the time of decoding into a buffer first.
  GRADCOMP_TARGET_AVX2 static void accumulate_avx2(const config&, const meta&, const code_type* codes, std::size_t n,
                                                  float* sum) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_add_ps(_mm256_loadu_ps(sum + i),
                                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i))));
      _mm256_storeu_ps(sum + i, detail::canonical_nan_avx2(v));
    }
    for (std::size_t t = 0; t < n % 8; ++t) sum[i + t] = canonical_nan(sum[i + t] + float_from_fp16_bits(codes[i + t]));
  }
#endif
};

}  // namespace gradcomp::quantize
