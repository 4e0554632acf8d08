#pragma once
// Helpers for quantizer tests: a dense compressor around a quantizer, round trips at a chosen
// step (stochastic rounding draws new random numbers per step), and the decoded groups.

#include <gradcomp/core/byteio.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <vector>

#include "codec.hpp"
#include "random.hpp"

namespace gradcomp::test {

template <class Q, class S = sparsify::dense, class F = feedback::none>
using with_quantizer = compressor<partition::whole, S, Q, F>;

template <class C>
std::vector<float> round_trip(const C& comp, const std::vector<float>& x, std::uint64_t step = 0) {
  return decompressed(comp, compress_at(comp, x, step), x.size(), -1.0f);
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

// accumulate() of `payload` with the u32 at `offset` replaced by `bits` and the CRC resealed:
// its error code; on error the output must be untouched.
template <class C>
errc decode_tampered(const C& comp, std::vector<std::byte> payload, std::size_t offset, std::uint32_t bits,
                     std::size_t n) {
  store_le<std::uint32_t>(payload.data() + offset, bits);
  frame::seal(payload);
  const std::vector<float> before(n, 2.0f);
  std::vector<float> out = before;
  const status s = comp.template accumulate<float>(payload, out);
  if (!s) CHECK(out == before);
  return s.code();
}

// A NaN or infinity in a group of 16 values (groups of config.quantize.group): the frame
// carries a non-finite scale, decompress and accumulate reject it with the output untouched,
// and a sender with allow_non_finite = false refuses the gradient.
template <class C>
void check_non_finite_input(typename C::config cfg, std::initializer_list<float> bad_values) {
  for (float bad : bad_values) {
    CAPTURE(bad);
    std::vector<float> x = heavy_tailed(16, 4);
    x[10] = bad;
    const C comp(cfg);
    const auto p = compress_at(comp, x);
    const std::vector<float> before(16, 5.0f);
    std::vector<float> out = before;
    CHECK(comp.template decompress<float>(p, out).code() == errc::non_finite_value);
    CHECK(out == before);
    CHECK(comp.template accumulate<float>(p, out).code() == errc::non_finite_value);
    CHECK(out == before);
    cfg.allow_non_finite = false;
    const C strict(cfg);
    state st = strict.make_state(16);
    std::vector<std::byte> payload(strict.template max_payload_bytes<float>(16));
    CHECK(strict.template compress<float>(x, st, payload).error().code() == errc::non_finite_value);
    cfg.allow_non_finite = true;
  }
}

// Group metadata of the single frame of a payload: group q's meta bytes.
inline const std::byte* meta_of(const std::vector<std::byte>& payload, std::size_t q, std::size_t meta_bytes) {
  return payload.data() + frame::header_bytes + q * meta_bytes;
}

}  // namespace gradcomp::test
