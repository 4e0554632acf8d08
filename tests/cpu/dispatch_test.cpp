// The AVX2 and baseline versions of the CPU loops produce the same bytes, including the
// pipelined store path taken by large dense payloads.
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <vector>

#include "support/random.hpp"

using namespace gradcomp;

namespace {

struct run_result {
  std::vector<std::byte> payload;
  std::vector<float> residual;
  std::vector<float> decoded;
};

template <class C>
run_result run(const C& comp, const std::vector<float>& g, std::size_t misalign, bool avx2) {
  cpu::avx2_allowed() = avx2;
  auto st = comp.make_state(g.size());
  st.residual.assign(st.residual.size(), 0.25f);
  std::vector<std::byte> buffer(comp.template max_payload_bytes<float>(g.size()) + misalign);
  const auto payload = std::span(buffer).subspan(misalign);
  const auto w = comp.template compress<float>(g, st, payload);
  REQUIRE(w.ok());
  std::vector<float> decoded(g.size(), 1.0f);
  REQUIRE(comp.template accumulate<float>(payload.first(*w), std::span(decoded)).ok());
  // decompress of a dense payload this large takes the streaming-store path: 1 + its values
  // are what accumulate added to the ones (up to the rounding of that addition).
  if (C::sparsifier::is_dense) {
    std::vector<float> replaced(g.size(), 7.0f);
    REQUIRE(comp.template decompress<float>(payload.first(*w), std::span(replaced)).ok());
    for (std::size_t i = 0; i < g.size(); ++i)
      if (decoded[i] != 1.0f + replaced[i]) REQUIRE(decoded[i] == 1.0f + replaced[i]);
  }
  cpu::avx2_allowed() = true;
  return {std::vector<std::byte>(payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(*w)), st.residual, decoded};
}

template <class C>
void check_same(const C& comp, const std::vector<float>& g) {
  for (std::size_t misalign : {4u, 8u}) {  // 8: the 8-byte aligned paths (pipelined store, streamed ends); 4: the others
    CAPTURE(misalign);
    const auto fast = run(comp, g, misalign, true);
    const auto base = run(comp, g, misalign, false);
    CHECK(fast.payload == base.payload);
    CHECK(fast.residual == base.residual);
    CHECK(fast.decoded == base.decoded);
  }
}

}  // namespace

TEST_CASE("AVX2 and baseline loops give identical payloads, residuals and sums") {
  // 2.3M floats: the fp32 payload passes the streaming-store size, and is no whole number of tiles.
  const auto g = test::heavy_tailed(2'300'017, 31);
  check_same(compressor<partition::whole, sparsify::dense, quantize::none, feedback::residual>{}, g);
  check_same(compressor<partition::whole, sparsify::dense, quantize::bf16, feedback::none>{}, g);
  check_same(compressor<partition::whole, sparsify::dense, quantize::fp16, feedback::residual>{}, g);
  check_same(compressor<partition::whole, sparsify::dense, quantize::fp8_e4m3, feedback::none>{}, g);
  check_same(compressor<partition::whole, sparsify::dense, quantize::int_block<8>, feedback::none>{}, g);
  check_same(compressor<partition::whole, sparsify::dense, quantize::sign, feedback::residual>{}, g);
  check_same(compressor<partition::whole, sparsify::dense, quantize::fp8_e4m3, feedback::none>({.quantize = {.group = 128}}), g);
  check_same(compressor<partition::whole, sparsify::dense, quantize::int_block<4, quantize::int_range::asymmetric>, feedback::residual>{}, g);
  check_same(compressor<partition::chunks, sparsify::topk, quantize::int_block<2>, feedback::residual>({.sparsify = {.density = 0.01}}), g);
  check_same(compressor<partition::whole, sparsify::dense, quantize::fp8_e5m2, feedback::none>({.quantize = {.group = 64}}), g);
  check_same(compressor<partition::chunks, sparsify::topk, quantize::fp8_e4m3, feedback::residual>(
                 {.sparsify = {.density = 0.01}}),
             g);
  check_same(compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>({.sparsify = {.density = 0.01}}),
             g);
  check_same(compressor<partition::whole, sparsify::dense, quantize::piecewise<4>, feedback::none>{}, g);
  check_same(compressor<partition::chunks, sparsify::topk, quantize::piecewise<3>, feedback::residual>(
                 {.sparsify = {.density = 0.01}}),
             g);
}
