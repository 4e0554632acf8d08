// Every CPU version of the loops (baseline, AVX2, AVX-512: cpu/dispatch.hpp) produces the same
// bytes, including the non-temporal stores of large dense payloads and decompress.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "support/codec.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"

using namespace gradcomp;

namespace {

struct run_result {
  std::vector<std::byte> payload;
  std::vector<float> residual;
  std::vector<float> decoded;
};

template <class C>
run_result run(const C& comp, const std::vector<float>& g, std::size_t misalign, cpu::isa version) {
  const test::isa_scope scope(version);
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
  return {std::vector<std::byte>(payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(*w)), st.residual, decoded};
}

template <class C>
void check_same(C comp, const std::vector<float>& g) {
  auto cfg = comp.get_config();
  cfg.stores = cpu::stores::streaming;  // the non-temporal stores at a test's size
  comp.set_config(cfg);
  for (std::size_t misalign : {4u, 8u}) {
    CAPTURE(misalign);
    const auto base = run(comp, g, misalign, cpu::isa::baseline);
    for (const cpu::isa version : test::isas()) {
      CAPTURE(static_cast<int>(version));
      const auto fast = run(comp, g, misalign, version);
      CHECK(fast.payload == base.payload);
      CHECK(fast.residual == base.residual);
      CHECK(fast.decoded == base.decoded);
    }
  }
}

}  // namespace

TEST_CASE("every CPU version gives identical payloads, residuals and sums") {
  // No whole number of tiles or groups.
  const auto g = test::heavy_tailed(100'017, 31);
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

namespace {
// decompress of a dense payload above the streaming-store size (non-temporal stores) in every
// version against the baseline, into outputs 0, 4 and 16 bytes past a 32-byte boundary;
// nothing written around the output.
template <class C>
void check_large_decompress(C comp, const std::vector<float>& g) {
  auto cfg = comp.get_config();
  cfg.stores = cpu::stores::streaming;
  comp.set_config(cfg);
  const auto payload = test::compress_at(comp, g);
  std::vector<float> expected;
  {
    const test::isa_scope scope(cpu::isa::baseline);
    expected = test::decompressed(comp, payload, g.size());
  }
  std::vector<float> buffer(g.size() + 32);
  const std::size_t base = (32 - reinterpret_cast<std::uintptr_t>(buffer.data()) % 32) % 32 / 4;
  for (const std::size_t shift : {0u, 1u, 4u}) {
    CAPTURE(shift);
    std::fill(buffer.begin(), buffer.end(), 5.0f);
    const std::span<float> out(buffer.data() + base + shift, g.size());
    REQUIRE(comp.template decompress<float>(payload, out).ok());
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < g.size(); ++i) wrong += float_bits(out[i]) != float_bits(expected[i]);
    CHECK(wrong == 0);
    for (float* p = buffer.data(); p < buffer.data() + buffer.size(); ++p)
      if (p < out.data() || p >= out.data() + out.size()) REQUIRE(float_bits(*p) == float_bits(5.0f));
  }
}
}  // namespace

TEST_CASE("a large dense decompress writes the baseline's floats at each output alignment") {
  // No whole number of groups.
  const auto g = test::heavy_tailed(100'003, 32);
  using quantize::int_range;
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::int_block<8>, feedback::none>{}, g);
  using int4_asymmetric = quantize::int_block<4, int_range::asymmetric>;
  check_large_decompress(compressor<partition::whole, sparsify::dense, int4_asymmetric, feedback::none>({.quantize = {.group = 8}}),
                         g);
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::int_block<2>, feedback::none>(
                             {.quantize = {.group = 2}}),  // not a multiple of 4: the batch buffer
                         g);
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::sign, feedback::none>{}, g);
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::qsgd<4>, feedback::none>{}, g);
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::terngrad, feedback::none>{}, g);
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::natural, feedback::none>{}, g);
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::bf16, feedback::none>{}, g);
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::fp16, feedback::none>{}, g);
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::fp8_e4m3, feedback::none>{}, g);
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::fp8_e5m2, feedback::none>(
                             {.quantize = {.group = 4}}),
                         g);
  check_large_decompress(compressor<partition::whole, sparsify::dense, quantize::piecewise<4>, feedback::none>{}, g);
  // Chunks of 2^14 + 1 floats start at every 4-byte shift of the output.
  check_large_decompress(compressor<partition::chunks, sparsify::dense, quantize::int_block<8>, feedback::none>(
                             {.partition = {.chunk_bytes = (std::size_t{1} << 16) + 4}}),
                         g);
  check_large_decompress(compressor<partition::chunks, sparsify::dense, quantize::fp8_e4m3, feedback::none>(
                             {.partition = {.chunk_bytes = (std::size_t{1} << 16) + 4}}),
                         g);
  check_large_decompress(compressor<partition::chunks, sparsify::dense, quantize::bf16, feedback::none>{}, g);
}

TEST_CASE("config::stores: the output size decides by default, streaming and cached say always and never") {
  using cpu::stores;
  CHECK(!cpu::streaming_stores(stores::automatic, cpu::streaming_store_bytes - 1));
  CHECK(cpu::streaming_stores(stores::automatic, cpu::streaming_store_bytes));
  CHECK(cpu::streaming_stores(stores::streaming, 0));
  CHECK(cpu::streaming_stores(stores::streaming, 1));
  CHECK(!cpu::streaming_stores(stores::cached, std::size_t{1} << 40));
}

namespace {
// Payload, per-chunk frames and decompressed floats with `policy` against the default's, bit
// for bit; the output 16 bytes past a 32-byte boundary, so streaming decompress stores directly.
template <class C>
void check_stores(typename C::config cfg, cpu::stores policy, const std::vector<float>& g) {
  CAPTURE(static_cast<int>(policy));
  const C automatic(cfg);
  cfg.stores = policy;
  const C chosen(cfg);
  const auto payload = test::compress_at(automatic, g);
  CHECK(test::compress_at(chosen, g) == payload);
  state st = chosen.make_state(g.size());
  std::vector<std::byte> frame(chosen.max_frame_bytes(chosen.template chunk<float>(g.size(), 0).count));
  for (std::size_t i = 0, at = 0; i < chosen.template chunk_count<float>(g.size()); ++i) {
    const auto w = chosen.template compress_chunk<float>(i, g, st, frame);
    REQUIRE(w.ok());
    CHECK(std::equal(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(*w), payload.begin() + static_cast<std::ptrdiff_t>(at)));
    at += *w;
  }
  const auto expected = test::decompressed(automatic, payload, g.size());
  std::vector<float> buffer(g.size() + 16, 5.0f);
  const std::span<float> out(buffer.data() + (48 - reinterpret_cast<std::uintptr_t>(buffer.data()) % 32) % 32 / 4, g.size());
  REQUIRE(chosen.template decompress<float>(payload, out).ok());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < g.size(); ++i) wrong += float_bits(out[i]) != float_bits(expected[i]);
  CHECK(wrong == 0);
}

template <class C>
void check_stores(const typename C::config& cfg, const std::vector<float>& g) {
  check_stores<C>(cfg, cpu::stores::streaming, g);
  check_stores<C>(cfg, cpu::stores::cached, g);
}

template <class S, class Q>
using chunked = compressor<partition::chunks, S, Q, feedback::none>;
}  // namespace

TEST_CASE("config::stores: streaming and cached stores write the same bytes as the default, small and large") {
  using quantize::int_range;
  for (const std::size_t n : {std::size_t{5'003}, std::size_t{2'100'003}}) {
    CAPTURE(n);
    const auto g = test::heavy_tailed(n, 33);
    const std::size_t chunk_bytes = n < 10'000 ? 4'096 : std::size_t{4} << 20;  // several chunks either way
    check_stores<chunked<sparsify::dense, quantize::int_block<8>>>({.partition = {.chunk_bytes = chunk_bytes}}, g);
    check_stores<chunked<sparsify::dense, quantize::natural>>({.partition = {.chunk_bytes = chunk_bytes}}, g);
    check_stores<chunked<sparsify::dense, quantize::fp8_e4m3>>({.partition = {.chunk_bytes = chunk_bytes}}, g);
    check_stores<chunked<sparsify::dense, quantize::bf16>>({.partition = {.chunk_bytes = chunk_bytes}}, g);
    check_stores<chunked<sparsify::dense, quantize::int_block<4, int_range::asymmetric>>>(
        {.partition = {.chunk_bytes = chunk_bytes}, .quantize = {.group = 8}}, g);
    check_stores<chunked<sparsify::topk, quantize::int_block<8>>>(
        {.partition = {.chunk_bytes = chunk_bytes}, .sparsify = {.density = 0.05}}, g);
  }
}
