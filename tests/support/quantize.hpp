#pragma once
// Helpers for quantizer tests: a dense compressor around a quantizer, round trips at a chosen
// step (stochastic rounding draws new random numbers per step), and the decoded groups.

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

// Eight groups of gs values for checking a quantizer's fit8_avx2 against its fit, case
// `round` of many: scales from subnormal to the top of the float range, constant and
// one-signed groups, zeros, NaN and infinities at varied places, ranges that overflow.
inline std::vector<float> eight_groups(std::size_t gs, int round) {
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float group_max[] = {1e-45f, 3e-42f, 1e-39f, 1e-30f, 1e-3f, 1.0f, 1e37f, 3.4e38f};
  std::uint64_t s = 0x13198a2e03707344ull + static_cast<std::uint64_t>(round) * 0x9e3779b97f4a7c15ull;
  std::vector<float> x(8 * gs);
  for (std::size_t q = 0; q < 8; ++q) {
    const float amax = group_max[(q + static_cast<std::size_t>(round)) % 8];
    for (std::size_t j = 0; j < gs; ++j) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const float u = static_cast<float>(static_cast<std::int32_t>(s >> 32)) / 2147483648.0f;
      x[q * gs + j] = round % 5 == 1 ? amax : amax * (round % 5 == 2 ? std::abs(u) : u);
    }
    if (round % 7 == 3) x[q * gs + (s >> 7) % gs] = q % 2 ? nan : -inf;
    if (round % 11 == 4) x[q * gs + (s >> 9) % gs] = q % 3 ? 0.0f : inf;
    if (round % 13 == 5 && q == 2)
      for (std::size_t j = 0; j < gs; ++j) x[q * gs + j] = 0.0f;
    if (round % 17 == 6) x[q * gs] = -3.4e38f, x[q * gs + 1] = 3.4e38f;  // max - min overflows
  }
  return x;
}

#if GRADCOMP_CPU_DISPATCH
// Q::fit8_avx2 against Q::fit on eight groups of gs values, meta for meta as `fields` reads
// them (Q's config has a `group`).
template <class Q, class Fields>
void check_fit8_on(const std::vector<float>& x, std::size_t gs, Fields fields) {
  const typename Q::config c{.group = gs};
  typename Q::meta fast[8];
  Q::fit8_avx2(c, x.data(), gs, fast);
  for (std::size_t q = 0; q < 8; ++q) {
    CAPTURE(q);
    CHECK(fields(fast[q]) == fields(Q::fit(c, x.data() + q * gs, gs)));
  }
}

// The same on the eight_groups cases for group sizes 8 to 4096; by default the metas are
// compared bit for bit (metas of plain floats).
template <class Q, class Fields>
void check_fit8(Fields fields) {
  for (const std::size_t gs : {8u, 16u, 64u, 128u, 256u, 4096u}) {
    for (int round = 0; round < (gs == 4096 ? 12 : 40); ++round) {
      CAPTURE(gs);
      CAPTURE(round);
      check_fit8_on<Q>(eight_groups(gs, round), gs, fields);
    }
  }
}

template <class Q>
void check_fit8() {
  static_assert(sizeof(typename Q::meta) % sizeof(float) == 0);
  check_fit8<Q>([](const typename Q::meta& m) {
    std::array<std::uint32_t, sizeof(typename Q::meta) / sizeof(float)> bits;
    std::memcpy(bits.data(), &m, sizeof m);
    return bits;
  });
}

// Q::decode_avx2 against Q::decode, float bit for float bit, on the given codes (a count
// past a multiple of 8 runs the scalar tail too); nothing is written past them. The
// non-temporal form decode_avx2<true> too, where Q has it, into a 16-byte aligned buffer that
// is not 32-byte aligned. `flush`: all run with FTZ and DAZ set.
template <class Q, class Code>
void check_avx2_decoder(const typename Q::config& c, const typename Q::meta& m, const std::vector<Code>& codes,
                        bool flush = false) {
  const std::size_t n = codes.size();
  std::vector<float> slow(n), buffer(n + 16, 5.0f);
  // fast: 16 bytes past a 32-byte boundary
  float* const fast = buffer.data() + (48 - reinterpret_cast<std::uintptr_t>(buffer.data()) % 32) % 32 / 4;
  const unsigned saved = _mm_getcsr();
  if (flush) _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  for (std::size_t i = 0; i < n; ++i) slow[i] = Q::decode(c, m, codes[i]);
  for (const bool streaming : {false, true}) {
    CAPTURE(streaming);
    std::fill(buffer.begin(), buffer.end(), 5.0f);
    if (!streaming) {
      Q::decode_avx2(c, m, codes.data(), n, fast);
    } else if constexpr (has_streaming_avx2_decoder<Q>) {
      Q::template decode_avx2<true>(c, m, codes.data(), n, fast);
      _mm_sfence();
    }
    for (float* p = buffer.data(); p < buffer.data() + buffer.size(); ++p)  // nothing written around
      if (p < fast || p >= fast + n) REQUIRE(float_bits(*p) == float_bits(5.0f));
    for (std::size_t i = 0; i < n; ++i) {
      CAPTURE(i);
      REQUIRE(float_bits(fast[i]) == float_bits(slow[i]));
    }
  }
  _mm_setcsr(saved);
}

// Q::accumulate_avx2 against canonical_nan(sum + Q::decode), bit for bit, on sums that make
// every kind of result: NaN of any payload or sign, infinities of both signs, overflow to
// infinity, -0 and +0, subnormals; nothing is written past the codes. `flush` as above.
template <class Q>
void check_avx2_accumulator(const typename Q::config& c, const typename Q::meta& m,
                            const std::vector<typename Q::code_type>& codes, bool flush = false) {
  const float starts[] = {0.0f, -0.0f, 1.5f, -2.25e-3f, 1e-41f, std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), bits_float(0x7fa00001u), bits_float(0xffc00000u)};
  std::vector<float> fast(codes.size() + 1), slow(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i) fast[i] = slow[i] = starts[(i * 7 + i / 11) % std::size(starts)];
  fast.back() = 5.0f;
  const unsigned saved = _mm_getcsr();
  if (flush) _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  Q::accumulate_avx2(c, m, codes.data(), codes.size(), fast.data());
  for (std::size_t i = 0; i < codes.size(); ++i) slow[i] = canonical_nan(slow[i] + Q::decode(c, m, codes[i]));
  _mm_setcsr(saved);
  REQUIRE(float_bits(fast.back()) == float_bits(5.0f));
  for (std::size_t i = 0; i < codes.size(); ++i) {
    CAPTURE(i);
    REQUIRE(float_bits(fast[i]) == float_bits(slow[i]));
  }
}
// Q's decode_avx2 and accumulate_avx2, if any (check_avx2_decoder, check_avx2_accumulator), on every
// code in order, then mixed ones, in lengths that end in each part of a loop that takes
// sixteen codes at a time, then eight, then one by one; FTZ and DAZ off and on.
template <class Q>
void check_avx2_decoder_lengths(const typename Q::config& c, const typename Q::meta& m) {
  constexpr std::size_t code_values = std::size_t{1} << Q::bits;
  std::vector<typename Q::code_type> all(std::max<std::size_t>(3 * code_values, 48) + 13);
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<typename Q::code_type>((i < code_values ? i : i * 37 + 11) % code_values);
  for (const std::size_t n : {std::size_t{5}, std::size_t{8}, std::size_t{13}, std::size_t{16}, std::size_t{29},
                              all.size()}) {
    CAPTURE(n);
    const std::vector<typename Q::code_type> codes(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
    for (const bool flush : {false, true}) {
      CAPTURE(flush);
      check_avx2_decoder<Q>(c, m, codes, flush);
      if constexpr (has_avx2_accumulator<Q>) check_avx2_accumulator<Q>(c, m, codes, flush);
    }
  }
}

// check_avx2_decoder_lengths for a quantizer whose meta is one f32 (a scale or a norm), for
// each of `values` that check_meta accepts under c: each is stored and loaded as a frame
// carries it. Returns how many were accepted.
template <class Q>
std::size_t check_avx2_decoder_f32_metas(const typename Q::config& c, std::initializer_list<float> values) {
  static_assert(Q::meta_bytes == 4, "one f32 of metadata");
  std::size_t accepted = 0;
  for (const float value : values) {
    CAPTURE(value);
    std::byte stored[4];
    store_le<std::uint32_t>(stored, float_bits(value));
    const auto m = Q::load_meta(stored);
    if (!Q::check_meta(c, m).ok()) continue;
    ++accepted;
    check_avx2_decoder_lengths<Q>(c, m);
  }
  return accepted;
}

// Q::decode_packed_avx2, plain and non-temporal (out 16 bytes past a 32-byte boundary),
// against Q::decode, float bit for float bit, on n Bits-bit codes packed LSB first: every code
// value among the first, then random ones. The n codes alone, with exactly their bytes to
// read (and 1 to 3 fewer: ASan sees overreads), or followed by 64 more, as a block of a longer
// frame, when every whole eight must be decoded. It returns a multiple of 8, leaves a short
// scalar rest and writes nothing outside out[0, its return).
template <class Q>
void check_packed_avx2_decoder(const typename Q::config& c, const typename Q::meta& m, std::uint32_t seed) {
  constexpr std::uint32_t values = 1u << Q::bits;
  std::mt19937 gen(seed);
  for (const std::size_t n : {0u, 1u, 8u, 15u, 16u, 17u, 31u, 512u, 1021u, 1024u, 1031u}) {
    for (const std::size_t more : {0u, 64u}) {
      std::vector<std::uint32_t> codes(n + more);
      for (std::size_t i = 0; i < codes.size(); ++i)
        codes[i] = i < values ? static_cast<std::uint32_t>(i * 167 % values) : static_cast<std::uint32_t>(gen() % values);
      std::vector<std::byte> packed(packed_bytes(codes.size(), Q::bits));
      pack_bits(codes, Q::bits, packed.data());
      for (std::size_t short_by = 0; short_by <= (more ? 0 : std::min<std::size_t>(3, packed.size())); ++short_by) {
        const std::vector<std::byte> in(packed.begin(), packed.end() - static_cast<std::ptrdiff_t>(short_by));
        for (const bool streaming : {false, true}) {
          CAPTURE(n);
          CAPTURE(more);
          CAPTURE(short_by);
          CAPTURE(streaming);
          std::vector<float> buffer(n + 16, 5.0f);
          float* const out = buffer.data() + (48 - reinterpret_cast<std::uintptr_t>(buffer.data()) % 32) % 32 / 4;
          const std::size_t k = streaming ? Q::template decode_packed_avx2<true>(c, m, in.data(), n, in.size(), out)
                                          : Q::decode_packed_avx2(c, m, in.data(), n, in.size(), out);
          _mm_sfence();
          CHECK(k % 8 == 0);
          CHECK(k <= n);
          if (more) CHECK(k == n / 8 * 8);   // room to read: every whole eight
          CHECK(k + 16 + 8 * short_by > n);  // else the scalar rest stays short
          for (float* p = buffer.data(); p < buffer.data() + buffer.size(); ++p)  // nothing written around
            if (p < out || p >= out + k) REQUIRE(float_bits(*p) == float_bits(5.0f));
          for (std::size_t i = 0; i < k; ++i) {
            CAPTURE(i);
            REQUIRE(float_bits(out[i]) == float_bits(Q::decode(c, m, static_cast<typename Q::code_type>(codes[i]))));
          }
        }
      }
    }
  }
}
#endif

}  // namespace gradcomp::test
