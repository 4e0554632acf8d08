// Every quantizer beyond int_block on the GPU == on the CPU, byte for byte (test suite "gpu"):
// fp8 (plain casts and per-group power-of-two scales), natural compression (stochastic,
// ungrouped, 9-bit codes), QSGD, TernGrad, scaled sign and piecewise, dense with residual
// feedback and after top-k; then each payload decoded (decompress and accumulate) on both.

#include "support.cuh"

namespace gc = gradcomp;
using gctest::check_compress;
using gctest::check_decode;

namespace {

const std::size_t sizes[] = {1, 7, 1000, 1025, 4097, 100003};

template <class Q>
void check_quantizer(const typename Q::config& qc) {
  using dense = gctest::codecs::chunked<gc::sparsify::dense, Q, gc::feedback::residual>;
  using topk = gctest::codecs::whole<gc::sparsify::topk, Q, gc::feedback::none>;
  const dense d({.partition = {.chunk_bytes = 4100}, .quantize = qc, .seed = 5});
  const topk t({.sparsify = {.density = 0.05}, .quantize = qc, .seed = 6});
  for (std::size_t n : sizes) {
    const auto pd = check_compress<float>(d, n, 2, 21);
    const auto pt = check_compress<float>(t, n, 2, 22);
    for (bool add : {false, true}) {
      check_decode<float>(d, pd, n, add, 23);
      check_decode<float>(t, pt, n, add, 24);
    }
  }
}

}  // namespace

TEST_SUITE("gpu") {

TEST_CASE("fp8 e4m3 and e5m2, plain and scaled") {
  check_quantizer<gc::quantize::fp8_e4m3>({});
  check_quantizer<gc::quantize::fp8_e4m3>({.group = 32});
  check_quantizer<gc::quantize::fp8_e5m2>({});
  check_quantizer<gc::quantize::fp8_e5m2>({.group = 4096});
}

TEST_CASE("natural compression") { check_quantizer<gc::quantize::natural>({}); }

TEST_CASE("qsgd") {
  check_quantizer<gc::quantize::qsgd<4>>({});
  check_quantizer<gc::quantize::qsgd<8>>({.group = 64, .levels = 100});
  check_quantizer<gc::quantize::qsgd<2>>({.group = 1});
}

TEST_CASE("terngrad and sign") {
  check_quantizer<gc::quantize::terngrad>({});
  check_quantizer<gc::quantize::terngrad>({.group = 2});
  check_quantizer<gc::quantize::sign>({});
  check_quantizer<gc::quantize::sign>({.group = 4});
}

TEST_CASE("piecewise") {
  check_quantizer<gc::quantize::piecewise<4>>({});
  check_quantizer<gc::quantize::piecewise<3>>({.group = 8, .round = gc::quantize::rounding::stochastic});
  check_quantizer<gc::quantize::piecewise<8>>({.group = 1024});
}

}  // TEST_SUITE
