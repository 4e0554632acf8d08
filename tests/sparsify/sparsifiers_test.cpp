// The sparsifiers through the compressor: threshold (DGC / TAGC), random-k with a
// shared seed, row top-k, and the index encodings every listed sparse frame chooses from.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "support/codec.hpp"
#include "support/frames.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

using namespace gradcomp;
using test::compress_all;

namespace {

double squared_norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return s;
}

std::vector<float> gaussian(std::size_t n, std::uint32_t seed, float scale = 1e-3f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

std::vector<float> log_normal(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::lognormal_distribution<float> ln(-7.0f, 1.5f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (i % 2 ? -1.0f : 1.0f) * ln(gen);
  return v;
}

}  // namespace

TEST_CASE("index encodings: each top-k frame takes the smallest, and decodes like a u32 list") {
  using C = compressor<partition::whole, sparsify::topk, quantize::bf16, feedback::none>;
  const std::size_t n = 200003;
  const auto x = test::heavy_tailed(n, 21);
  for (double density : {0.0005, 0.01, 0.05, 0.2, 0.9}) {
    CAPTURE(density);
    C compact({.sparsify = {.density = density}});
    C lists({.sparsify = {.density = density}, .compact_indices = false});
    auto s1 = compact.make_state(n), s2 = lists.make_state(n);
    const auto p1 = compress_all(compact, x, s1), p2 = compress_all(lists, x, s2);
    const auto h1 = test::header_of(p1), h2 = test::header_of(p2);
    CHECK(h2.indices == frame::index_format::u32_list);
    CHECK(test::frame_indices(p1) == test::frame_indices(p2));
    const std::size_t k = h1.kept_count;
    const auto idx = test::frame_indices(p2);
    const std::size_t sizes[3] = {4 * k, indices::delta_bytes(k, indices::delta_width(idx.data(), k)), (n + 7) / 8};
    CHECK(h1.index_bytes == *std::min_element(sizes, sizes + 3));
    if (density == 0.9) CHECK(h1.indices == frame::index_format::bitmap);
    if (density == 0.01) CHECK(h1.indices == frame::index_format::delta);
    CHECK(p1.size() <= p2.size());
    CHECK(test::decompressed(compact, p1, n) == test::decompressed(lists, p2, n));
  }
}

TEST_CASE("malformed index sections are rejected and leave the output untouched") {
  using C = compressor<partition::whole, sparsify::topk, quantize::none, feedback::none>;
  const std::size_t n = 5000;
  const auto x = test::heavy_tailed(n, 5);
  const auto check = [&](double density, frame::index_format format, auto tamper, errc expect) {
    C comp({.sparsify = {.density = density}});
    auto st = comp.make_state(n);
    auto p = compress_all(comp, x, st);
    REQUIRE(test::header_of(p).indices == format);
    tamper(std::span(p), test::header_of(p));
    test::reseal(p);
    std::vector<float> out(n, 3.0f);
    CHECK(comp.decompress<float>(p, std::span(out)) == expect);
    CHECK(comp.accumulate<float>(p, std::span(out)) == expect);
    CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 3.0f; }));
  };
  // delta (density 1%): width too large, reserved byte, a gap running past the chunk
  check(0.01, frame::index_format::delta, [](std::span<std::byte> p, const frame::header& h) { p[h.index_offset()] = std::byte{33}; },
        errc::bad_header);
  check(0.01, frame::index_format::delta, [](std::span<std::byte> p, const frame::header& h) { p[h.index_offset() + 3] = std::byte{1}; },
        errc::bad_header);
  check(0.01, frame::index_format::delta,
        [](std::span<std::byte> p, const frame::header& h) { p[h.index_offset() + 8] = std::byte{0xff}; p[h.index_offset() + 9] = std::byte{0xff}; },
        errc::index_out_of_range);
  // bitmap (density 50%): a bit cleared (popcount != kept), a bit set past the chunk
  check(0.5, frame::index_format::bitmap,
        [](std::span<std::byte> p, const frame::header& h) {
          for (std::size_t b = 0;; ++b)
            if (p[h.index_offset() + b] != std::byte{0}) {
              p[h.index_offset() + b] &= std::byte(static_cast<unsigned>(p[h.index_offset() + b]) - 1u);
              return;
            }
        },
        errc::bad_header);
  // u32 list (compact off): not ascending, out of range
  const auto lists = [&](auto tamper, errc expect) {
    C comp({.sparsify = {.density = 0.01}, .compact_indices = false});
    auto st = comp.make_state(n);
    auto p = compress_all(comp, x, st);
    tamper(std::span(p), test::header_of(p));
    test::reseal(p);
    std::vector<float> out(n, 3.0f);
    CHECK(comp.decompress<float>(p, std::span(out)) == expect);
    CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 3.0f; }));
  };
  lists([](std::span<std::byte> p, const frame::header& h) { test::poke<std::uint32_t>(p, h.index_offset() + 4, 0); },
        errc::index_not_ascending);
  lists([](std::span<std::byte> p, const frame::header& h) { test::poke<std::uint32_t>(p, h.index_offset() + 4 * (h.kept_count - 1), 5000); },
        errc::index_out_of_range);
}

TEST_CASE("threshold: kept count within DGC's bounds, kept set is {|x| >= t}, threshold carried to the next step") {
  for (auto rule : {sparsify::threshold::rule::dgc, sparsify::threshold::rule::tagc}) {
    using C = compressor<partition::chunks, sparsify::threshold, quantize::none, feedback::residual>;
    const std::size_t n = 300000;
    C comp({.partition = {.chunk_bytes = 4 * 100000}, .sparsify = {.density = 0.01, .estimate = rule}});
    auto st = comp.make_state(n);
    REQUIRE(st.thresholds.size() == 3);  // one per chunk (bf16 gradients would make 2)
    for (std::uint32_t step = 0; step < 3; ++step) {
      CAPTURE(step);
      const auto g = step == 0 ? gaussian(n, 1) : step == 1 ? log_normal(n, 2) : test::heavy_tailed(n, 3);
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = g[i] + st.residual[i];
      auto p = compress_all(comp, g, st);
      std::vector<float> out(n);
      REQUIRE(comp.decompress<float>(p, std::span(out)).ok());
      for (std::size_t c = 0; c < 3; ++c) {
        const auto frame = test::split_frames(p)[c];
        const auto h = test::header_of(frame);
        CHECK(h.kept_count >= 800);
        CHECK(h.kept_count <= 1300);
        const float t = st.thresholds[c];
        CHECK(t > 0.0f);
        for (std::size_t j = 0; j < 100000; ++j) {
          const std::size_t i = c * 100000 + j;
          if ((std::fabs(x[i]) >= t) != (out[i] != 0.0f)) {
            FAIL_CHECK("element " << i << " kept " << (out[i] != 0.0f) << " with |x| " << std::fabs(x[i]) << " t " << t);
            break;
          }
        }
      }
      std::size_t broken = 0;  // conservation
      for (std::size_t i = 0; i < n; ++i) broken += out[i] + st.residual[i] != x[i];
      CHECK(broken == 0);
    }
  }
}

TEST_CASE("threshold: adversarial inputs fall back to the exact top-k and never exceed the capacity") {
  using C = compressor<partition::whole, sparsify::threshold, quantize::none, feedback::none>;
  const std::size_t n = 50000;
  std::vector<std::vector<float>> inputs = {std::vector<float>(n, 0.5f), std::vector<float>(n, 0.0f)};
  std::vector<float> few(n, 0.0f);
  few[10] = 1e3f, few[20000] = -2e3f, few[49999] = 5e2f;
  inputs.push_back(few);
  for (const auto& x : inputs) {
    C comp({.sparsify = {.density = 0.01}});
    auto st = comp.make_state(n);
    const auto p = compress_all(comp, x, st);
    const auto h = test::header_of(p);
    CHECK(h.kept_count == 500);  // exactly k: the exact fallback
    const auto idx = test::frame_indices(p);
    CHECK(idx == test::reference_topk(test::keys_of(x), 500));
  }
}

TEST_CASE("random-k: the same seed keeps the same positions on every rank, frames carry no index list") {
  using C = compressor<partition::chunks, sparsify::randomk, quantize::none, feedback::none>;
  const std::size_t n = 100000;
  const C a({.partition = {.chunk_bytes = 4 * 30000}, .sparsify = {.density = 0.02}, .seed = 99});
  const C b({.partition = {.chunk_bytes = 4 * 30000}, .sparsify = {.density = 0.02}, .seed = 99});
  auto sa = a.make_state(n), sb = b.make_state(n);
  const auto pa = compress_all(a, test::heavy_tailed(n, 1), sa), pb = compress_all(b, test::heavy_tailed(n, 2), sb);
  REQUIRE(pa.size() == pb.size());
  const auto oa = test::decompressed(a, pa, n), ob = test::decompressed(b, pb, n);
  std::size_t kept = 0, differ = 0;
  for (std::size_t i = 0; i < n; ++i) {
    differ += (oa[i] != 0.0f) != (ob[i] != 0.0f);
    kept += oa[i] != 0.0f;
  }
  CHECK(differ == 0);
  CHECK(kept == 600 + 600 + 600 + 200);
  const auto h = test::header_of(pa);
  CHECK(h.indices == frame::index_format::seeded);
  CHECK(h.index_bytes == 8);
  // Another seed on the receiver: refused, output untouched.
  const C other({.partition = {.chunk_bytes = 4 * 30000}, .sparsify = {.density = 0.02}, .seed = 98});
  std::vector<float> out(n, 1.0f);
  CHECK(other.accumulate<float>(pa, std::span(out)) == errc::codec_mismatch);
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 1.0f; }));
  // Values land where they came from.
  const auto g = test::heavy_tailed(n, 1);
  std::size_t misplaced = 0;
  for (std::size_t i = 0; i < n; ++i) misplaced += !(oa[i] == 0.0f || oa[i] == g[i]);
  CHECK(misplaced == 0);
}

TEST_CASE("random-k: every position equally likely over steps (chi-square), contraction in expectation") {
  using C = compressor<partition::whole, sparsify::randomk, quantize::none, feedback::none>;
  const std::size_t n = 200, steps = 4000;
  const C comp({.sparsify = {.density = 0.05}, .seed = 5});
  auto st = comp.make_state(n);
  const auto x = test::heavy_tailed(n, 8);
  std::vector<double> hits(n, 0.0);
  double kept_energy = 0.0;
  for (std::size_t s = 0; s < steps; ++s) {
    const auto out = test::decompressed(comp, compress_all(comp, x, st), n);
    for (std::size_t i = 0; i < n; ++i) hits[i] += out[i] != 0.0f;
    kept_energy += squared_norm(out);
  }
  const double expect = double(steps) * 10 / n;
  double chi2 = 0;
  for (double h : hits) chi2 += (h - expect) * (h - expect) / expect;
  CHECK(chi2 < 199 + 5 * std::sqrt(2.0 * 199));  // 199 degrees of freedom, 5 deviations
  CHECK(kept_energy / steps == doctest::Approx(0.05 * squared_norm(x)).epsilon(0.1));
}

TEST_CASE("row top-k: each row keeps its k largest |x|, with residual feedback, contraction per row") {
  using C = compressor<partition::whole, sparsify::row_topk, quantize::none, feedback::residual>;
  const std::size_t cols = 768, rows = 40, n = cols * rows + 100;  // a last, shorter row
  for (std::size_t k : {1u, 8u, 77u}) {
    CAPTURE(k);
    C comp({.sparsify = {.cols = cols, .k_per_row = k}});
    auto st = comp.make_state(n);
    const auto g = test::heavy_tailed(n, 31);
    const auto p = compress_all(comp, g, st);
    CHECK(test::header_of(p).kept_count == rows * k + std::min<std::size_t>(k, 100));
    const auto out = test::decompressed(comp, p, n);
    const auto keys = test::keys_of(g);
    for (std::size_t row = 0; row < n; row += cols) {
      const std::size_t len = std::min(cols, n - row);
      std::vector<bool> want(len, false);
      for (std::uint32_t i : test::reference_topk(keys, k, row, len)) want[i - row] = true;
      double sent = 0, all = 0;
      for (std::size_t j = 0; j < len; ++j) {
        REQUIRE((out[row + j] != 0.0f) == want[j]);
        all += double(g[row + j]) * g[row + j];
        sent += double(out[row + j]) * out[row + j];
        REQUIRE(out[row + j] + st.residual[row + j] == g[row + j]);
      }
      CHECK(all - sent <= (1.0 - double(std::min(k, len)) / double(len)) * all + 1e-30);
    }
  }
  // density instead of k
  C by_density({.sparsify = {.cols = cols, .density = 0.01}});
  auto st = by_density.make_state(n);
  CHECK(test::header_of(compress_all(by_density, test::heavy_tailed(n, 3), st)).kept_count == rows * 8 + 8);
}
