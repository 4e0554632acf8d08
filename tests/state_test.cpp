// Checkpoint and restart: a restored state continues bit for bit; bad images are rejected
// and leave the state as it was.
#include <gradcomp/core/byteio.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "support/random.hpp"

using namespace gradcomp;

namespace {
using C = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;

std::vector<std::byte> step(const C& comp, state& st, std::uint32_t seed) {
  const auto g = test::heavy_tailed(st.size, seed);
  std::vector<std::byte> payload(comp.max_payload_bytes<float>(g.size()));
  const auto w = comp.compress<float>(g, st, payload);
  REQUIRE(w.ok());
  payload.resize(*w);
  return payload;
}
}  // namespace

TEST_CASE("a restored state continues exactly where the saved one was") {
  C comp({.partition = {.chunk_bytes = 8192}, .sparsify = {.density = 0.02}});
  auto st = comp.make_state(10000);
  for (std::uint32_t s = 0; s < 5; ++s) (void)step(comp, st, s);
  std::vector<std::byte> image(checkpoint_bytes(st));
  const auto saved = save_checkpoint(st, comp.codec_id(), image);
  REQUIRE(saved.ok());
  CHECK(*saved == image.size());

  auto restored = comp.make_state(10000);
  REQUIRE(load_checkpoint(image, comp.codec_id(), restored).ok());
  CHECK(restored.step == 5);
  CHECK(restored.residual == st.residual);
  for (std::uint32_t s = 5; s < 10; ++s) CHECK(step(comp, st, s) == step(comp, restored, s));
}

TEST_CASE("bad checkpoints are rejected and leave the state unchanged") {
  C comp({.sparsify = {.density = 0.1}});
  auto st = comp.make_state(100);
  (void)step(comp, st, 1);
  std::vector<std::byte> image(checkpoint_bytes(st));
  REQUIRE(save_checkpoint(st, comp.codec_id(), image).ok());
  std::vector<std::byte> too_small(image.size() - 1);
  CHECK(save_checkpoint(st, comp.codec_id(), too_small).code() == errc::buffer_too_small);

  auto target = comp.make_state(100);
  const auto before = target.residual;
  auto expect = [&](std::span<const std::byte> bytes, std::uint32_t codec, errc code) {
    CHECK(load_checkpoint(bytes, codec, target) == code);
    CHECK(target.step == 0);
    CHECK(target.residual == before);
  };
  expect(std::span(image).first(20), comp.codec_id(), errc::truncated);
  expect(std::span(image).first(image.size() - 4), comp.codec_id(), errc::truncated);
  auto flipped = image;
  flipped[60] ^= std::byte{1};
  expect(flipped, comp.codec_id(), errc::checksum_mismatch);
  auto magic = image;
  magic[0] = std::byte{0};
  expect(magic, comp.codec_id(), errc::bad_magic);
  auto version = image;
  version[4] = std::byte{9};
  expect(version, comp.codec_id(), errc::unsupported_version);
  expect(image, comp.codec_id() ^ 1u, errc::codec_mismatch);
  auto longer = image;
  longer.push_back(std::byte{0});
  expect(longer, comp.codec_id(), errc::size_mismatch);
  auto other_size = comp.make_state(99);
  CHECK(load_checkpoint(image, comp.codec_id(), other_size) == errc::size_mismatch);
}

TEST_CASE("momentum and thresholds are checkpointed: DGC restarts bit for bit") {
  using D = compressor<partition::chunks, sparsify::threshold, quantize::bf16, feedback::momentum>;
  const D comp({.partition = {.chunk_bytes = 16384}, .sparsify = {.density = 0.02}});
  auto st = comp.make_state(20000);
  REQUIRE(st.thresholds.size() == 5);  // one per chunk of the finer plan: fp32 (4096 values) over bf16 (8192)
  const auto run = [&](state& s, std::uint32_t seed) {
    const auto g = test::heavy_tailed(s.size, seed);
    std::vector<std::byte> payload(comp.max_payload_bytes<float>(g.size()));
    const auto w = comp.compress<float>(g, s, payload);
    REQUIRE(w.ok());
    payload.resize(*w);
    return payload;
  };
  for (std::uint32_t s = 0; s < 4; ++s) (void)run(st, s);
  std::vector<std::byte> image(checkpoint_bytes(st));
  REQUIRE(save_checkpoint(st, comp.codec_id(), image).ok());
  auto restored = comp.make_state(20000);
  REQUIRE(load_checkpoint(image, comp.codec_id(), restored).ok());
  CHECK(restored.momentum == st.momentum);
  CHECK(restored.thresholds == st.thresholds);
  for (std::uint32_t s = 4; s < 8; ++s) CHECK(run(st, s) == run(restored, s));
}

TEST_CASE("checkpoints of versions 1 and 2 (before the envelope) are refused as unsupported_version") {
  C comp({.sparsify = {.density = 0.1}});
  auto st = comp.make_state(50);
  (void)step(comp, st, 3);
  // Version 1: magic | version | 0 | codec_id | 0 | size | step | residual count | residual | CRC.
  std::vector<std::byte> v1(40 + 4 * 50 + 4);
  store_le<std::uint32_t>(v1.data(), checkpoint::kind.magic);
  store_le<std::uint16_t>(v1.data() + 4, 1);
  store_le<std::uint32_t>(v1.data() + 8, comp.codec_id());
  store_le<std::uint64_t>(v1.data() + 16, 50);
  store_le<std::uint64_t>(v1.data() + 24, st.step);
  store_le<std::uint64_t>(v1.data() + 32, 50);
  std::memcpy(v1.data() + 40, st.residual.data(), 200);
  store_le<std::uint32_t>(v1.data() + 240, crc32c(std::span<const std::byte>(v1.data(), 240)));
  // Version 2: the same with momentum and threshold counts (both 0) at 40 and 48.
  std::vector<std::byte> v2(56 + 4 * 50 + 4);
  std::memcpy(v2.data(), v1.data(), 40);
  store_le<std::uint16_t>(v2.data() + 4, 2);
  std::memcpy(v2.data() + 56, st.residual.data(), 200);
  store_le<std::uint32_t>(v2.data() + 256, crc32c(std::span<const std::byte>(v2.data(), 256)));
  auto target = comp.make_state(50);
  for (const auto* old : {&v1, &v2}) {
    const status s = load_checkpoint(*old, comp.codec_id(), target);
    CHECK(s == errc::unsupported_version);
    CHECK(target.step == 0);
    CHECK(target.residual == std::vector<float>(50, 0.0f));
  }
}
