// The quantizer defined in the tests alone (support/log2_quantizer.hpp) on the GPU == on the
// CPU, byte for byte, dense with residual feedback and after top-k, then decoded on both: a
// new policy needs no change to the CUDA backend (test suite "gpu").

#include "support.cuh"
#include "support/log2_quantizer.hpp"

namespace gc = gradcomp;
using gctest::check_compress;
using gctest::check_decode;

TEST_SUITE("gpu") {

TEST_CASE("a quantizer from outside the library runs on the GPU with the CPU's bytes") {
  using Q = gc::test::log2_levels;
  using dense = gctest::codecs::chunked<gc::sparsify::dense, Q, gc::feedback::residual>;
  using topk = gctest::codecs::whole<gc::sparsify::topk, Q, gc::feedback::none>;
  for (std::size_t group : {std::size_t{1}, std::size_t{64}, std::size_t{4096}}) {
    const dense d({.partition = {.chunk_bytes = 4100}, .quantize = {.group = group}});
    const topk t({.sparsify = {.density = 0.05}, .quantize = {.group = group}});
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{100003}}) {
      const auto pd = check_compress<float>(d, n, 2, 31);
      const auto pt = check_compress<float>(t, n, 2, 32);
      for (bool add : {false, true}) {
        check_decode<float>(d, pd, n, add, 33);
        check_decode<float>(t, pt, n, add, 34);
      }
    }
  }
}

}  // TEST_SUITE
