#pragma once
// Little-endian loads and stores into byte buffers, and bit packing of small codes.
// gradcomp's wire format is little-endian; the library supports little-endian hosts only.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "../cpu/dispatch.hpp"
#include "config.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if GRADCOMP_CPU_DISPATCH
#include <immintrin.h>
#endif

namespace gradcomp {

static_assert(std::endian::native == std::endian::little, "gradcomp supports little-endian hosts only");

template <class T>
GRADCOMP_HD inline void store_le(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

template <class T>
GRADCOMP_HD inline T load_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

GRADCOMP_HD constexpr std::size_t align8(std::size_t n) { return (n + 7u) & ~std::size_t{7}; }

// Codes of `bits` bits (1..32) packed LSB first: code i occupies bits [i*bits, (i+1)*bits)
// of the byte stream.
GRADCOMP_HD constexpr std::size_t packed_bytes(std::size_t count, unsigned bits) {
  return (count * bits + 7u) / 8u;
}

// Writes codes[0..count) packed; the last byte's unused high bits are zero. `out` must hold
// packed_bytes(count, bits) bytes. Host helper; backends pack in parallel by output byte.
inline void pack_bits(std::span<const std::uint32_t> codes, unsigned bits, std::byte* out) {
  const std::uint32_t mask = bits == 32 ? 0xffffffffu : (1u << bits) - 1u;
  std::uint64_t acc = 0;
  unsigned filled = 0;
  for (std::uint32_t c : codes) {
    acc |= static_cast<std::uint64_t>(c & mask) << filled;
    filled += bits;
    while (filled >= 8) {
      *out++ = static_cast<std::byte>(acc & 0xffu);
      acc >>= 8;
      filled -= 8;
    }
  }
  if (filled) *out = static_cast<std::byte>(acc & 0xffu);
}

// Reads code i of a stream packed by pack_bits. `in` must hold packed_bytes(i + 1, bits).
GRADCOMP_HD inline std::uint32_t unpack_bits_at(const std::byte* in, std::size_t i, unsigned bits) {
  const std::size_t bit = i * bits;
  const std::size_t first = bit / 8, last = (bit + bits - 1) / 8;
  std::uint64_t acc = 0;
  for (std::size_t b = last + 1; b-- > first;) acc = (acc << 8) | static_cast<std::uint8_t>(in[b]);
  acc >>= bit % 8;
  return static_cast<std::uint32_t>(acc & (bits == 32 ? 0xffffffffull : (1ull << bits) - 1u));
}

// Code i of a section of Bits-bit codes packed as by pack_bits (byte-sized codes are
// little-endian values).
template <class Code, unsigned Bits>
GRADCOMP_HD inline Code load_code(const std::byte* in, std::size_t i) {
  static_assert(Bits >= 1 && Bits <= 8 * sizeof(Code));
  if constexpr (Bits == 8 * sizeof(Code)) {
    return load_le<Code>(in + i * sizeof(Code));
  } else if constexpr (8 % Bits == 0) {
    return static_cast<Code>((static_cast<unsigned>(in[i * Bits / 8]) >> (i * Bits % 8)) & ((1u << Bits) - 1u));
  } else {
    return static_cast<Code>(unpack_bits_at(in, i, Bits));
  }
}

namespace detail {
// The codes of each byte of 1- or 2-bit codes, as the bytes of a little-endian word: one table
// load and one store per byte.
template <unsigned Bits>
struct byte_codes_table {
  using word = std::conditional_t<Bits == 1, std::uint64_t, std::uint32_t>;
  word codes[256];
  constexpr byte_codes_table() : codes{} {
    for (unsigned b = 0; b < 256; ++b)
      for (unsigned k = 0; k < 8 / Bits; ++k) codes[b] |= word{(b >> (k * Bits)) & ((1u << Bits) - 1u)} << (8 * k);
  }
};
template <unsigned Bits>
inline constexpr byte_codes_table<Bits> byte_codes{};

#if defined(__SSE2__)
// The 32 codes of 1, 2 or 4 bits in the 4, 8 or 16 bytes at in, a byte each at out, with SSE2
// (every x86-64 CPU): the table above compiles to one load and insert per byte (GCC 12 and
// its vectoriser), several times slower. Each code's bits are masked in place and the bytes
// interleaved into code order.
template <unsigned Bits>
inline void unpack32_sse2(const std::byte* in, std::uint8_t* out) {
  __m128i lo, hi;
  if constexpr (Bits == 4) {  // byte k -> codes 2k, 2k + 1
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m128i m = _mm_set1_epi8(0x0f);
    const __m128i c0 = _mm_and_si128(x, m), c1 = _mm_and_si128(_mm_srli_epi16(x, 4), m);
    lo = _mm_unpacklo_epi8(c0, c1);
    hi = _mm_unpackhi_epi8(c0, c1);
  } else if constexpr (Bits == 2) {  // byte k -> codes 4k .. 4k + 3
    std::uint64_t word;
    std::memcpy(&word, in, 8);
    const __m128i x = _mm_cvtsi64_si128(static_cast<long long>(word));
    const __m128i m = _mm_set1_epi8(3);
    const __m128i c01 = _mm_unpacklo_epi8(_mm_and_si128(x, m), _mm_and_si128(_mm_srli_epi16(x, 2), m));
    const __m128i c23 = _mm_unpacklo_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), m), _mm_and_si128(_mm_srli_epi16(x, 6), m));
    lo = _mm_unpacklo_epi16(c01, c23);
    hi = _mm_unpackhi_epi16(c01, c23);
  } else {  // byte k -> codes 8k .. 8k + 7: each byte copied 8 times, then one bit tested per copy
    static_assert(Bits == 1);
    std::uint32_t word;
    std::memcpy(&word, in, 4);
    __m128i x = _mm_cvtsi32_si128(static_cast<int>(word));
    x = _mm_unpacklo_epi8(x, x);  // b0 b0 b1 b1 b2 b2 b3 b3
    x = _mm_unpacklo_epi16(x, x);  // each byte 4 times
    const __m128i bit = _mm_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m128i one = _mm_set1_epi8(1);
    const auto codes = [&](__m128i copies) { return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(copies, bit), bit), one); };
    lo = codes(_mm_unpacklo_epi32(x, x));  // bytes 0 and 1, 8 times each
    hi = codes(_mm_unpackhi_epi32(x, x));  // bytes 2 and 3
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), lo);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), hi);
}
#endif

#if GRADCOMP_CPU_DISPATCH
// The eight 9-bit codes in the 9 bytes at p (reading 16), one per 32-bit lane. Code k starts in
// byte k, at bit k: each lane gets bytes k and k + 1 (a byte shuffle of the same 16 bytes in
// both halves) and is shifted right by k.
__attribute__((target("avx2"), always_inline)) inline __m256i unpack9x8_avx2(const std::byte* p) {
  const __m256i pick = _mm256_setr_epi8(0, 1, -1, -1, 1, 2, -1, -1, 2, 3, -1, -1, 3, 4, -1, -1,  //
                                        4, 5, -1, -1, 5, 6, -1, -1, 6, 7, -1, -1, 7, 8, -1, -1);
  const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(bytes, pick), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                          _mm256_set1_epi32(0x1ff));
}

// 9-bit codes (natural compression's) from the bytes at in, 16 at a time with AVX2, while a
// 25-byte read stays within `available` bytes; returns how many were written (a multiple of
// 16, at most n).
GRADCOMP_TARGET_AVX2 inline std::size_t unpack9_avx2(const std::byte* in, std::size_t n, std::size_t available,
                                                     std::uint16_t* codes) {
  std::size_t i = 0;
  for (; i + 16 <= n && i / 8 * 9 + 25 <= available; i += 16) {
    const __m256i packed = _mm256_packus_epi32(unpack9x8_avx2(in + i / 8 * 9), unpack9x8_avx2(in + i / 8 * 9 + 9));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), _mm256_permute4x64_epi64(packed, 0xd8));
  }
  return i;
}

// 32 byte codes, held in the 32-bit lanes of four vectors (values 0..255), stored in order.
__attribute__((target("avx2"), always_inline)) inline void store_codes32_avx2(__m256i c0, __m256i c1, __m256i c2,
                                                                             __m256i c3, std::uint8_t* out) {
  // packus works within 128-bit halves: bytes come out as c0[0..3] c1[0..3] c2[0..3] c3[0..3]
  // | c0[4..7] c1[4..7] ...; the dword permute puts each vector's two quarters together.
  const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
  const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
}
#endif
}  // namespace detail

// codes[i] = code first + i of a packed section, for i < n. Byte-aligned runs of 1- and 2-bit
// codes go through byte_codes, other narrow codes a byte at a time (a vectorisable loop); odd
// widths with an 8-byte load each where it stays within the codes asked for; reads stay
// within packed_bytes(first + n, Bits).
template <class Code, unsigned Bits>
inline void unpack_codes(const std::byte* in, std::size_t first, std::size_t n, Code* codes) {
  if constexpr (Bits < 8 && 8 % Bits == 0) {
    constexpr std::size_t per_byte = 8 / Bits;
    if (first % per_byte == 0) {
      const std::byte* bytes = in + first / per_byte;
      const std::size_t whole = n / per_byte;
      std::size_t b = 0;
#if defined(__SSE2__)
      if constexpr (sizeof(Code) == 1)
        for (; b + 32 / per_byte <= whole; b += 32 / per_byte)
          detail::unpack32_sse2<Bits>(bytes + b, reinterpret_cast<std::uint8_t*>(codes + b * per_byte));
#endif
      for (; b < whole; ++b) {
        if constexpr (Bits <= 2 && sizeof(Code) == 1) {  // a byte's 4 or 8 codes in one store
          const auto word = detail::byte_codes<Bits>.codes[static_cast<std::uint8_t>(bytes[b])];
          std::memcpy(codes + b * per_byte, &word, sizeof word);
        } else {
          for (std::size_t k = 0; k < per_byte; ++k)
            codes[b * per_byte + k] = static_cast<Code>((static_cast<unsigned>(bytes[b]) >> (k * Bits)) & ((1u << Bits) - 1u));
        }
      }
      for (std::size_t i = whole * per_byte; i < n; ++i) codes[i] = load_code<Code, Bits>(in, first + i);
      return;
    }
  }
  if constexpr (Bits < 16 && Bits % 8 != 0 && 8 % Bits != 0) {
    if (first % 8 == 0) {  // odd widths, aligned: 8 codes from Bits bytes
      const std::byte* bytes = in + first / 8 * Bits;
      std::size_t i = 0;
#if GRADCOMP_CPU_DISPATCH
      if constexpr (Bits == 9 && sizeof(Code) == 2) {
        if (cpu::avx2_active()) {
          i = detail::unpack9_avx2(bytes, n, packed_bytes(first + n, Bits) - first / 8 * Bits,
                                   reinterpret_cast<std::uint16_t*>(codes));
          bytes += i / 8 * Bits;
        }
      }
#endif
      for (; i + 8 <= n; i += 8, bytes += Bits) {
        // The Bits bytes are gathered in registers (compilers merge the first eight into one
        // load): copied into a stack array and read back as words, they stalled on store
        // forwarding, over half a nanosecond per code.
        std::uint64_t words[2] = {0, 0};
        for (unsigned b = 0; b < Bits; ++b) words[b / 8] |= std::uint64_t{static_cast<std::uint8_t>(bytes[b])} << (8 * (b % 8));
        for (unsigned k = 0; k < 8; ++k) {
          const unsigned bit = k * Bits;
          std::uint64_t c = words[bit / 64] >> (bit % 64);
          if (bit % 64 + Bits > 64) c |= words[1] << (64 - bit % 64);
          codes[i + k] = static_cast<Code>(c & ((std::uint64_t{1} << Bits) - 1u));
        }
      }
      for (; i < n; ++i) codes[i] = load_code<Code, Bits>(in, first + i);
      return;
    }
  }
  if constexpr (Bits % 8 != 0 && Bits <= 56) {  // odd widths: one 8-byte load per code where it fits
    const std::size_t limit = packed_bytes(first + n, Bits);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t bit = (first + i) * Bits;
      codes[i] = bit / 8 + 8 <= limit
                     ? static_cast<Code>((load_le<std::uint64_t>(in + bit / 8) >> (bit % 8)) & ((std::uint64_t{1} << Bits) - 1u))
                     : load_code<Code, Bits>(in, first + i);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) codes[i] = load_code<Code, Bits>(in, first + i);
  }
}

}  // namespace gradcomp
