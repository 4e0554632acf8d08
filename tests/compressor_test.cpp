// The composition end to end on the CPU: round trips, exact top-k, contraction, error
// feedback conservation, chunked pipelining, size queries and argument errors.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <vector>

#include "support/codec.hpp"
#include "support/frames.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

using namespace gradcomp;
using test::compress_all;

namespace {

template <class T>
std::vector<T> to_elements(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_float<T>(v[i]);
  return out;
}

double squared_norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return s;
}

}  // namespace

TEST_CASE_TEMPLATE("dense casts round trip with the quantizer's own rounding", T, float, bf16_t) {
  const auto g32 = test::heavy_tailed(5003, 1);
  const auto g = to_elements<T>(g32);
  auto check = [&](auto comp, auto quant) {
    using Q = decltype(quant);
    auto st = comp.make_state(g.size());
    const auto payload = compress_all(comp, g, st);
    std::vector<T> out(g.size(), from_float<T>(7.0f));
    REQUIRE(comp.template decompress<T>(payload, std::span(out)).ok());
    for (std::size_t i = 0; i < g.size(); ++i) {
      const float expect = Q::decode({}, {}, Q::encode({}, {}, to_float(g[i]), 0));
      REQUIRE(float_bits(to_float(out[i])) == float_bits(to_float(from_float<T>(expect))));
    }
    // accumulate adds the same decoded values
    std::vector<T> acc(g.size(), from_float<T>(1.0f));
    REQUIRE(comp.template accumulate<T>(payload, std::span(acc)).ok());
    for (std::size_t i = 0; i < g.size(); ++i)
      REQUIRE(float_bits(to_float(acc[i])) == float_bits(to_float(from_float<T>(1.0f + to_float(out[i])))));
  };
  check(compressor<partition::whole, sparsify::dense, quantize::none, feedback::none>{}, quantize::none{});
  check(compressor<partition::whole, sparsify::dense, quantize::bf16, feedback::none>{}, quantize::bf16{});
  check(compressor<partition::chunks, sparsify::dense, quantize::fp16, feedback::none>({.partition = {.chunk_bytes = 1000}}),
        quantize::fp16{});
}

TEST_CASE("fp32 values travel bit for bit, NaN and infinities included") {
  compressor<partition::whole, sparsify::dense, quantize::none, feedback::none> comp;
  std::vector<float> g = {1.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -3.5f};
  auto st = comp.make_state(g.size());
  const auto payload = compress_all(comp, g, st);
  std::vector<float> out(g.size());
  REQUIRE(comp.decompress<float>(payload, std::span(out)).ok());
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(float_bits(out[i]) == float_bits(g[i]));
}

TEST_CASE("exact top-k equals a sort-based reference, ties to the lower index") {
  using C = compressor<partition::whole, sparsify::topk, quantize::none, feedback::none>;
  struct data_case {
    const char* name;
    std::vector<float> x;
  };
  std::vector<data_case> cases;
  cases.push_back({"heavy tailed", test::heavy_tailed(20011, 3)});
  cases.push_back({"all equal (boundary bin overflows the candidate list)", std::vector<float>(100000, 0.25f)});
  cases.push_back({"all zero", std::vector<float>(3001, 0.0f)});
  {
    std::vector<float> few_huge = test::heavy_tailed(9000, 4);
    few_huge[17] = 1e30f;
    few_huge[4000] = -1e30f;
    few_huge[8999] = INFINITY;
    cases.push_back({"a few huge", few_huge});
  }
  {
    std::vector<float> ties(50000);  // few distinct magnitudes, both signs, -0.0
    for (std::size_t i = 0; i < ties.size(); ++i) ties[i] = float(int(i * 7919 % 5) - 2) * 0.5f;
    ties[3] = -0.0f;
    cases.push_back({"many ties", ties});
  }
  {
    std::vector<float> same_bin(70000);  // one high-digit bin, distinct low bits
    for (std::size_t i = 0; i < same_bin.size(); ++i) same_bin[i] = bits_float(0x3f800000u | ((i * 2654435761u) & 0x7fffu));
    cases.push_back({"one high bin", same_bin});
  }
  cases.push_back({"large heavy tailed (sampled bracket)", test::heavy_tailed(300007, 12)});
  {
    // The strided sample sees only the large values: the bracket misleads, the fallback runs.
    const std::size_t n = 100000, s = cpu::detail::topk_selector::sample_size;
    std::vector<float> fooled = test::heavy_tailed(n, 13, 1e-3f);
    for (std::size_t j = 0; j < s; ++j) fooled[j * n / s] = 1.0f + float(j % 7);
    cases.push_back({"sample-adversarial", fooled});
  }
  cases.push_back({"single element", {-2.0f}});
  cases.push_back({"empty", {}});
  for (const auto& dc : cases) {
    for (double density : {1e-4, 0.001, 0.01, 0.1, 0.5, 0.999, 1.0}) {
      CAPTURE(dc.name);
      CAPTURE(density);
      C comp({.sparsify = {.density = density}});
      auto st = comp.make_state(dc.x.size());
      const auto payload = compress_all(comp, dc.x, st);
      const std::size_t k = sparsify::topk::kept({density}, dc.x.size());
      REQUIRE(test::header_of(payload).kept_count == k);
      REQUIRE(test::frame_indices(payload) == test::reference_topk(test::keys_of(dc.x), k));
    }
  }
}

TEST_CASE("top-k contraction: ||x - C(x)||^2 <= (1 - k/n) ||x||^2") {
  using C = compressor<partition::chunks, sparsify::topk, quantize::none, feedback::none>;
  for (std::uint32_t seed = 0; seed < 5; ++seed) {
    const auto x = test::heavy_tailed(30000 + seed * 777, seed);
    for (double density : {0.001, 0.01, 0.1, 0.3}) {
      C comp({.partition = {.chunk_bytes = 4 * 8192}, .sparsify = {.density = density}});
      auto st = comp.make_state(x.size());
      const auto payload = compress_all(comp, x, st);
      std::vector<float> out(x.size());
      REQUIRE(comp.decompress<float>(payload, std::span(out)).ok());
      std::vector<float> diff(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) diff[i] = x[i] - out[i];
      CHECK(squared_norm(diff) <= (1.0 - density) * squared_norm(x));
    }
  }
}

TEST_CASE_TEMPLATE("residual feedback conserves g + e exactly, step after step", T, float, bf16_t) {
  auto run = [](auto comp, double) {
    const std::size_t n = 12345;
    auto st = comp.make_state(n);
    std::vector<float> total_g(n, 0.0f);
    for (std::uint32_t step = 0; step < 100; ++step) {
      const auto g = to_elements<T>(test::heavy_tailed(n, 1000 + step));
      const std::vector<float> e_old = st.residual;
      const auto payload = compress_all(comp, g, st);
      std::vector<float> sent(n);
      REQUIRE(comp.template decompress<float>(payload, std::span(sent)).ok());
      for (std::size_t i = 0; i < n; ++i) {
        const float x = to_float(g[i]) + e_old[i];
        REQUIRE(sent[i] + st.residual[i] == x);  // sent + new residual == g + old residual
      }
    }
    CHECK(st.step == 100);
  };
  run(compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>(
          {.partition = {.chunk_bytes = 4096}, .sparsify = {.density = 0.01}}),
      0);
  run(compressor<partition::whole, sparsify::dense, quantize::bf16, feedback::residual>{}, 0);
  run(compressor<partition::whole, sparsify::topk, quantize::none, feedback::residual>({.sparsify = {.density = 0.05}}), 0);
}

TEST_CASE("error feedback keeps the residual bounded, so sent values track the gradients") {
  // With a delta-contraction C (top-k: delta = k/n), ||e_t|| <= q/(1-q) ||g|| for a constant
  // gradient, q = sqrt(1 - delta): the sum of sent values falls behind 200 g by at most that.
  const double density = 0.05;
  compressor<partition::whole, sparsify::topk, quantize::none, feedback::residual> comp({.sparsify = {.density = density}});
  const std::size_t n = 4000;
  const auto g = test::heavy_tailed(n, 9);
  auto st = comp.make_state(n);
  std::vector<float> sum(n, 0.0f);
  for (int step = 0; step < 200; ++step) {
    const auto payload = compress_all(comp, g, st);
    REQUIRE(comp.accumulate<float>(payload, std::span(sum)).ok());
  }
  std::vector<float> gap(n);
  for (std::size_t i = 0; i < n; ++i) gap[i] = sum[i] - 200.0f * g[i];
  const double q = std::sqrt(1.0 - density);
  CHECK(std::sqrt(squared_norm(gap)) <= 1.001 * q / (1.0 - q) * std::sqrt(squared_norm(g)));
  CHECK(std::sqrt(squared_norm(st.residual)) <= q / (1.0 - q) * std::sqrt(squared_norm(g)));
  // without feedback, the same compressor drops (1 - density) of the mass every step
  compressor<partition::whole, sparsify::topk, quantize::none, feedback::none> plain({.sparsify = {.density = density}});
  auto st_plain = plain.make_state(n);
  const auto once = compress_all(plain, g, st_plain);
  std::vector<float> sent(n);
  REQUIRE(plain.decompress<float>(once, std::span(sent)).ok());
  std::vector<float> plain_gap(n);
  for (std::size_t i = 0; i < n; ++i) plain_gap[i] = 200.0f * (sent[i] - g[i]);
  CHECK(squared_norm(gap) < 0.1 * squared_norm(plain_gap));
}

TEST_CASE("chunks are independent frames: compress_chunk + per-frame decode == whole payload") {
  using C = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;
  C comp({.partition = {.chunk_bytes = 4 * 1000}, .sparsify = {.density = 0.05}});
  const auto g = test::heavy_tailed(4567, 5);
  REQUIRE(comp.chunk_count<float>(g.size()) == 5);
  CHECK(comp.chunk<float>(g.size(), 4) == chunk_range{4000, 567});
  CHECK(comp.chunk_count<bf16_t>(g.size()) == 3);  // chunk size is in bytes

  auto st_whole = comp.make_state(g.size());
  auto payload = compress_all(comp, g, st_whole);
  auto st = comp.make_state(g.size());
  std::vector<std::byte> concatenated;
  std::vector<float> from_frames(g.size(), 0.0f);
  for (std::size_t i = 0; i < comp.chunk_count<float>(g.size()); ++i) {
    std::vector<std::byte> frame_bytes(comp.max_frame_bytes(comp.chunk<float>(g.size(), i).count));
    const auto w = comp.compress_chunk<float>(i, g, st, frame_bytes);
    REQUIRE(w.ok());
    frame_bytes.resize(*w);
    const auto h = test::header_of(frame_bytes);
    CHECK(h.chunk_id == i);
    CHECK(h.element_offset == comp.chunk<float>(g.size(), i).offset);
    REQUIRE(comp.decompress<float>(frame_bytes, std::span(from_frames)).ok());
    concatenated.insert(concatenated.end(), frame_bytes.begin(), frame_bytes.end());
  }
  comp.finish_step(st);
  CHECK(concatenated == payload);
  CHECK(st.residual == st_whole.residual);
  CHECK(st.step == 1);
  std::vector<float> whole(g.size());
  REQUIRE(comp.decompress<float>(payload, std::span(whole)).ok());
  CHECK(whole == from_frames);
}

TEST_CASE("decompress overwrites only the chunks present, unsent elements of a chunk become 0") {
  using C = compressor<partition::chunks, sparsify::topk, quantize::none, feedback::none>;
  C comp({.partition = {.chunk_bytes = 400}, .sparsify = {.density = 0.1}});
  const auto g = test::heavy_tailed(250, 6);
  auto st = comp.make_state(g.size());
  auto payload = compress_all(comp, g, st);
  const auto frames = test::split_frames(payload);
  REQUIRE(frames.size() == 3);
  std::vector<float> out(g.size(), 5.0f);
  REQUIRE(comp.decompress<float>(frames[1], std::span(out)).ok());
  for (std::size_t i = 0; i < 100; ++i) CHECK(out[i] == 5.0f);
  for (std::size_t i = 200; i < 250; ++i) CHECK(out[i] == 5.0f);
  std::size_t nonzero = 0;
  for (std::size_t i = 100; i < 200; ++i) nonzero += out[i] != 0.0f;
  CHECK(nonzero == 10);
}

TEST_CASE("frame header records codec, dtype, step, chunk and counts") {
  using C = compressor<partition::whole, sparsify::topk, quantize::fp16, feedback::none>;
  C comp({.sparsify = {.density = 0.25}, .compact_indices = false});  // u32 lists (a bitmap would take 13 bytes)
  CHECK(comp.codec_id() == 0x02030000u);
  const auto g = to_elements<bf16_t>(test::heavy_tailed(100, 7));
  auto st = comp.make_state(g.size());
  for (std::uint64_t step = 0; step < 3; ++step) {
    const auto payload = compress_all(comp, g, st);
    const auto h = test::header_of(payload);
    CHECK(h.step == step);
    CHECK(h.codec_id == comp.codec_id());
    CHECK(h.source_dtype == dtype::bf16);
    CHECK(h.dense_count == 100);
    CHECK(h.kept_count == 25);
    CHECK(h.index_bytes == 100);
    CHECK(h.value_bytes == 50);
    CHECK(h.frame_bytes() == payload.size());
    CHECK(payload.size() == frame::header_bytes + 104 + 56);
  }
}

TEST_CASE("size queries bound what compress writes") {
  using C = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::none>;
  for (std::size_t n : {0u, 1u, 2u, 999u, 1000u, 1001u, 77777u}) {
    C comp({.partition = {.chunk_bytes = 4000}, .sparsify = {.density = 0.003}});
    const auto g = test::heavy_tailed(n, 8);
    auto st = comp.make_state(n);
    std::vector<std::byte> payload(comp.max_payload_bytes<float>(n));
    const auto w = comp.compress<float>(g, st, payload);
    REQUIRE(w.ok());
    CHECK(*w == payload.size());  // exact top-k: the bound is met exactly
    CHECK(*w % 8 == 0);
  }
}

TEST_CASE("bad arguments are rejected before anything is written") {
  using C = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;
  const auto g = test::heavy_tailed(1000, 10);
  for (double density : {0.0, -0.1, 1.5, double(NAN)}) {
    C comp({.sparsify = {.density = density}});
    auto st = comp.make_state(g.size());
    std::vector<std::byte> payload(100000);
    CHECK(comp.compress<float>(g, st, payload).code() == errc::invalid_argument);
    CHECK(st.step == 0);
  }
  C bad_chunks({.partition = {.chunk_bytes = 2}});
  auto st = bad_chunks.make_state(g.size());
  std::vector<std::byte> payload(100000);
  CHECK(bad_chunks.compress<float>(g, st, payload).code() == errc::invalid_argument);
  std::vector<float> out(g.size());
  CHECK(bad_chunks.decompress<float>(payload, std::span(out)) == errc::invalid_argument);

  C comp({.sparsify = {.density = 0.1}});
  auto small = comp.make_state(999);
  CHECK(comp.compress<float>(g, small, payload).code() == errc::size_mismatch);
  auto good = comp.make_state(g.size());
  const std::vector<float> residual_before = good.residual;
  std::vector<std::byte> tiny(comp.max_payload_bytes<float>(g.size()) - 1, std::byte{0x5a});
  CHECK(comp.compress<float>(g, good, tiny).code() == errc::buffer_too_small);
  CHECK(std::all_of(tiny.begin(), tiny.end(), [](std::byte b) { return b == std::byte{0x5a}; }));
  CHECK(good.residual == residual_before);
  CHECK(comp.compress_chunk<float>(7, g, good, payload).code() == errc::invalid_argument);
  state foreign = compressor<partition::whole, sparsify::dense, quantize::bf16, feedback::none>{}.make_state(g.size());
  CHECK(comp.compress<float>(g, foreign, payload).code() == errc::size_mismatch);  // no residual or workspace
}

TEST_CASE("non-finite values: carried by default, rejected when the config forbids them") {
  using C = compressor<partition::whole, sparsify::dense, quantize::bf16, feedback::residual>;
  std::vector<float> g = {1.0f, NAN, 2.0f, INFINITY};
  C carry;
  auto st = carry.make_state(g.size());
  const auto payload = compress_all(carry, g, st);
  std::vector<float> out(g.size());
  REQUIRE(carry.decompress<float>(payload, std::span(out)).ok());
  CHECK(std::isnan(out[1]));
  CHECK(std::isinf(out[3]));

  C strict({.allow_non_finite = false});
  auto st2 = strict.make_state(g.size());
  std::vector<std::byte> buf(strict.max_payload_bytes<float>(g.size()), std::byte{0x11});
  CHECK(strict.compress<float>(g, st2, buf).code() == errc::non_finite_value);
  CHECK(std::all_of(buf.begin(), buf.end(), [](std::byte b) { return b == std::byte{0x11}; }));
  CHECK(st2.residual == std::vector<float>(4, 0.0f));
  std::vector<float> untouched(g.size(), 3.0f);
  CHECK(strict.decompress<float>(payload, std::span(untouched)) == errc::non_finite_value);
  CHECK(untouched == std::vector<float>(4, 3.0f));
}

TEST_CASE("compress is all or nothing: a NaN in a later chunk leaves every chunk's state untouched") {
  using C = compressor<partition::chunks, sparsify::dense, quantize::bf16, feedback::residual>;
  C strict({.partition = {.chunk_bytes = 400}, .allow_non_finite = false});
  auto g = test::heavy_tailed(1000, 14);
  g[950] = NAN;
  auto st = strict.make_state(g.size());
  std::vector<std::byte> payload(strict.max_payload_bytes<float>(g.size()), std::byte{0x33});
  CHECK(strict.compress<float>(g, st, payload).code() == errc::non_finite_value);
  CHECK(st.residual == std::vector<float>(g.size(), 0.0f));
  CHECK(st.step == 0);
  CHECK(std::all_of(payload.begin(), payload.end(), [](std::byte b) { return b == std::byte{0x33}; }));
  CHECK(strict.compress_chunk<float>(0, g, st, payload).ok());  // chunk 0 alone is finite
  CHECK(strict.compress_chunk<float>(9, g, st, payload).code() == errc::non_finite_value);
}

TEST_CASE("NaN made by arithmetic is the canonical quiet NaN, as on every backend") {
  using C = compressor<partition::whole, sparsify::dense, quantize::none, feedback::residual>;
  C comp;
  std::vector<float> g = {bits_float(0x7fa00001u), INFINITY, 1.0f};  // NaN with a payload
  auto st = comp.make_state(g.size());
  st.residual = {1.0f, -INFINITY, bits_float(0xffc12345u)};
  std::vector<std::byte> payload(comp.max_payload_bytes<float>(g.size()));
  const auto w = comp.compress<float>(g, st, payload);
  REQUIRE(w.ok());
  for (float e : st.residual) CHECK(float_bits(e) == 0x7fc00000u);  // NaN - NaN, inf - inf, ...
  std::vector<float> sum = {bits_float(0xffc00077u), 0.0f, 0.0f};
  REQUIRE(comp.accumulate<float>(std::span(payload).first(*w), std::span(sum)).ok());
  for (float x : sum) CHECK(float_bits(x) == 0x7fc00000u);
}
