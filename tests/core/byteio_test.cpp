#include <gradcomp/core/byteio.hpp>

#include <doctest/doctest.h>

#include <vector>

#include "support/random.hpp"

using namespace gradcomp;

TEST_CASE("little-endian load and store") {
  std::byte b[8] = {};
  store_le<std::uint32_t>(b, 0x04030201u);
  CHECK(b[0] == std::byte{1});
  CHECK(b[3] == std::byte{4});
  CHECK(load_le<std::uint32_t>(b) == 0x04030201u);
  store_le<std::uint64_t>(b, 0x0807060504030201ull);
  CHECK(load_le<std::uint16_t>(b + 6) == 0x0807u);
  CHECK(align8(0) == 0);
  CHECK(align8(1) == 8);
  CHECK(align8(8) == 8);
  CHECK(align8(9) == 16);
}

TEST_CASE("bit packing round trip for every width") {
  for (unsigned bits = 1; bits <= 32; ++bits) {
    for (std::size_t count : {0u, 1u, 7u, 8u, 33u, 100u}) {
      const auto raw = test::random_bytes(4 * count, bits * 100 + static_cast<std::uint32_t>(count));
      std::vector<std::uint32_t> codes(count);
      const std::uint32_t mask = bits == 32 ? 0xffffffffu : (1u << bits) - 1u;
      for (std::size_t i = 0; i < count; ++i) codes[i] = load_le<std::uint32_t>(reinterpret_cast<const std::byte*>(&raw[4 * i])) & mask;
      std::vector<std::byte> packed(packed_bytes(count, bits) + 1, std::byte{0xee});
      pack_bits(codes, bits, packed.data());
      CHECK(packed.back() == std::byte{0xee});  // nothing written past packed_bytes()
      for (std::size_t i = 0; i < count; ++i) REQUIRE(unpack_bits_at(packed.data(), i, bits) == codes[i]);
      if (count * bits % 8) {  // unused high bits of the last byte are zero
        const auto last = static_cast<unsigned>(packed[packed_bytes(count, bits) - 1]);
        CHECK((last >> (count * bits % 8)) == 0u);
      }
    }
  }
  const std::uint32_t two_bit[] = {1, 2, 3, 0, 3};
  std::byte out[2];
  pack_bits(two_bit, 2, out);
  CHECK(out[0] == std::byte{0b00111001});  // LSB first
  CHECK(out[1] == std::byte{0b00000011});
}

namespace {
// unpack_codes over every start and length of a 300-code section against pack_bits.
template <class Code, unsigned Bits>
void check_unpack_codes() {
  constexpr std::size_t count = 300;
  const auto raw = test::random_bytes(4 * count, 7000 + Bits);
  std::vector<std::uint32_t> codes(count);
  for (std::size_t i = 0; i < count; ++i)
    codes[i] = load_le<std::uint32_t>(reinterpret_cast<const std::byte*>(&raw[4 * i])) & ((1u << Bits) - 1u);
  std::vector<std::byte> packed(packed_bytes(count, Bits));
  pack_bits(codes, Bits, packed.data());
  std::vector<Code> got(count + 1);
  for (std::size_t first = 0; first < 40; ++first) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{8}, std::size_t{63}, count - first}) {
      got.assign(count + 1, Code{0x5a});
      unpack_codes<Code, Bits>(packed.data(), first, n, got.data());
      for (std::size_t i = 0; i < n; ++i) REQUIRE_MESSAGE(got[i] == codes[first + i], "first " << first << " i " << i);
      CHECK(got[n] == Code{0x5a});  // nothing written past n
    }
  }
}
}  // namespace

TEST_CASE("unpack_codes equals pack_bits for every start, narrow and odd widths") {
  check_unpack_codes<std::uint8_t, 1>();
  check_unpack_codes<std::uint8_t, 2>();
  check_unpack_codes<std::uint8_t, 3>();
  check_unpack_codes<std::uint8_t, 4>();
  check_unpack_codes<std::uint8_t, 8>();
  check_unpack_codes<std::uint16_t, 9>();
  check_unpack_codes<std::uint16_t, 12>();
}
