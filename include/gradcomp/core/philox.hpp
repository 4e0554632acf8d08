#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator, so any element's random number is computed directly from
// (key, counter) in any order, on any backend, with the same result.
//
// gradcomp's convention (docs/design.md): key = {seed, low 32 bits of step}, counter =
// {q low, q high, chunk id, stream}, where q numbers the values of a chunk in blocks (of 4 for
// 32-bit numbers: philox_at; of 8 for the 16-bit numbers of stochastic rounding:
// random16_at) and the stream separates independent uses within a step.

#include <cstddef>
#include <cstdint>

#include "../cpu/dispatch.hpp"
#include "config.hpp"

#if GRADCOMP_CPU_DISPATCH
#include <immintrin.h>
#endif

namespace gradcomp {

struct philox_u32x4 {
  std::uint32_t v[4];
};

namespace detail {
GRADCOMP_HD inline void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}
}  // namespace detail

GRADCOMP_HD inline philox_u32x4 philox4x32_10(philox_u32x4 ctr, std::uint32_t key0, std::uint32_t key1) {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    detail::mulhilo32(m0, ctr.v[0], hi0, lo0);
    detail::mulhilo32(m1, ctr.v[2], hi1, lo1);
    ctr = {{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    key0 += w0;
    key1 += w1;
  }
  return ctr;
}

enum class random_stream : std::uint32_t {
  quantizer = 1,   // stochastic rounding of the sent values
  sparsifier = 2,  // sampling and random selection
  permutation = 3, // round keys of the random-k permutation (core/permutation.hpp)
};

// The 32-bit random number of value m of a chunk (see the convention above).
GRADCOMP_HD inline std::uint32_t philox_at(std::uint32_t seed, std::uint64_t step, std::uint32_t chunk,
                                           random_stream stream, std::uint64_t m) {
  const std::uint64_t q = m / 4;
  const philox_u32x4 r = philox4x32_10({{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), chunk,
                                         static_cast<std::uint32_t>(stream)}},
                                       seed, static_cast<std::uint32_t>(step));
  return r.v[m % 4];
}

// The random number of value m for stochastic rounding: 16 random bits, in the high half
// (so unit_float() of it is a multiple of 2^-16). One Philox call serves 8 values: value m
// takes half m % 2 (0: low) of word (m / 2) % 4 of the call with counter m / 8.
GRADCOMP_HD inline std::uint32_t random16_at(std::uint32_t seed, std::uint64_t step, std::uint32_t chunk,
                                             random_stream stream, std::uint64_t m) {
  const std::uint64_t q = m / 8;
  const philox_u32x4 r = philox4x32_10({{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), chunk,
                                         static_cast<std::uint32_t>(stream)}},
                                       seed, static_cast<std::uint32_t>(step));
  const std::uint32_t w = r.v[(m / 2) % 4];
  return m % 2 ? (w & 0xffff0000u) : (w << 16);
}

#if GRADCOMP_CPU_DISPATCH
namespace detail {
#define GRADCOMP_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline

// Eight Philox4x32-10 generators side by side, one per 32-bit lane: c[w] holds word w of each.
struct philox8_avx2 {
  __m256i c[4];
};

// Counters {q + l, chunk, stream} for lane l (q's 64 bits split over words 0 and 1).
GRADCOMP_AVX2_INLINE void philox8_start(philox8_avx2& g, std::uint64_t q, std::uint32_t chunk, random_stream stream) {
  const __m256i lo = _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(q)));
  const __m256i c0 = _mm256_add_epi32(lo, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  // Lanes whose low word wrapped (c0 < lo, unsigned) carry into the high word: the compare
  // gives -1 there.
  const __m256i flip = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(lo, flip), _mm256_xor_si256(c0, flip));
  g.c[0] = c0;
  g.c[1] = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(q >> 32))), carry);
  g.c[2] = _mm256_set1_epi32(static_cast<int>(chunk));
  g.c[3] = _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(stream)));
}

// The 32x32 -> 64-bit products m * a of all eight lanes, as high and low halves.
// _mm256_mul_epu32 multiplies the even lanes into 64-bit slots, so the odd lanes are shifted
// down for a second multiply, and the high halves are put back in lane order with a shift and
// a blend. The low halves come from _mm256_mullo_epi32 instead of a second shift and blend: one
// instruction, measured slightly faster on AMD Zen 3.
GRADCOMP_AVX2_INLINE void mulhilo32_avx2(__m256i m, __m256i a, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
  lo = _mm256_mullo_epi32(a, m);
}

// One round, the same as philox4x32_10's.
GRADCOMP_AVX2_INLINE void philox8_round(philox8_avx2& g, __m256i key0, __m256i key1) {
  __m256i hi0, lo0, hi1, lo1;
  mulhilo32_avx2(_mm256_set1_epi32(static_cast<int>(0xD2511F53u)), g.c[0], hi0, lo0);
  mulhilo32_avx2(_mm256_set1_epi32(static_cast<int>(0xCD9E8D57u)), g.c[2], hi1, lo1);
  g.c[0] = _mm256_xor_si256(_mm256_xor_si256(g.c[1], key0), hi1);
  g.c[1] = lo1;
  g.c[2] = _mm256_xor_si256(_mm256_xor_si256(g.c[3], key1), hi0);
  g.c[3] = lo0;
}

// Writes the 64 values of the eight calls: call l's words w0..w3 become out[8l..8l+8) =
// {w0 << 16, w0 & 0xffff0000, w1 << 16, ...}. Interleaving 16-bit zeros below each 16-bit half
// (unpack with a zero vector) makes exactly those pairs, so the words only need transposing
// into call order first, with calls l and l+1 sharing a vector as [w0 w1 of l, w0 w1 of l+1 |
// w2 w3 of l, w2 w3 of l+1], the order the in-lane unpacks want.
GRADCOMP_AVX2_INLINE void philox8_store16(const philox8_avx2& g, std::uint32_t* out) {
  const __m256i l01 = _mm256_unpacklo_epi32(g.c[0], g.c[1]);  // calls 0 1 | 4 5, words 0 1
  const __m256i h01 = _mm256_unpackhi_epi32(g.c[0], g.c[1]);  // calls 2 3 | 6 7, words 0 1
  const __m256i l23 = _mm256_unpacklo_epi32(g.c[2], g.c[3]);  // calls 0 1 | 4 5, words 2 3
  const __m256i h23 = _mm256_unpackhi_epi32(g.c[2], g.c[3]);  // calls 2 3 | 6 7, words 2 3
  const __m256i t[4] = {_mm256_permute2x128_si256(l01, l23, 0x20), _mm256_permute2x128_si256(h01, h23, 0x20),
                        _mm256_permute2x128_si256(l01, l23, 0x31), _mm256_permute2x128_si256(h01, h23, 0x31)};
  const __m256i zero = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {  // t[k]: calls 2k and 2k + 1
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * k), _mm256_unpacklo_epi16(zero, t[k]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * k + 8), _mm256_unpackhi_epi16(zero, t[k]));
  }
}

// random16_fill for CPUs with AVX2. Two sets of eight generators are interleaved, as one set's
// rounds are a chain of dependent multiplies that would leave the vector units idle. On a
// 2-vCPU AMD EPYC (Zen 3), in blocks of 128 values as the compressor asks: about 0.35-0.42 ns
// per value (clang, GCC), against 1.1-1.9 for random16_fill_portable.
__attribute__((target("avx2"))) inline void random16_fill_avx2(std::uint32_t* out, std::uint64_t m0, std::size_t n,
                                                              std::uint32_t seed, std::uint64_t step,
                                                              std::uint32_t chunk, random_stream stream) {
  const __m256i w0 = _mm256_set1_epi32(static_cast<int>(0x9E3779B9u));
  const __m256i w1 = _mm256_set1_epi32(static_cast<int>(0xBB67AE85u));
  const __m256i seed_key0 = _mm256_set1_epi32(static_cast<int>(seed));
  const __m256i seed_key1 = _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(step)));
  std::uint64_t q = m0 / 8;
  std::size_t i = 0;
  for (; i + 64 < n; i += 128, q += 16) {  // (out holds n rounded up to a multiple of 64)
    philox8_avx2 a, b;
    philox8_start(a, q, chunk, stream);
    philox8_start(b, q + 8, chunk, stream);
    __m256i key0 = seed_key0, key1 = seed_key1;
    for (int round = 0; round < 10; ++round) {
      philox8_round(a, key0, key1);
      philox8_round(b, key0, key1);
      key0 = _mm256_add_epi32(key0, w0);
      key1 = _mm256_add_epi32(key1, w1);
    }
    philox8_store16(a, out + i);
    philox8_store16(b, out + i + 64);
  }
  if (i < n) {
    philox8_avx2 a;
    philox8_start(a, q, chunk, stream);
    __m256i key0 = seed_key0, key1 = seed_key1;
    for (int round = 0; round < 10; ++round) {
      philox8_round(a, key0, key1);
      key0 = _mm256_add_epi32(key0, w0);
      key1 = _mm256_add_epi32(key1, w1);
    }
    philox8_store16(a, out + i);
  }
}
#undef GRADCOMP_AVX2_INLINE
}  // namespace detail
#endif

namespace detail {
// random16_fill without AVX2: eight generators run side by side as plain arrays, which
// compilers turn into vector code.
inline void random16_fill_portable(std::uint32_t* out, std::uint64_t m0, std::size_t n, std::uint32_t seed,
                                   std::uint64_t step, std::uint32_t chunk, random_stream stream) {
  constexpr std::size_t lanes = 8;
  constexpr std::uint32_t m0k = 0xD2511F53u, m1k = 0xCD9E8D57u, w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  const std::uint64_t q0 = m0 / 8;
  for (std::size_t b = 0; 8 * b < n; b += lanes) {
    std::uint32_t c0[lanes], c1[lanes], c2[lanes], c3[lanes];
    for (std::size_t l = 0; l < lanes; ++l) {
      const std::uint64_t q = q0 + b + l;
      c0[l] = static_cast<std::uint32_t>(q);
      c1[l] = static_cast<std::uint32_t>(q >> 32);
      c2[l] = chunk;
      c3[l] = static_cast<std::uint32_t>(stream);
    }
    std::uint32_t k0 = seed, k1 = static_cast<std::uint32_t>(step);
    for (int round = 0; round < 10; ++round) {
      for (std::size_t l = 0; l < lanes; ++l) {
        const std::uint64_t p0 = static_cast<std::uint64_t>(m0k) * c0[l];
        const std::uint64_t p1 = static_cast<std::uint64_t>(m1k) * c2[l];
        const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
        const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
        c1[l] = static_cast<std::uint32_t>(p1);
        c3[l] = static_cast<std::uint32_t>(p0);
        c0[l] = n0;
        c2[l] = n2;
      }
      k0 += w0;
      k1 += w1;
    }
    for (std::size_t l = 0; l < lanes; ++l) {
      const std::uint32_t words[4] = {c0[l], c1[l], c2[l], c3[l]};
      for (std::size_t w = 0; w < 4; ++w) {
        out[8 * (b + l) + 2 * w] = words[w] << 16;
        out[8 * (b + l) + 2 * w + 1] = words[w] & 0xffff0000u;
      }
    }
  }
}
}  // namespace detail

// Host batch form of random16_at: out[i] = random16_at(seed, step, chunk, stream, m0 + i) for
// i < n, where m0 is a multiple of 8; out must hold n rounded up to a multiple of 64 values.
// Uses random16_fill_avx2 where the CPU has AVX2 and cpu::avx2_allowed(), else the portable
// version; both give the same numbers.
inline void random16_fill(std::uint32_t* out, std::uint64_t m0, std::size_t n, std::uint32_t seed, std::uint64_t step,
                          std::uint32_t chunk, random_stream stream) {
#if GRADCOMP_CPU_DISPATCH
  if (cpu::detail::cpu_has_avx2() && cpu::avx2_allowed().load(std::memory_order_relaxed)) {
    detail::random16_fill_avx2(out, m0, n, seed, step, chunk, stream);
    return;
  }
#endif
  detail::random16_fill_portable(out, m0, n, seed, step, chunk, stream);
}

// The 24 high bits of u as a float in [0, 1); exact, no rounding involved.
GRADCOMP_HD inline float unit_float(std::uint32_t u) { return static_cast<float>(u >> 8) * 5.9604644775390625e-8f; }

}  // namespace gradcomp
