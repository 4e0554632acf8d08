// A quantizer defined in the tests alone (support/log2_quantizer.hpp) composes with every
// sparsifier and feedback and runs through the CPU backend without any change to it: its
// frames round-trip, decode as its decode() says, and error feedback keeps what it lost.
#include <gradcomp/core/reduce.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "support/codec.hpp"
#include "support/log2_quantizer.hpp"
#include "support/quantize.hpp"
#include "support/random.hpp"

using namespace gradcomp;
using Q = test::log2_levels;

TEST_CASE("a quantizer from outside the library: decoded values are the power of two at or below |x|") {
  const compressor<partition::chunks, sparsify::dense, Q, feedback::none> comp({.partition = {.chunk_bytes = 4096}});
  const auto x = test::heavy_tailed(10007, 3);
  const auto d = test::round_trip(comp, x);
  REQUIRE(d.size() == x.size());
  for (std::size_t g0 = 0; g0 < x.size(); g0 += 64) {
    const std::size_t g1 = std::min(x.size(), g0 + 64);
    const int top = std::ilogb(max_abs(x.data() + g0, g1 - g0));
    for (std::size_t i = g0; i < g1; ++i) {
      const float a = std::abs(x[i]), b = std::abs(d[i]);
      if (a == 0.0f || std::ilogb(a) < top - 6) {  // more than six binades below M's: sent as 0
        REQUIRE(b == 0.0f);
      } else {
        REQUIRE(b <= a);
        REQUIRE(a < 2 * b);
        REQUIRE(std::signbit(d[i]) == std::signbit(x[i]));
      }
    }
  }
  CHECK((comp.codec_id() >> 16 & 0xffu) == 200u);
}

TEST_CASE("a quantizer from outside the library: after top-k, with error feedback, conservation holds") {
  const compressor<partition::whole, sparsify::topk, Q, feedback::residual> comp({.sparsify = {.density = 0.1}});
  const auto g = test::heavy_tailed(5000, 4);
  state st = comp.make_state(g.size());
  std::vector<float> before = st.residual;
  const auto payload = test::compress_all(comp, g, st);
  std::vector<float> sent(g.size(), 0.0f);
  REQUIRE(comp.accumulate<float>(payload, std::span(sent)).ok());
  std::size_t kept = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    kept += sent[i] != 0.0f;
    CHECK(sent[i] + st.residual[i] == doctest::Approx(g[i] + before[i]).epsilon(1e-6));
  }
  CHECK(kept > 0);
  CHECK(kept <= 500);
}
