#pragma once
// Compressing and decoding whole buffers in tests, and byte literals for golden frames.

#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace gradcomp::test {

// One compress call with state `st`: the payload, trimmed to what was written.
template <class C, class T>
std::vector<std::byte> compress_all(const C& comp, const std::vector<T>& g, state& st) {
  std::vector<std::byte> payload(comp.template max_payload_bytes<T>(g.size()));
  const auto written = comp.template compress<T>(g, st, payload);
  REQUIRE_MESSAGE(written.ok(), written.error().detail());
  payload.resize(*written);
  return payload;
}

// compress_all with a fresh state at `step`.
template <class C>
std::vector<std::byte> compress_at(const C& comp, const std::vector<float>& x, std::uint64_t step = 0) {
  state st = comp.make_state(x.size());
  st.step = step;
  return compress_all(comp, x, st);
}

// decompress of `payload` into n floats first set to `fill`.
template <class C>
std::vector<float> decompressed(const C& comp, std::span<const std::byte> payload, std::size_t n, float fill = 0.0f) {
  std::vector<float> out(n, fill);
  const status s = comp.template decompress<float>(payload, std::span(out));
  REQUIRE_MESSAGE(s.ok(), s.detail());
  return out;
}

inline std::vector<std::byte> bytes_of(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

}  // namespace gradcomp::test
