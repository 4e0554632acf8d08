// Compiled by tests/consumer_warnings/CMakeLists.txt, not run: the compressors as a user's
// microbenchmark would call them (constant sizes, static arrays), which
// lets the optimiser see values the unit tests hide from it.
#include <gradcomp/gradcomp.hpp>

#include <array>
#include <cstddef>
#include <span>

namespace gc = gradcomp;
namespace q = gradcomp::quantize;

namespace {
constexpr std::size_t n = 1024;
std::array<float, n> grad{}, out{};
std::array<std::byte, 64 * n> payload{};

template <class Q, class S = gc::sparsify::dense>
float round_trip(const typename gc::compressor<gc::partition::whole, S, Q, gc::feedback::residual>::config& cfg = {}) {
  const gc::compressor<gc::partition::whole, S, Q, gc::feedback::residual> comp(cfg);
  gc::state st = comp.make_state(n);
  const auto sent = comp.template compress<float>(grad, st, payload);
  if (!sent) return -1.0f;
  if (!comp.template accumulate<float>(std::span(payload).first(*sent), std::span(out))) return -2.0f;
  return out[7];
}
}  // namespace

float consumer_round_trips() {
  float sum = 0.0f;
  // One of each kind of loop: a cast, a table-decoded cast, packed grouped codes, stochastic
  // rounding, the breakpoint search, a sparse frame.
  sum += round_trip<q::bf16>() + round_trip<q::fp8_e4m3>() + round_trip<q::int_block<4>>();
  sum += round_trip<q::qsgd<4>>() + round_trip<q::piecewise<3>>();
  sum += round_trip<q::bf16, gc::sparsify::topk>({.sparsify = {.density = 0.01}});
  return sum;
}
