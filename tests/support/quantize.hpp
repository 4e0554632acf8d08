#pragma once
// Helpers for quantizer tests: a dense compressor around a quantizer, round trips at a chosen
// step (stochastic rounding draws new random numbers per step), and the decoded groups.

#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gradcomp::test {

template <class Q, class S = sparsify::dense, class F = feedback::none>
using with_quantizer = compressor<partition::whole, S, Q, F>;

template <class C>
std::vector<std::byte> compress_at(const C& comp, const std::vector<float>& x, std::uint64_t step = 0) {
  state st = comp.make_state(x.size());
  st.step = step;
  std::vector<std::byte> payload(comp.template max_payload_bytes<float>(x.size()));
  const auto written = comp.template compress<float>(x, st, payload);
  REQUIRE_MESSAGE(written.ok(), written.error().detail());
  payload.resize(*written);
  return payload;
}

template <class C>
std::vector<float> round_trip(const C& comp, const std::vector<float>& x, std::uint64_t step = 0) {
  const auto payload = compress_at(comp, x, step);
  std::vector<float> out(x.size(), -1.0f);
  const status s = comp.template decompress<float>(payload, out);
  REQUIRE_MESSAGE(s.ok(), s.detail());
  return out;
}

// Mean of the decoded values over `steps` steps (fresh random numbers each step).
template <class C>
std::vector<double> mean_decoded(const C& comp, const std::vector<float>& x, std::uint64_t steps) {
  std::vector<double> mean(x.size(), 0.0);
  for (std::uint64_t t = 0; t < steps; ++t) {
    const auto d = round_trip(comp, x, t);
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += d[i];
  }
  for (auto& m : mean) m /= static_cast<double>(steps);
  return mean;
}

// Group metadata of the single frame of a payload: group q's meta bytes.
inline const std::byte* meta_of(const std::vector<std::byte>& payload, std::size_t q, std::size_t meta_bytes) {
  return payload.data() + frame::header_bytes + q * meta_bytes;
}

}  // namespace gradcomp::test
