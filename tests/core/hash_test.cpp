// Known-answer tests: Philox4x32-10 (Random123's published vectors), MurmurHash3 x86_32,
// CRC32C (RFC 3720 / iSCSI check value and the hardware-vs-table agreement).
#include <gradcomp/core/crc32c.hpp>
#include <gradcomp/core/murmur3.hpp>
#include <gradcomp/core/philox.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <string_view>

#include "support/random.hpp"

using namespace gradcomp;

TEST_CASE("philox4x32-10 known answers") {
  struct kat {
    philox_u32x4 ctr;
    std::uint32_t k0, k1;
    philox_u32x4 expect;
  };
  const kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const auto& k : kats) {
    const auto r = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) CHECK(r.v[i] == k.expect.v[i]);
  }
  CHECK(unit_float(0) == 0.0f);
  CHECK(unit_float(0xffffffffu) < 1.0f);
  CHECK(unit_float(0x80000000u) == 0.5f);
}

TEST_CASE("murmur3 x86_32 known answers") {
  const auto h = [](std::string_view s, std::uint32_t seed) {
    return murmur3_x86_32(reinterpret_cast<const unsigned char*>(s.data()), s.size(), seed);
  };
  CHECK(h("", 0) == 0u);
  CHECK(h("", 1) == 0x514E28B7u);
  CHECK(h("", 0xffffffffu) == 0x81F16F39u);
  CHECK(h(std::string_view("\0\0\0\0", 4), 0) == 0x2362F9DEu);
  CHECK(h("aaaa", 0x9747b28cu) == 0x5A97808Au);
  CHECK(h("abc", 0) == 0xB3DD93FAu);
  CHECK(h("Hello, world!", 0x9747b28cu) == 0x24884CBAu);
  CHECK(h("The quick brown fox jumps over the lazy dog", 0x9747b28cu) == 0x2FA826CDu);
  for (std::uint32_t key : {0u, 1u, 0x04030201u, 0xdeadbeefu, 0xffffffffu}) {
    unsigned char le[4];
    std::memcpy(le, &key, 4);
    for (std::uint32_t seed : {0u, 1u, 2u}) CHECK(murmur3_u32(key, seed) == murmur3_x86_32(le, 4, seed));
  }
}

TEST_CASE("crc32c: x^(8n) from the table of powers equals repeated squaring, and adds exponents") {
  const auto squaring = [](std::uint64_t n) {  // the textbook form, as device code runs it
    std::uint32_t result = 0x80000000u, square = 0x00800000u;
    for (; n != 0; n >>= 1) {
      if (n & 1u) result = detail::crc32c_mulmod(result, square);
      square = detail::crc32c_mulmod(square, square);
    }
    return result;
  };
  CHECK(detail::crc32c_x_pow_8n(0) == 0x80000000u);  // x^0
  CHECK(detail::crc32c_x_pow_8n(1) == 0x00800000u);  // x^8
  std::uint64_t n = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 200; ++i) {
    n = n * 6364136223846793005ull + 1442695040888963407ull;
    const std::uint64_t a = n >> (i % 64), b = (n * 31) >> ((i * 7) % 64);
    CAPTURE(a);
    CAPTURE(b);
    CHECK(detail::crc32c_x_pow_8n(a) == squaring(a));
    if (a <= ~b)
      CHECK(detail::crc32c_x_pow_8n(a + b) ==
            detail::crc32c_mulmod(detail::crc32c_x_pow_8n(a), detail::crc32c_x_pow_8n(b)));
  }
}

TEST_CASE("crc32c known answer, hardware equals table, combine") {
  const char check[] = "123456789";
  CHECK(crc32c(std::as_bytes(std::span(check, 9))) == 0xE3069283u);
  CHECK(crc32c({}) == 0u);
  const auto data = test::random_bytes(40000, 7);
  const auto* p = reinterpret_cast<const std::byte*>(data.data());
  for (std::size_t size : {0u, 1u, 7u, 8u, 9u, 63u, 4096u, 12287u, 12288u, 12289u, 24576u, 39990u}) {
    for (std::size_t offset : {0u, 1u, 3u}) {
      const auto bytes = std::span(p + offset, size);
      const std::uint32_t table =
          ~detail::crc32c_update_table(~0u, reinterpret_cast<const unsigned char*>(bytes.data()), size);
      REQUIRE(crc32c(bytes) == table);
      for (std::size_t cut : {std::size_t{0}, size / 3, size}) {
        const auto a = bytes.first(cut), b = bytes.subspan(cut);
        CHECK(crc32c(b, crc32c(a)) == table);                              // streaming
        CHECK(crc32c_combine(crc32c(a), crc32c(b), b.size()) == table);  // combining
      }
    }
  }
}

#if GRADCOMP_HAVE_X86_CRC
#endif
