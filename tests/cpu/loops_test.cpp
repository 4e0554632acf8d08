// The CPU skeletons (cpu/encode.hpp, cpu/decode.hpp) in every CPU version give exactly the
// bits of the quantizer's own per-value functions: each group's meta is fit()'s, each code
// encode()'s, each decoded value decode()'s (through a table or not), each accumulated value
// canonical_nan(sum + decode()). Inputs sweep the float bit patterns (every binade, both
// signs, subnormals, infinities, NaN payloads), so what the compilers vectorise is checked
// on every rounding case, at lengths that leave every kind of loop tail.
#include <gradcomp/core/bits.hpp>
#include <gradcomp/core/byteio.hpp>
#include <gradcomp/gradcomp.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "support/codec.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"

using namespace gradcomp;

namespace {

// Every 65537th float bit pattern; in every binade, both signs, the mantissas around the
// round-to-even boundaries of the bits that fp16 (13), bf16 (16), E4M3 (20) and E5M2 (21)
// drop (halfway, one below and above, odd and even kept bits); and heavy-tailed values.
std::vector<float> sweep(bool finite_only) {
  std::vector<std::uint32_t> mantissas = {0, 1, 0x7fffff, 0x400000};
  for (const std::uint32_t drop : {13u, 16u, 20u, 21u})
    for (const std::uint32_t kept : {0u, 1u, 2u, 3u})
      for (const std::int64_t d : {-1, 0, 1}) {
        const std::int64_t m = (std::int64_t{kept} << drop) + (std::int64_t{1} << (drop - 1)) + d;
        if (m >= 0 && m < (1 << 23)) mantissas.push_back(static_cast<std::uint32_t>(m));
      }
  std::vector<float> x;
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 65537) x.push_back(bits_float(static_cast<std::uint32_t>(u)));
  for (std::uint32_t e = 0; e < 256; ++e)
    for (std::uint32_t m : mantissas)
      for (std::uint32_t sign : {0u, 0x80000000u}) x.push_back(bits_float(sign | e << 23 | m));
  const auto t = test::heavy_tailed(5000, 3);
  x.insert(x.end(), t.begin(), t.end());
  if (finite_only)  // and far from overflow: a group's range or norm must be finite too
    for (float& v : x)
      if (!is_finite_bits(float_bits(v)) || !(bits_float(abs_key(v)) < 1e30f)) v = 0.5f;
  return x;
}

template <class Q>
void check_against_scalar(const typename Q::config& qc, bool finite_only) {
  CAPTURE(Q::id);
  using C = compressor<partition::whole, sparsify::dense, Q, feedback::none>;
  const C comp({.quantize = qc, .seed = 9});
  const auto all = sweep(finite_only);
  for (const std::size_t n : {all.size(), std::size_t{1}, std::size_t{7}, std::size_t{33}, std::size_t{1000}}) {
    CAPTURE(n);
    const std::vector<float> x(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
    // The reference: the quantizer's functions, value by value.
    const std::size_t gs = Q::group_size(qc);
    const frame::header h = comp.layout(n, n);
    std::vector<std::byte> meta(h.meta_bytes);
    std::vector<std::uint32_t> codes(n);
    std::vector<float> decoded(n);
    for (std::size_t i0 = 0; i0 < n; i0 += gs ? gs : n) {
      const std::size_t len = gs ? std::min(gs, n - i0) : n;
      const typename Q::meta fitted = gs ? Q::fit(qc, x.data() + i0, len) : typename Q::meta{};
      if (gs) Q::store_meta(fitted, meta.data() + i0 / gs * Q::meta_bytes);
      const typename Q::meta m = gs ? Q::load_meta(meta.data() + i0 / gs * Q::meta_bytes) : typename Q::meta{};
      for (std::size_t i = i0; i < i0 + len; ++i) {
        const std::uint32_t r = Q::stochastic(qc) ? random16_at(9, 0, 0, random_stream::quantizer, i) : 0;
        codes[i] = Q::encode(qc, fitted, x[i], r);
        decoded[i] = Q::decode(qc, m, static_cast<typename Q::code_type>(codes[i]));
      }
    }
    std::vector<std::byte> values(packed_bytes(n, Q::bits));
    pack_bits(codes, Q::bits, values.data());
    const std::vector<float> base = test::heavy_tailed(n, 5);
    for (const cpu::isa version : test::isas()) {
      CAPTURE(static_cast<int>(version));
      const test::isa_scope scope(version);
      const auto payload = test::compress_at(comp, x);
      REQUIRE(std::equal(meta.begin(), meta.end(), payload.begin() + static_cast<std::ptrdiff_t>(h.meta_offset())));
      REQUIRE(std::equal(values.begin(), values.end(), payload.begin() + static_cast<std::ptrdiff_t>(h.value_offset())));
      std::vector<float> scratch(n);
      const status checked = comp.template decompress<float>(payload, std::span(scratch));
      REQUIRE_MESSAGE(checked.ok(), checked.detail());
      const auto out = test::decompressed(comp, payload, n, 3.0f);
      std::vector<float> sum = base;
      REQUIRE(comp.template accumulate<float>(payload, std::span(sum)).ok());
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        wrong += float_bits(out[i]) != float_bits(decoded[i]);
        wrong += float_bits(sum[i]) != float_bits(canonical_nan(base[i] + decoded[i]));
      }
      CHECK(wrong == 0);
    }
  }
}

}  // namespace

TEST_CASE("casts: every CPU version gives the scalar conversions' bits") {
  check_against_scalar<quantize::none>({}, false);
  check_against_scalar<quantize::bf16>({}, false);
  check_against_scalar<quantize::fp16>({}, false);
  check_against_scalar<quantize::fp8_e4m3>({}, false);
  check_against_scalar<quantize::fp8_e5m2>({}, false);
  check_against_scalar<quantize::natural>({}, false);
}

TEST_CASE("grouped quantizers: every CPU version gives fit(), encode() and decode()'s bits") {
  // Groups holding NaN or inf are rejected by receivers: finite inputs for these.
  check_against_scalar<quantize::fp8_e4m3>({.group = 128}, true);
  check_against_scalar<quantize::fp8_e5m2>({.group = 32}, true);
  check_against_scalar<quantize::int_block<8>>({}, true);
  check_against_scalar<quantize::int_block<4>>({.group = 64}, true);
  check_against_scalar<quantize::int_block<2>>({}, true);
  check_against_scalar<quantize::int_block<4, quantize::int_range::asymmetric>>({}, true);
  check_against_scalar<quantize::int_block<8>>({.round = quantize::rounding::stochastic}, true);
  check_against_scalar<quantize::qsgd<4>>({}, true);
  check_against_scalar<quantize::terngrad>({}, true);
  check_against_scalar<quantize::sign>({}, true);
  check_against_scalar<quantize::piecewise<3>>({}, true);
  check_against_scalar<quantize::piecewise<4>>({.group = 256}, true);
  check_against_scalar<quantize::piecewise<8>>({}, true);
}
