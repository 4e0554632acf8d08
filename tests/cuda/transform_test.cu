// Compositions with a transform on the GPU == on the CPU, byte for byte: int4 and int2 after the
// randomized Hadamard rotation (dense, chunked, residual feedback, stochastic rounding), the DCT
// with exact top-k; the residual (in the transformed domain) and the step after every step;
// decompress and accumulate of those payloads; the malformed frames' checks; bf16 gradients
// refused with a clear error (test suite "gpu").

#include "support.cuh"

namespace gc = gradcomp;
namespace gcu = gradcomp::cuda;
namespace tf = gradcomp::transform;
using gctest::check_compress;
using gctest::check_decode;

namespace {

template <class S, class Q, class F, class X>
using transformed = gc::compressor<gc::partition::chunks, S, Q, F, X>;
using rotated_int4 = transformed<gc::sparsify::dense, gc::quantize::int_block<4>, gc::feedback::residual, tf::hadamard>;
using rotated_int2 = transformed<gc::sparsify::dense, gc::quantize::int_block<2>, gc::feedback::residual, tf::hadamard>;
using dct_topk = transformed<gc::sparsify::topk, gc::quantize::bf16, gc::feedback::residual, tf::dct>;

const std::size_t sizes[] = {1, 7, 256, 1000, 100003};

}  // namespace

TEST_SUITE("gpu") {

TEST_CASE("rotated int4 and int2: payloads, residuals and decodes equal the CPU's") {
  const rotated_int4 a({.partition = {.chunk_bytes = 40000}, .quantize = {.group = 128}, .transform = {.block = 256, .seed = 5}});
  const rotated_int2 b({.partition = {.chunk_bytes = 16384},
                        .quantize = {.group = 64, .round = gc::quantize::rounding::stochastic},
                        .transform = {.block = 64, .seed = 9},
                        .seed = 3});
  for (std::size_t n : sizes) {
    const auto pa = check_compress<float>(a, n, 3, 41);
    const auto pb = check_compress<float>(b, n, 3, 42);
    for (bool add : {false, true}) {
      check_decode<float>(a, pa, n, add, 43);
      check_decode<gc::bf16_t>(a, pa, n, add, 44);  // decoding into bf16 needs no fp32 gradient
      check_decode<float>(b, pb, n, add, 45);
    }
  }
  gctest::check_malformed<float>(a, check_compress<float>(a, 5000, 1, 46), 5000);
}

TEST_CASE("the DCT with top-k: payloads, residuals and decodes equal the CPU's") {
  const dct_topk c({.partition = {.chunk_bytes = 32768}, .sparsify = {.density = 0.03}, .transform = {.block = 64}});
  for (std::size_t n : sizes) {
    const auto p = check_compress<float>(c, n, 3, 51);
    for (bool add : {false, true}) check_decode<float>(c, p, n, add, 52);
  }
}

TEST_CASE("a transformed composition refuses bf16 gradients on the GPU") {
  const rotated_int4 a;
  const std::size_t n = 1000;
  gctest::device_bytes state_mem(gcu::state_bytes(a, n)), ws(gcu::compress_workspace_bytes<gc::bf16_t>(a, n));
  gctest::device_bytes grad(n * 2), payload(a.max_payload_bytes<gc::bf16_t>(n));
  const auto st = gcu::make_state(a, state_mem.span(), n);
  REQUIRE(st.ok());
  const gcu::executor ex{nullptr, ws.span()};
  const auto r = gcu::compress<gc::bf16_t>(a, ex, std::span<const gc::bf16_t>(grad.as<const gc::bf16_t>(), n), *st, payload.span());
  CHECK(r.error().code() == gc::errc::invalid_argument);
}

}  // TEST_SUITE
