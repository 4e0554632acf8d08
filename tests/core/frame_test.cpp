// Frame format v1: golden bytes (computed independently from docs/wire-format.md) and every
// malformed-frame error, each leaving the output untouched.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "support/codec.hpp"
#include "support/frames.hpp"
#include "support/random.hpp"

using namespace gradcomp;
using test::bytes_of;
using test::compress_all;

namespace {

using topk_bf16 = compressor<partition::whole, sparsify::topk, quantize::bf16, feedback::none>;
using chunked_fp16 = compressor<partition::chunks, sparsify::dense, quantize::fp16, feedback::none>;

// The 104-byte frame of top-k (density 0.4) + bf16 over {0.5, -3, 0, 1.25, -0.0625}.
const std::vector<std::byte> golden_topk_bf16 = bytes_of({
    0x47, 0x43, 0x46, 0x52, 0x01, 0x00, 0x58, 0x00, 0x00, 0x00, 0x02, 0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7e, 0x90, 0xed, 0xb2, 0x01, 0x00,
    0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x40, 0xc0, 0xa0, 0x3f, 0x00, 0x00, 0x00, 0x00,
});

// The second frame (chunk 1 = elements 3..4) of dense fp16 over the same values held as bf16,
// chunk_bytes 6, at step 2.
const std::vector<std::byte> golden_dense_fp16_chunk1 = bytes_of({
    0x47, 0x43, 0x46, 0x52, 0x01, 0x00, 0x58, 0x00, 0x00, 0x00, 0x03, 0x01, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x57, 0x01, 0x9c, 0x01, 0x00, 0x3d,
    0x00, 0xac, 0x00, 0x00, 0x00, 0x00,
});

const std::vector<float> small_input = {0.5f, -3.0f, 0.0f, 1.25f, -0.0625f};

// Decoding `payload` must fail with `code` and leave `out` as it was.
template <class C>
void expect_rejected(const C& comp, std::span<const std::byte> payload, errc code, std::size_t n = 5) {
  std::vector<float> out(n, 42.0f);
  CHECK(comp.template decompress<float>(payload, std::span(out)) == code);
  CHECK(comp.template accumulate<float>(payload, std::span(out)) == code);
  CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 42.0f; }));
}

}  // namespace

TEST_CASE("golden bytes: top-k + bf16 frame") {
  topk_bf16 comp({.sparsify = {.density = 0.4}, .compact_indices = false});
  auto st = comp.make_state(5);
  CHECK(compress_all(comp, small_input, st) == golden_topk_bf16);
  std::vector<float> out(5, 9.0f);
  REQUIRE(comp.decompress<float>(golden_topk_bf16, std::span(out)).ok());
  CHECK(out == std::vector<float>{0.0f, -3.0f, 0.0f, 1.25f, 0.0f});
}

TEST_CASE("golden bytes: dense fp16 frame of a chunked bf16 gradient") {
  chunked_fp16 comp({.partition = {.chunk_bytes = 6}});
  std::vector<bf16_t> g;
  for (float x : small_input) g.push_back(bf16_t::from_float(x));
  auto st = comp.make_state(g.size());
  std::vector<std::byte> payload;
  for (int step = 0; step < 3; ++step) payload = compress_all(comp, g, st);
  const auto frames = test::split_frames(payload);
  REQUIRE(frames.size() == 2);
  CHECK(std::vector<std::byte>(frames[1].begin(), frames[1].end()) == golden_dense_fp16_chunk1);
  std::vector<bf16_t> out(5, bf16_t::from_float(7.0f));
  REQUIRE(comp.decompress<bf16_t>(golden_dense_fp16_chunk1, std::span(out)).ok());
  CHECK(out[0].to_float() == 7.0f);
  CHECK(out[3].to_float() == 1.25f);
  CHECK(out[4].to_float() == -0.0625f);
}

TEST_CASE("malformed frames: each error kind, output untouched") {
  topk_bf16 comp({.sparsify = {.density = 0.4}});
  const auto good = golden_topk_bf16;
  auto resealed = [](std::vector<std::byte> f) {
    frame::seal(f);
    return f;
  };

  SUBCASE("truncated: every proper prefix") {
    for (std::size_t len = 0; len < good.size(); ++len) {
      std::vector<float> out(5, 42.0f);
      const auto s = comp.decompress<float>(std::span(good).first(len), std::span(out));
      CHECK(s == errc::truncated);
      CHECK(out == std::vector<float>(5, 42.0f));
    }
  }
  SUBCASE("bad magic") {
    auto f = good;
    f[0] = std::byte{'X'};
    expect_rejected(comp, f, errc::bad_magic);
  }
  SUBCASE("unknown version") {
    auto f = good;
    test::poke<std::uint16_t>(f, 4, 2);
    expect_rejected(comp, f, errc::unsupported_version);
  }
  SUBCASE("bad header fields") {
    // 22: the transform word's reserved top half; 80: a transform seed without a transform
    for (std::size_t off : {6u, 12u, 13u, 14u, 22u, 80u}) {
      auto f = good;
      f[off] = std::byte{0x77};
      expect_rejected(comp, f, errc::bad_header);
    }
    auto f = good;
    f[101] = std::byte{1};  // padding after the values
    expect_rejected(comp, resealed(f), errc::bad_header);
  }
  SUBCASE("codec mismatch") {
    compressor<partition::whole, sparsify::topk, quantize::fp16, feedback::none> other({.sparsify = {.density = 0.4}});
    expect_rejected(other, good, errc::codec_mismatch);
    compressor<partition::whole, sparsify::dense, quantize::bf16, feedback::none> dense;
    expect_rejected(dense, good, errc::codec_mismatch);
    auto f = good;
    f[20] = std::byte{0x77};  // a transform this receiver does not apply
    expect_rejected(comp, resealed(f), errc::codec_mismatch);
  }
  SUBCASE("checksum mismatch: every single-byte corruption of the body or CRC is detected") {
    for (std::size_t off = frame::crc_offset; off < good.size(); ++off) {
      auto f = good;
      f[off] ^= std::byte{0x10};
      std::vector<float> out(5, 42.0f);
      const auto s = comp.decompress<float>(f, std::span(out));
      CHECK(!s.ok());
      CHECK(out == std::vector<float>(5, 42.0f));
      if (off < 96 || off >= 100 || off == frame::crc_offset) CHECK((s == errc::checksum_mismatch || s == errc::bad_header));
    }
    for (std::size_t off = 0; off < frame::crc_offset; ++off) {  // header corruption: some error, never a write
      for (std::uint8_t flip : {0x01, 0x80}) {
        auto f = good;
        f[off] ^= std::byte{flip};
        std::vector<float> out(5, 42.0f);
        CHECK(!comp.decompress<float>(f, std::span(out)).ok());
        CHECK(out == std::vector<float>(5, 42.0f));
      }
    }
  }
  SUBCASE("count too large") {
    auto f = good;
    test::poke<std::uint64_t>(f, 48, 6);  // kept 6 of 5
    expect_rejected(comp, resealed(f), errc::count_too_large);
  }
  SUBCASE("section sizes inconsistent with the kept count") {
    auto f = good;
    test::poke<std::uint64_t>(f, 48, 1);  // kept 1, but 2 indices and 2 values
    expect_rejected(comp, resealed(f), errc::bad_header);
  }
  SUBCASE("index out of range") {
    auto f = good;
    test::poke<std::uint32_t>(f, 92, 5);
    expect_rejected(comp, resealed(f), errc::index_out_of_range);
  }
  SUBCASE("indices not ascending") {
    auto f = good;
    test::poke<std::uint32_t>(f, 88, 3);  // {3, 3}
    expect_rejected(comp, resealed(f), errc::index_not_ascending);
    test::poke<std::uint32_t>(f, 88, 4);  // {4, 3}
    expect_rejected(comp, resealed(f), errc::index_not_ascending);
  }
  SUBCASE("non-finite value where the config forbids it") {
    auto f = good;
    test::poke<std::uint16_t>(f, 96, 0x7f80);  // +inf
    topk_bf16 strict({.sparsify = {.density = 0.4}, .allow_non_finite = false});
    expect_rejected(strict, resealed(f), errc::non_finite_value);
    std::vector<float> out(5);
    CHECK(comp.decompress<float>(resealed(f), std::span(out)).ok());  // the default carries it
    CHECK(std::isinf(out[1]));
  }
  SUBCASE("frame does not fit the receiver's buffer") {
    expect_rejected(comp, good, errc::size_mismatch, 4);
    expect_rejected(comp, good, errc::size_mismatch, 6);
    auto f = good;
    test::poke<std::uint32_t>(f, 16, 1);  // chunk 1 of a one-chunk plan
    expect_rejected(comp, resealed(f), errc::size_mismatch);
  }
  SUBCASE("empty payload and trailing garbage") {
    expect_rejected(comp, std::span<const std::byte>{}, errc::truncated);
    auto f = good;
    f.resize(f.size() + 8, std::byte{0});
    expect_rejected(comp, f, errc::truncated);
  }
}

TEST_CASE("a bad frame anywhere in a payload leaves every chunk untouched") {
  compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::none> comp(
      {.partition = {.chunk_bytes = 400}, .sparsify = {.density = 0.1}});
  const auto g = test::heavy_tailed(1000, 11);
  auto st = comp.make_state(g.size());
  auto payload = compress_all(comp, g, st);
  auto frames = test::split_frames(payload);
  REQUIRE(frames.size() == 10);
  frames.back()[frame::header_bytes] ^= std::byte{1};  // first index of the last frame
  std::vector<float> out(g.size(), 42.0f);
  CHECK(comp.accumulate<float>(payload, std::span(out)) == errc::checksum_mismatch);
  CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == 42.0f; }));
}

TEST_CASE("random bytes never decode") {
  topk_bf16 comp({.sparsify = {.density = 0.4}});
  for (std::uint32_t seed = 0; seed < 2000; ++seed) {
    auto bytes = test::random_bytes(seed % 300, seed);
    if (bytes.size() >= 4 && seed % 2) std::copy(golden_topk_bf16.begin(), golden_topk_bf16.begin() + 4,
                                                  reinterpret_cast<std::byte*>(bytes.data()));
    std::vector<float> out(5, 42.0f);
    CHECK(!comp.decompress<float>(std::as_bytes(std::span(bytes)), std::span(out)).ok());
    CHECK(out == std::vector<float>(5, 42.0f));
  }
}
