#pragma once
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and final xor ~0).
// Host: the SSE4.2 crc32 instruction when the CPU has it (checked once at run time, no
// compile flag needed), three independent streams to hide its latency; a slicing-by-8 table
// on other CPUs. crc32c_combine
// joins the CRCs of adjacent pieces, which is how a parallel backend checksums a frame piece
// by piece.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "config.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define GRADCOMP_HAVE_X86_CRC 1
#else
#define GRADCOMP_HAVE_X86_CRC 0
#endif

namespace gradcomp {

namespace detail {

inline constexpr std::uint32_t crc32c_poly = 0x82F63B78u;

constexpr std::array<std::array<std::uint32_t, 256>, 8> make_crc32c_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1u) ? (c >> 1) ^ crc32c_poly : c >> 1;
    t[0][i] = c;
  }
  for (std::uint32_t i = 0; i < 256; ++i)
    for (std::size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  return t;
}

inline constexpr auto crc32c_tables = make_crc32c_tables();

// Raw register update (no pre/post inversion).
inline std::uint32_t crc32c_update_table(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  const auto& t = crc32c_tables;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian host (static_assert in byteio.hpp)
    w ^= crc;
    crc = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
          t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xffu];
  return crc;
}

// a * b modulo the CRC polynomial, in the reflected bit order CRC registers use (bit 31 is
// x^0). Branch-free steps; it stops when a has no terms left.
GRADCOMP_HD constexpr std::uint32_t crc32c_mulmod(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (; a != 0; a <<= 1) {
    product ^= b & (0u - (a >> 31));
    b = (b >> 1) ^ (crc32c_poly & (0u - (b & 1u)));  // b * x
  }
  return product;
}

// x^(8 * 2^k) modulo the polynomial, k = 0 .. 63, by repeated squaring of x^8.
inline constexpr std::array<std::uint32_t, 64> crc32c_x_pow_8_pow2 = [] {
  std::array<std::uint32_t, 64> t{};
  t[0] = 0x00800000u;  // x^8 (one zero byte)
  for (std::size_t k = 1; k < t.size(); ++k) t[k] = crc32c_mulmod(t[k - 1], t[k - 1]);
  return t;
}();

// x^(8 * nbytes) modulo the polynomial: multiplying a register by it appends nbytes zeros.
// On the host, one product per bit set in nbytes from the table above (crc32c_combine
// measured 0.9 us by squaring, which writing a frame does twice); device code, which cannot
// index a host array, squares as it goes.
GRADCOMP_HD constexpr std::uint32_t crc32c_x_pow_8n(std::uint64_t nbytes) {
  std::uint32_t result = 0x80000000u;  // x^0
#if defined(__CUDA_ARCH__)
  std::uint32_t square = 0x00800000u;  // x^8
  for (; nbytes != 0; nbytes >>= 1) {
    if (nbytes & 1u) result = crc32c_mulmod(result, square);
    square = crc32c_mulmod(square, square);
  }
#else
  for (std::size_t k = 0; nbytes != 0; ++k, nbytes >>= 1)
    if (nbytes & 1u) result = crc32c_mulmod(result, crc32c_x_pow_8_pow2[k]);
#endif
  return result;
}

// Three streams of this many bytes make one round of the hardware CRC; the shifts join them.
inline constexpr std::size_t crc32c_stream_bytes = 4096;
inline constexpr std::uint32_t crc32c_shift_1 = crc32c_x_pow_8n(crc32c_stream_bytes);
inline constexpr std::uint32_t crc32c_shift_2 = crc32c_x_pow_8n(2 * crc32c_stream_bytes);

#if GRADCOMP_HAVE_X86_CRC

__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_update_sse42(std::uint32_t crc, const unsigned char* p,
                                                                          std::size_t n) {
  constexpr std::size_t L = crc32c_stream_bytes;
  while (n >= 3 * L) {  // three streams over adjacent L-byte pieces, joined by shifting
    std::uint64_t a = crc, b = 0, c = 0;
    const bool more = n >= 6 * L;  // the next round's lines are asked for during this one
    for (std::size_t i = 0; i < L; i += 64) {
      if (more)
        for (std::size_t s = 3; s < 6; ++s) GRADCOMP_PREFETCH(p + s * L + i);
      for (std::size_t k = i; k < i + 64; k += 8) {
        std::uint64_t wa, wb, wc;
        std::memcpy(&wa, p + k, 8);
        std::memcpy(&wb, p + L + k, 8);
        std::memcpy(&wc, p + 2 * L + k, 8);
        a = _mm_crc32_u64(a, wa);
        b = _mm_crc32_u64(b, wb);
        c = _mm_crc32_u64(c, wc);
      }
    }
    crc = crc32c_mulmod(static_cast<std::uint32_t>(a), crc32c_shift_2) ^
          crc32c_mulmod(static_cast<std::uint32_t>(b), crc32c_shift_1) ^ static_cast<std::uint32_t>(c);
    p += 3 * L;
    n -= 3 * L;
  }
  std::uint64_t r = crc;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    r = _mm_crc32_u64(r, w);
  }
  crc = static_cast<std::uint32_t>(r);
  for (; n; --n) crc = _mm_crc32_u8(crc, *p++);
  return crc;
}

inline bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

#endif

}  // namespace detail

// Continue a CRC32C: crc32c(b, crc32c(a)) == crc32c(a followed by b).
inline std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t crc = 0) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
#if GRADCOMP_HAVE_X86_CRC
  if (detail::cpu_has_sse42()) return ~detail::crc32c_update_sse42(~crc, p, bytes.size());
#endif
  return ~detail::crc32c_update_table(~crc, p, bytes.size());
}

// CRC32C of a followed by b, from crc32c(a), crc32c(b) and the length of b.
GRADCOMP_HD constexpr std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t size_b) {
  // The register is affine in its start value; the ~0 pre/post inversions cancel, leaving
  // crc(a b) = crc(a) * x^(8 |b|) + crc(b) over GF(2).
  return detail::crc32c_mulmod(crc_a, detail::crc32c_x_pow_8n(size_b)) ^ crc_b;
}

}  // namespace gradcomp
