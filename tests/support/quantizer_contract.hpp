#pragma once
// What every quantizer's tests hold it to, written once and called per quantizer.

#include <gradcomp/core/bits.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <limits>
#include <vector>

#include "codec.hpp"
#include "quantize.hpp"
#include "random.hpp"

namespace gradcomp::test {

// Error feedback keeps what rounding lost: over 50 steps of the same gradient, what was sent
// plus the residual is the sum of the gradients (to float rounding). `comp` has a residual.
template <class C>
void check_feedback_keeps_rounding(const C& comp) {
  const auto g = heavy_tailed(500, 9);
  state st = comp.make_state(g.size());
  std::vector<double> sent(g.size(), 0.0), total(g.size(), 0.0);
  std::vector<std::byte> payload(comp.template max_payload_bytes<float>(g.size()));
  for (int step = 0; step < 50; ++step) {
    REQUIRE(comp.template compress<float>(g, st, payload).ok());
    std::vector<float> d(g.size(), 0.0f);
    REQUIRE(comp.template decompress<float>(payload, d).ok());
    for (std::size_t i = 0; i < g.size(); ++i) {
      sent[i] += d[i];
      total[i] += g[i];
    }
  }
  for (std::size_t i = 0; i < g.size(); ++i)
    CHECK(sent[i] + st.residual[i] == doctest::Approx(total[i]).epsilon(1e-4).scale(1e-3));
}

// A quantizer whose group meta is one fp32 scale (groups of 8 over 20 values): a received
// negative scale is bad_meta, a non-finite one non_finite_value, 0 and the largest float decode.
// Returns the untampered payload.
template <class C>
std::vector<std::byte> check_untrusted_scales(const C& comp) {
  const auto x = heavy_tailed(20, 6);
  const auto good = compress_at(comp, x);
  const auto tampered = [&](std::size_t offset, float v) { return decode_tampered(comp, good, offset, float_bits(v), 20); };
  const std::size_t meta = frame::header_bytes;
  CHECK(tampered(meta + 4, -1.0f) == errc::bad_meta);
  CHECK(tampered(meta + 4, -0.0f) == errc::bad_meta);
  CHECK(tampered(meta, std::numeric_limits<float>::quiet_NaN()) == errc::non_finite_value);
  CHECK(tampered(meta + 8, std::numeric_limits<float>::infinity()) == errc::non_finite_value);
  CHECK(tampered(meta, 0.0f) == errc::ok);
  CHECK(tampered(meta, std::numeric_limits<float>::max()) == errc::ok);
  return good;
}

}  // namespace gradcomp::test
