// Per-chunk telemetry: the figures it records against the frames and state they describe,
// the same bytes and state as the unobserved calls, and one entry per chunk of a router step.
#include <doctest/doctest.h>

#include <gradcomp/model/published.hpp>
#include <gradcomp/model/router.hpp>
#include <gradcomp/model/tagc.hpp>
#include <gradcomp/model/telemetry.hpp>

#include <cmath>
#include <span>
#include <vector>

#include "support/frames.hpp"
#include "support/random.hpp"

namespace gc = gradcomp;
namespace gm = gradcomp::model;

TEST_CASE("telemetry: kept, bytes, ratio, norms and error of each chunk, the same frames as compress()") {
  gm::sketch_stand_in::config cfg;
  cfg.partition.chunk_bytes = 4000;  // 1000 floats
  cfg.sparsify.density = 0.1;
  const gm::sketch_stand_in c(cfg);
  const auto g = gc::test::heavy_tailed(3500, 5);
  auto plain_state = c.make_state(g.size()), observed_state = c.make_state(g.size());
  std::vector<std::byte> plain(c.max_payload_bytes<float>(g.size())), observed(plain.size());
  gm::telemetry tel;
  for (int step = 0; step < 2; ++step) {
    tel.clear();
    const auto a = gm::observed_compress<gm::sketch_stand_in, float>(c, g, plain_state, plain, nullptr);
    const auto b = gm::observed_compress<gm::sketch_stand_in, float>(c, g, observed_state, observed, &tel, 3, gc::role::mlp_in, 1);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(*a == *b);
    CHECK(std::equal(plain.begin(), plain.begin() + static_cast<std::ptrdiff_t>(*a), observed.begin()));
    CHECK(plain_state.residual == observed_state.residual);
    CHECK(plain_state.step == observed_state.step);

    REQUIRE(tel.chunks.size() == 4);
    const auto frames = gc::test::split_frames(std::span<std::byte>(observed.data(), *b));
    std::vector<float> decoded(g.size(), 0.0f);
    REQUIRE(c.decompress<float>(std::span<const std::byte>(observed.data(), *b), decoded).ok());
    for (std::size_t i = 0; i < 4; ++i) {
      const gm::chunk_stats& s = tel.chunks[i];
      const auto h = gc::test::header_of(frames[i]);
      CHECK(s.tensor == 3);
      CHECK(s.tensor_role == gc::role::mlp_in);
      CHECK(s.slot == 1);
      CHECK(s.chunk == i);
      CHECK(s.codec_id == c.codec_id());
      CHECK(s.elements == (i < 3 ? 1000 : 500));
      CHECK(s.kept == (i < 3 ? 100 : 50));
      CHECK(s.bytes == frames[i].size());
      CHECK(s.ratio == doctest::Approx(4.0 * static_cast<double>(s.elements) / static_cast<double>(s.bytes)));
      CHECK(s.seconds >= 0);
      double g2 = 0, e2 = 0, d2 = 0;
      for (std::size_t j = h.element_offset; j < h.element_offset + h.dense_count; ++j) {
        g2 += std::pow(static_cast<double>(g[j]), 2);
        e2 += std::pow(static_cast<double>(observed_state.residual[j]), 2);
        d2 += std::pow(static_cast<double>(decoded[j]) - g[j], 2);
      }
      CHECK(s.gradient_norm == doctest::Approx(std::sqrt(g2)));
      CHECK(s.residual_norm == doctest::Approx(std::sqrt(e2)));
      CHECK(s.rel_error == doctest::Approx(std::sqrt(d2 / g2)));
      if (step == 0) CHECK(s.rel_error == doctest::Approx(s.residual_norm / s.gradient_norm));  // e = g - sent
    }
  }
  // errors off: no decode, rel_error left 0.
  tel.errors = false;
  tel.clear();
  REQUIRE(gm::observed_compress<gm::sketch_stand_in, float>(c, g, observed_state, observed, &tel).ok());
  CHECK(tel.chunks[0].rel_error == 0);
  CHECK(tel.chunks[0].kept == 100);
}

TEST_CASE("telemetry: a router step records every chunk with its tensor, role and slot") {
  const gc::layout l = gm::gpt2_layout({1, 32, 128, 16, true});
  gm::sketch_stand_in::config sk;
  sk.partition.chunk_bytes = 4096;
  sk.sparsify.density = 0.1;
  const gm::tagc_router<> r(l, gm::tagc_routing(false, 100), {gm::sketch_stand_in(sk), gm::bf16_cast(), gm::fp32_plain()});
  auto st = r.make_state(), quiet = r.make_state();
  const auto g = gc::test::heavy_tailed(l.extent(), 9);
  std::vector<std::byte> p(r.max_payload_bytes<float>()), q(p.size());
  gm::telemetry tel;
  const auto w = r.compress<float>(g, st, p, &tel);
  REQUIRE(w.ok());
  CHECK(r.compress<float>(g, quiet, q).value() == *w);
  CHECK(p == q);
  REQUIRE(tel.chunks.size() == r.chunk_count<float>());
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < tel.chunks.size(); ++i) {
    const gm::chunk_stats& s = tel.chunks[i];
    const auto at = r.locate<float>(i);
    CHECK(s.tensor == at.tensor);
    CHECK(s.chunk == at.chunk);
    CHECK(s.tensor_role == r.role_of(at.tensor));
    CHECK(s.slot == r.route(at.tensor));
    CHECK(s.codec_id == r.codec_of(s.slot));
    if (s.slot == gm::tagc_plain_slot) CHECK(s.rel_error == 0);
    if (s.slot == gm::tagc_bf16_slot) CHECK(s.rel_error < 1.0 / 256);
    bytes += s.bytes;
  }
  CHECK(bytes == *w);
  // The pipelined form records the same.
  gm::telemetry per_chunk;
  auto st2 = r.make_state();
  for (std::size_t i = 0; i < r.chunk_count<float>(); ++i) {
    std::vector<std::byte> frame(r.max_frame_bytes<float>(i));
    REQUIRE(r.compress_chunk<float>(i, g, st2, frame, &per_chunk).ok());
  }
  REQUIRE(per_chunk.chunks.size() == tel.chunks.size());
  for (std::size_t i = 0; i < tel.chunks.size(); ++i) {
    CHECK(per_chunk.chunks[i].bytes == tel.chunks[i].bytes);
    CHECK(per_chunk.chunks[i].rel_error == tel.chunks[i].rel_error);
  }
}
