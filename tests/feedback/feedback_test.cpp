// Feedback policies step by step: residual with a scale (decay, learning-rate ratio) stays
// exact; DGC momentum correction, factor masking and local clipping; the density warm-up.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "support/codec.hpp"
#include "support/random.hpp"

using namespace gradcomp;

namespace {

// One step: what the receiver decodes.
template <class C>
std::vector<float> step(const C& comp, const std::vector<float>& g, state& st) {
  return test::decompressed(comp, test::compress_all(comp, g, st), g.size());
}

}  // namespace

TEST_CASE("residual with a scale: sent + e' == g + s e, element by element, for 100 steps") {
  const std::size_t n = 20000;
  const auto run = [&](auto comp) {
    auto st = comp.make_state(n);
    for (std::uint32_t t = 0; t < 100; ++t) {
      const auto g = test::heavy_tailed(n, 500 + t);
      const std::vector<float> e_old = st.residual;
      const auto sent = step(comp, g, st);
      const float s = comp.get_config().feedback.scale;
      std::size_t broken = 0;
      for (std::size_t i = 0; i < n; ++i) broken += sent[i] + st.residual[i] != g[i] + s * e_old[i];
      REQUIRE(broken == 0);
    }
  };
  for (float s : {1.0f, 0.5f, 0.9f, 1.25f, 0.0f}) {
    CAPTURE(s);
    run(compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>(
        {.partition = {.chunk_bytes = 4096}, .sparsify = {.density = 0.01}, .feedback = {.scale = s}}));
    run(compressor<partition::whole, sparsify::threshold, quantize::none, feedback::residual>(
        {.sparsify = {.density = 0.02}, .feedback = {.scale = s}}));
    run(compressor<partition::whole, sparsify::randomk, quantize::bf16, feedback::residual>(
        {.sparsify = {.density = 0.05}, .feedback = {.scale = s}}));
  }
  using C = compressor<partition::whole, sparsify::dense, quantize::bf16, feedback::residual>;
  CHECK(C({.feedback = {.scale = -1.0f}}).validate() == errc::invalid_argument);
  CHECK(C({.feedback = {.scale = INFINITY}}).validate() == errc::invalid_argument);
}

TEST_CASE("momentum: u = m u + g, v = v + u, sent positions masked (u = 0, v = x - sent)") {
  using C = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::momentum>;
  const std::size_t n = 30000;
  const C comp({.partition = {.chunk_bytes = 4 * 8192}, .sparsify = {.density = 0.01}, .feedback = {.factor = 0.9f}});
  auto st = comp.make_state(n);
  REQUIRE(st.momentum.size() == n);
  std::vector<float> u(n, 0.0f), v(n, 0.0f);  // reference
  for (std::uint32_t t = 0; t < 50; ++t) {
    const auto g = test::heavy_tailed(n, 900 + t);
    const auto sent = step(comp, g, st);
    std::size_t masked = 0, broken = 0;
    for (std::size_t i = 0; i < n; ++i) {
      u[i] = 0.9f * u[i] + g[i];
      v[i] = v[i] + u[i];
      if (sent[i] != 0.0f) {
        broken += st.momentum[i] != 0.0f;
        broken += sent[i] + st.residual[i] != v[i];  // conservation at the sent positions
        v[i] = v[i] - sent[i];
        u[i] = 0.0f;
        ++masked;
      }
      broken += st.momentum[i] != u[i] || st.residual[i] != v[i];
    }
    REQUIRE(broken == 0);
    CHECK(masked >= 300);  // ~1% of each chunk (a sent value may round to bf16 0 only if tiny)
  }
}

TEST_CASE("momentum: local clipping scales each chunk's gradient to the clip norm") {
  using C = compressor<partition::whole, sparsify::topk, quantize::none, feedback::momentum>;
  const std::size_t n = 10000;
  auto g = test::heavy_tailed(n, 4, 1.0f);
  double norm2 = 0;
  for (float x : g) norm2 += double(x) * x;
  const float clip = static_cast<float>(std::sqrt(norm2) / 4);
  const C comp({.sparsify = {.density = 0.001}, .feedback = {.factor = 0.5f, .clip_norm = clip}});
  auto st = comp.make_state(n);
  (void)step(comp, g, st);
  double u2 = 0;  // u = clipped g except at the sent positions
  for (std::size_t i = 0; i < n; ++i) u2 += double(st.momentum[i]) * st.momentum[i];
  CHECK(std::sqrt(u2) <= clip * 1.0001);
  CHECK(std::sqrt(u2) >= clip * 0.5);  // the top 0.1% carry less than 3/4 of the norm here
  const C off({.sparsify = {.density = 0.001}, .feedback = {.factor = 0.5f, .clip_norm = 1e30f}});
  auto st2 = off.make_state(n);
  (void)step(off, g, st2);
  std::size_t unclipped = 0;
  for (std::size_t i = 0; i < n; ++i) unclipped += !(st2.momentum[i] == 0.0f || st2.momentum[i] == g[i]);
  CHECK(unclipped == 0);
  CHECK(C({.feedback = {.factor = 1.0f}}).validate() == errc::invalid_argument);
  CHECK(C({.feedback = {.clip_norm = -1.0f}}).validate() == errc::invalid_argument);
}

TEST_CASE("DGC density warm-up: 25%, 6.25%, 1.5625%, 0.4%, then 0.1% for good") {
  const sparsify::density_schedule dgc;
  CHECK(dgc.at(0) == 0.25);
  CHECK(dgc.at(1) == 0.0625);
  CHECK(dgc.at(2) == 0.015625);
  CHECK(dgc.at(3) == 0.004);
  CHECK(dgc.at(4) == 0.001);
  CHECK(dgc.at(1000) == 0.001);
  const sparsify::density_schedule slow{.densities = {0.5, 0.05}, .stages = 2, .epochs_per_stage = 3};
  CHECK(slow.at(2) == 0.5);
  CHECK(slow.at(3) == 0.05);
  CHECK(slow.at(99) == 0.05);
  // The trainer advances it between steps; the state made for the largest density serves all.
  using C = compressor<partition::whole, sparsify::topk, quantize::bf16, feedback::momentum>;
  C comp({.sparsify = {.density = dgc.at(0)}});
  auto st = comp.make_state(4000);
  for (std::uint64_t epoch = 0; epoch < 6; ++epoch) {
    auto cfg = comp.get_config();
    cfg.sparsify.density = dgc.at(epoch);
    comp.set_config(cfg);
    const auto sent = step(comp, test::heavy_tailed(4000, unsigned(epoch)), st);
    std::size_t kept = 0;
    for (float x : sent) kept += x != 0.0f;
    CHECK(kept == sparsify::topk::kept({dgc.at(epoch)}, 4000));
  }
}
