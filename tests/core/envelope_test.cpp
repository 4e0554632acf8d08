// The checkpoint envelope (core/envelope.hpp): seal and open, each check in its order, and
// golden checkpoints of two kinds, generated from docs/wire-format.md alone by
// tools/gen_golden_frames.py (which re-implements CRC32C and the envelope).
#include <gradcomp/core/envelope.hpp>
#include <gradcomp/gradcomp.hpp>
#include <gradcomp/tagc.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "support/codec.hpp"

using namespace gradcomp;
using test::bytes_of;

namespace {

constexpr envelope::kind kind{0x54534554u, 4};  // "TEST", version 4

std::vector<std::byte> sealed(std::span<const std::byte> payload) {
  std::vector<std::byte> image(envelope::overhead + payload.size());
  std::copy(payload.begin(), payload.end(), envelope::payload_of(image).begin());
  envelope::seal(kind, image);
  return image;
}

errc open_code(std::span<const std::byte> image) { return envelope::open(kind, image).code(); }

// A field changed and the CRC made right again, so that the change reaches the check behind it.
std::vector<std::byte> resealed(std::vector<std::byte> image, std::size_t at, std::uint16_t v) {
  store_le<std::uint16_t>(image.data() + at, v);
  store_le<std::uint32_t>(image.data() + image.size() - 4, crc32c(std::span<const std::byte>(image).first(image.size() - 4)));
  return image;
}

}  // namespace

TEST_CASE("envelope: seal and open give the payload back, an empty one too") {
  const auto payload = bytes_of({1, 2, 3, 4, 5, 6, 7});
  const auto image = sealed(payload);
  REQUIRE(image.size() == 16 + 7 + 4);
  CHECK(load_le<std::uint32_t>(image.data()) == kind.magic);
  CHECK(load_le<std::uint16_t>(image.data() + 4) == kind.version);
  CHECK(load_le<std::uint16_t>(image.data() + 6) == 0);
  CHECK(load_le<std::uint64_t>(image.data() + 8) == 7);
  CHECK(load_le<std::uint32_t>(image.data() + 23) == crc32c(std::span<const std::byte>(image).first(23)));
  const auto got = envelope::open(kind, image);
  REQUIRE(got.ok());
  CHECK(std::vector<std::byte>(got->begin(), got->end()) == payload);
  const auto empty = sealed({});
  REQUIRE(empty.size() == envelope::overhead);
  const auto none = envelope::open(kind, empty);
  REQUIRE(none.ok());
  CHECK(none->empty());
}

TEST_CASE("envelope: each check gives its own error, in the documented order") {
  const auto image = sealed(bytes_of({9, 8, 7, 6, 5, 4, 3, 2}));
  REQUIRE(open_code(image) == errc::ok);
  CHECK(open_code(std::span(image).first(envelope::overhead - 1)) == errc::truncated);
  CHECK(open_code({}) == errc::truncated);
  auto magic = image;
  magic[3] = std::byte{0};
  CHECK(open_code(magic) == errc::bad_magic);
  CHECK(envelope::open({checkpoint::kind.magic, kind.version}, image).code() == errc::bad_magic);  // another kind
  CHECK(open_code(resealed(image, 4, 3)) == errc::unsupported_version);  // older
  CHECK(open_code(resealed(image, 4, 5)) == errc::unsupported_version);  // newer
  CHECK(open_code(resealed(image, 6, 1)) == errc::bad_header);
  CHECK(open_code(std::span(image).first(image.size() - 1)) == errc::truncated);
  auto longer = image;
  longer.push_back(std::byte{0});
  CHECK(open_code(longer) == errc::size_mismatch);
  auto length = image;
  store_le<std::uint64_t>(length.data() + 8, ~std::uint64_t{0});  // no overflow in the length check
  CHECK(open_code(length) == errc::truncated);
  for (std::size_t at : {std::size_t{16}, std::size_t{23}, image.size() - 1}) {
    auto flipped = image;
    flipped[at] ^= std::byte{0x20};
    CHECK(open_code(flipped) == errc::checksum_mismatch);
  }
  // The earlier check wins: a wrong magic with a wrong CRC is bad_magic; an old version with
  // a wrong CRC is unsupported_version.
  auto both = magic;
  both[20] ^= std::byte{1};
  CHECK(open_code(both) == errc::bad_magic);
  auto old = image;
  old[4] = std::byte{1};
  CHECK(open_code(old) == errc::unsupported_version);
}

TEST_CASE("golden bytes: a compressor checkpoint, version 3") {
  const auto golden = bytes_of({
      0x47, 0x43, 0x53, 0x54, 0x03, 0x00, 0x00, 0x00, 0x38, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x02, 0x02, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00, 0x3f, 0xc2, 0x3f, 0x72, 0x7c,
  });
  using C = compressor<partition::whole, sparsify::topk, quantize::bf16, feedback::residual>;
  const C comp;
  REQUIRE(comp.codec_id() == 0x02020000u);
  auto st = comp.make_state(3);
  st.residual = {1.0f, -2.0f, 0.5f};
  st.step = 5;
  std::vector<std::byte> image(checkpoint_bytes(st));
  REQUIRE(save_checkpoint(st, comp.codec_id(), image).ok());
  CHECK(image == golden);
  auto back = comp.make_state(3);
  REQUIRE(load_checkpoint(golden, comp.codec_id(), back).ok());
  CHECK(back.step == 5);
  CHECK(back.residual == st.residual);
}

TEST_CASE("golden bytes: a TAGC checkpoint, version 2") {
  const auto golden = bytes_of({
      0x47, 0x43, 0x54, 0x43, 0x02, 0x00, 0x00, 0x00, 0x44, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf6, 0x84,
      0x54, 0xab, 0xf9, 0xb0, 0x58, 0x16, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
      0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x03, 0x02, 0x01, 0x02, 0x00,
      0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3e, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00, 0x3f, 0x66, 0x2c, 0xaf, 0x18,
  });
  const tagc::codec c;
  REQUIRE(c.codec_id() == 0xab5484f6u);
  REQUIRE(tagc::select_fingerprint(c.get_config()) == 0x1658b0f9u);
  tagc::state st;
  REQUIRE(c.make_state(3, 2, 1, st).ok());
  st.residual = {1.0f, -2.0f, 0.5f};
  st.thresholds = {0.25f, 0.0f};
  st.step = 4;
  st.key = 0x01020304u;
  std::vector<std::byte> image(tagc::checkpoint_bytes(st));
  REQUIRE(tagc::save_checkpoint(c, st, image).ok());
  CHECK(image == golden);
  tagc::state back;
  REQUIRE(c.make_state(3, 2, 1, back).ok());
  REQUIRE(tagc::load_checkpoint(c, golden, back).ok());
  CHECK(back.residual == st.residual);
  CHECK(back.thresholds == st.thresholds);
  CHECK(back.step == 4);
  CHECK(back.key == 0x01020304u);
}
