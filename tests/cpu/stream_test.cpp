// cpu::write_codes writes every code once, in order, with the CRC32C of what it wrote, for
// every alignment of the output (the x86 pipelined path takes 8-byte aligned outputs, the
// plain path the others and the tail), and its prefetch hook only names codes still to come.
#include <gradcomp/cpu/stream.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

using namespace gradcomp;

namespace {

template <class Code>
void check_write_codes(std::size_t count, bool streaming) {
  const auto code_of = [](std::size_t j) { return static_cast<Code>(j * 2654435761u + 7u); };
  std::vector<std::byte> expected(count * sizeof(Code));
  for (std::size_t j = 0; j < count; ++j) {
    const Code c = code_of(j);
    std::memcpy(expected.data() + j * sizeof(Code), &c, sizeof(Code));
  }
  std::vector<std::byte> buffer(expected.size() + 128);  // a 64-byte boundary, with bytes before it
  const std::size_t base = 64 - reinterpret_cast<std::uintptr_t>(buffer.data()) % 64;
  for (std::size_t misalign = 0; misalign < 32; ++misalign) {
    CAPTURE(misalign);
    std::fill(buffer.begin(), buffer.end(), std::byte{0xa5});
    std::byte* out = buffer.data() + base + misalign;
    std::size_t next = 0;
    bool in_order = true, ahead_ok = true;
    const std::uint32_t crc = cpu::write_codes<Code>(
        count,
        [&](std::size_t j) {
          in_order &= j == next++;
          return code_of(j);
        },
        out, 0, streaming, [&](std::size_t j, std::size_t n) { ahead_ok &= j >= next && j + n <= count; });
    CHECK(in_order);
    CHECK(next == count);
    CHECK(ahead_ok);
    CHECK(std::memcmp(out, expected.data(), expected.size()) == 0);
    CHECK(std::to_integer<int>(out[expected.size()]) == 0xa5);  // nothing written around it
    CHECK(std::to_integer<int>(out[-1]) == 0xa5);
    CHECK(crc == crc32c(std::span<const std::byte>(expected)));
  }
}

}  // namespace

TEST_CASE("write_codes writes every code in order, at every output alignment, with its CRC32C") {
  for (bool streaming : {false, true}) {
    CAPTURE(streaming);
    for (std::size_t tiles : {0u, 1u, 3u}) {
      constexpr std::size_t extra = 1021;
      check_write_codes<std::uint8_t>(tiles * cpu::code_tile_bytes + extra, streaming);
      check_write_codes<std::uint16_t>(tiles * cpu::code_tile_bytes / 2 + extra, streaming);
      check_write_codes<std::uint32_t>(tiles * cpu::code_tile_bytes / 4 + extra, streaming);
    }
  }
}
