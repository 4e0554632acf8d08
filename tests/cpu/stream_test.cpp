// cpu::detail::packed_stream packs and checksums as pack_bits and crc32c do; copy_tile copies exactly.
#include <gradcomp/cpu/stream.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

using namespace gradcomp;

namespace {
// packed_stream against pack_bits: commits of every size pattern (so blocks start at every
// bit offset), codes with garbage above their Bits bits, several flushes' worth of bytes.
template <class Code, unsigned Bits>
void check_packed_stream() {
  std::uint64_t s = 12345;
  const auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(s >> 33);
  };
  std::vector<std::uint32_t> codes;  // masked, for pack_bits
  std::vector<std::byte> out(200000, std::byte{0xa5});
  cpu::detail::packed_stream<Code, Bits> writer(out.data(), false);
  while (codes.size() < 100000) {
    const std::size_t n = next() % 3 == 0 ? next() % 7 : next() % cpu::detail::packed_stream<Code, Bits>::max_put + 1;
    Code* room = writer.room();
    for (std::size_t i = 0; i < n; ++i) {
      room[i] = static_cast<Code>(next());
      codes.push_back(room[i] & ((1u << Bits) - 1u));
    }
    writer.commit(n);
  }
  const std::uint32_t crc = writer.finish();
  const std::size_t bytes = packed_bytes(codes.size(), Bits);
  std::vector<std::byte> expected(bytes);
  pack_bits(codes, Bits, expected.data());
  CHECK(std::memcmp(out.data(), expected.data(), bytes) == 0);
  CHECK(std::to_integer<int>(out[bytes]) == 0xa5);
  CHECK(crc == crc32c(std::span<const std::byte>(expected)));
}
}  // namespace

TEST_CASE("packed_stream packs as pack_bits does, for every width and block offset") {
  check_packed_stream<std::uint8_t, 1>();
  check_packed_stream<std::uint8_t, 2>();
  check_packed_stream<std::uint8_t, 3>();
  check_packed_stream<std::uint8_t, 4>();
  check_packed_stream<std::uint8_t, 8>();
  check_packed_stream<std::uint16_t, 9>();
}

TEST_CASE("copy_tile copies exactly the bytes asked for, at every destination alignment") {
  std::vector<std::byte> src(4096 + 200), dst(src.size() + 256);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 131 + 7);
  const std::size_t base = 64 - reinterpret_cast<std::uintptr_t>(dst.data()) % 64;
  for (bool streaming : {false, true})
    for (std::size_t misalign = 0; misalign < 40; ++misalign)
      for (std::size_t bytes : {0u, 1u, 7u, 8u, 9u, 24u, 31u, 32u, 33u, 63u, 100u, 4096u + 13u}) {
        CAPTURE(streaming);
        CAPTURE(misalign);
        CAPTURE(bytes);
        std::fill(dst.begin(), dst.end(), std::byte{0xa5});
        std::byte* out = dst.data() + base + misalign;
        cpu::detail::copy_tile(out, src.data() + 3, bytes, streaming);
        cpu::detail::streaming_fence();
        CHECK(std::memcmp(out, src.data() + 3, bytes) == 0);
        CHECK(std::to_integer<int>(out[bytes]) == 0xa5);  // nothing written around it
        CHECK(std::to_integer<int>(out[-1]) == 0xa5);
      }
}
