#pragma once
// Little-endian loads and stores into byte buffers, and bit packing of small codes.
// gradcomp's wire format is little-endian; the library supports little-endian hosts only.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "config.hpp"


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
