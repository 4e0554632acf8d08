#pragma once
// Decoding byte codes of up to 4 bits through a table of a group's 16 decoded floats, with
// AVX2. The table is held as byte planes (byte k of every entry side by side), so sixteen
// codes are looked up with two vpshufb and put back together with 128-bit unpacks; vpshufb
// issues once per cycle on Zen 1, where vpermps, the other way to index a vector table,
// issues once per 4. The entries are whatever the quantizer computes, so a lookup gives its
// decode()'s bits exactly.

#include <cstddef>
#include <cstdint>

#include "../cpu/dispatch.hpp"
#include "bits.hpp"

#if GRADCOMP_CPU_DISPATCH
#include <immintrin.h>

namespace gradcomp::detail {

// make_table16_avx2 takes the entries in two vectors, codes [0..3 | 8..11] and [4..7 | 12..15]
// (the order its transposition wants): element `at` of the pair (0 .. 15) is the entry of
// this code.
constexpr std::uint32_t table16_code(std::uint32_t at) { return at % 8 / 4 * 8 + at / 8 * 4 + at % 4; }

struct table16 {
  // planes[0]: byte 0 of the entries of codes 0 .. 15 in the low 128-bit lane, byte 1 in the
  // high lane; planes[1]: bytes 2 and 3.
  __m256i planes[2];
};

__attribute__((target("avx2"), always_inline)) inline table16 make_table16_avx2(__m256 first, __m256 second) {
  // in each lane, 32-bit word k gathers byte k of the lane's four entries
  const __m256i by_byte = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,  //
                                           0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m256i a = _mm256_shuffle_epi8(_mm256_castps_si256(first), by_byte);
  const __m256i b = _mm256_shuffle_epi8(_mm256_castps_si256(second), by_byte);
  // 64-bit quarters: bytes 0 of codes 0..7, bytes 1 of 0..7, bytes 0 of 8..15, bytes 1 of
  // 8..15 (and the same for bytes 2 and 3); swapping the middle two makes the planes
  const __m256i low = _mm256_unpacklo_epi32(a, b), high = _mm256_unpackhi_epi32(a, b);
  return {{_mm256_permute4x64_epi64(low, 0xd8), _mm256_permute4x64_epi64(high, 0xd8)}};
}

// The table of quantizer Q's decode() under (c, m), for codes 0 .. 15 taken modulo
// 2^Q::bits: sixteen scalar decodes, for quantizers whose decode is a few operations (and
// the same floats by construction).
template <class Q>
__attribute__((target("avx2"), always_inline)) inline table16 table16_of_decode(const typename Q::config& c,
                                                                               const typename Q::meta& m) {
  alignas(32) float entries[16];
  for (std::uint32_t at = 0; at < 16; ++at)
    entries[at] = Q::decode(c, m, static_cast<typename Q::code_type>(table16_code(at) % (1u << Q::bits)));
  return make_table16_avx2(_mm256_load_ps(entries), _mm256_load_ps(entries + 8));
}

// The entries of the 16 codes in `codes` (bytes, each below 16), four per q[k].
__attribute__((target("avx2"), always_inline)) inline void look_up16_avx2(const table16& t, __m128i codes,
                                                                         __m128 (&q)[4]) {
  const __m256i index = _mm256_broadcastsi128_si256(codes);
  const __m256i b01 = _mm256_shuffle_epi8(t.planes[0], index), b23 = _mm256_shuffle_epi8(t.planes[1], index);
  const __m128i b0 = _mm256_castsi256_si128(b01), b1 = _mm256_extracti128_si256(b01, 1);
  const __m128i b2 = _mm256_castsi256_si128(b23), b3 = _mm256_extracti128_si256(b23, 1);
  const __m128i low_first = _mm_unpacklo_epi8(b0, b1), low_second = _mm_unpackhi_epi8(b0, b1);  // 16-bit halves
  const __m128i high_first = _mm_unpacklo_epi8(b2, b3), high_second = _mm_unpackhi_epi8(b2, b3);
  q[0] = _mm_castsi128_ps(_mm_unpacklo_epi16(low_first, high_first));
  q[1] = _mm_castsi128_ps(_mm_unpackhi_epi16(low_first, high_first));
  q[2] = _mm_castsi128_ps(_mm_unpacklo_epi16(low_second, high_second));
  q[3] = _mm_castsi128_ps(_mm_unpackhi_epi16(low_second, high_second));
}

// Looks up codes[0, n) in t sixteen at a time, then eight, and hands each eight entries to
// eight(at, entries at .. at + 3, entries at + 4 .. at + 7); returns how many it looked up
// (n rounded down to a multiple of 8).
template <class Eight>
__attribute__((target("avx2"), always_inline)) inline std::size_t for_each_eight_in_table16(
    const table16& t, const std::uint8_t* codes, std::size_t n, Eight&& eight) {
  std::size_t i = 0;
  __m128 q[4];
  for (; i + 16 <= n; i += 16) {
    look_up16_avx2(t, _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)), q);
    eight(i, q[0], q[1]);
    eight(i + 8, q[2], q[3]);
  }
  if (n % 16 >= 8) {
    look_up16_avx2(t, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)), q);
    eight(i, q[0], q[1]);
    i += 8;
  }
  return i;
}

// Quantizer Q's decode_avx2 through t, its table under (c, m): out[i] = Q::decode(c, m,
// codes[i]) for i < n. Stores as store4_avx2<Streaming>'s.
template <bool Streaming, class Q>
__attribute__((target("avx2"), always_inline)) inline void decode_by_table16(const table16& t,
                                                                            const typename Q::config& c,
                                                                            const typename Q::meta& m,
                                                                            const typename Q::code_type* codes,
                                                                            std::size_t n, float* out) {
  static_assert(sizeof(typename Q::code_type) == 1, "byte codes");
  const std::size_t i = for_each_eight_in_table16(
      t, codes, n, [out](std::size_t at, __m128 low, __m128 high) __attribute__((always_inline, target("avx2"))) {
        store4_avx2<Streaming>(out + at, low);
        store4_avx2<Streaming>(out + at + 4, high);
      });
  // The tails count to n % 8, not to n: inlined with a constant n, GCC 12 reports the form
  // `for (; i < n; ++i)` as -Waggressive-loop-optimizations (on by default).
  for (std::size_t r = 0; r < n % 8; ++r) out[i + r] = Q::decode(c, m, codes[i + r]);
}

// Q's accumulate_avx2 through t likewise: sum[i] = canonical_nan(sum[i] + Q::decode(c, m,
// codes[i])).
template <class Q>
__attribute__((target("avx2"), always_inline)) inline void accumulate_by_table16(const table16& t,
                                                                                const typename Q::config& c,
                                                                                const typename Q::meta& m,
                                                                                const typename Q::code_type* codes,
                                                                                std::size_t n, float* sum) {
  static_assert(sizeof(typename Q::code_type) == 1, "byte codes");
  const std::size_t i = for_each_eight_in_table16(
      t, codes, n, [sum](std::size_t at, __m128 low, __m128 high) __attribute__((always_inline, target("avx2"))) {
        const __m256 v = _mm256_add_ps(_mm256_loadu_ps(sum + at), _mm256_set_m128(high, low));
        _mm256_storeu_ps(sum + at, canonical_nan_avx2(v));
      });
  for (std::size_t r = 0; r < n % 8; ++r) sum[i + r] = canonical_nan(sum[i + r] + Q::decode(c, m, codes[i + r]));
}

}  // namespace gradcomp::detail
#endif
