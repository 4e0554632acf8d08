// Compiled by tests/consumer_warnings/CMakeLists.txt, not run: every AVX2 hook of the
// quantizers, inlined into AVX2 code with constant sizes, as in a user's microbenchmark.
#include <gradcomp/quantize/fp16.hpp>
#include <gradcomp/quantize/fp8.hpp>
#include <gradcomp/quantize/int_block.hpp>
#include <gradcomp/quantize/piecewise.hpp>
#include <gradcomp/quantize/sign.hpp>

#include <cstddef>
#include <cstdint>

namespace q = gradcomp::quantize;

namespace {
constexpr std::size_t group = 128, groups = 8;
template <class Code>
Code codes[group * groups];
template <class Meta>
Meta metas[groups];  // where the fitted metas go, so the fit is not dropped
float values[group * groups];

template <class Q>
__attribute__((target("avx2"))) float decode_groups(const typename Q::config& c) {
  const typename Q::meta m{};
  auto* const in = codes<typename Q::code_type>;
  float sum = 0.0f;
  for (std::size_t g = 0; g < groups; ++g) {
    Q::decode_avx2(c, m, in + g * group, group, values + g * group);
    if constexpr (gradcomp::has_avx2_accumulator<Q>) Q::accumulate_avx2(c, m, in + g * group, group, values + g * group);
    sum += values[g * group];
  }
  return sum;
}

// The fitter and the encoder, whichever Q has.
template <class Q>
__attribute__((target("avx2"))) unsigned encode_groups(const typename Q::config& c) {
  auto* const m = metas<typename Q::meta>;
  if constexpr (gradcomp::has_avx2_fitter<Q>) Q::fit8_avx2(c, values, group, m);
  auto* const out = codes<typename Q::code_type>;
  unsigned sum = 0;
  if constexpr (gradcomp::has_avx2_encoder<Q>)
    for (std::size_t g = 0; g < groups; ++g) {
      Q::encode_avx2(c, m[g], values + g * group, group, out + g * group);
      sum += out[g * group];
    }
  return sum;
}
}  // namespace

float consumer_hooks() {
  using e4m3 = q::fp8<q::fp8_format::e4m3>;
  using e5m2 = q::fp8<q::fp8_format::e5m2>;
  float sum = 0.0f;
  sum += decode_groups<e4m3>({.group = group}) + decode_groups<e4m3>({});
  sum += decode_groups<e5m2>({.group = group});
  sum += decode_groups<q::piecewise<3>>({}) + decode_groups<q::piecewise<4>>({});
  sum += static_cast<float>(encode_groups<e4m3>({.group = group}) + encode_groups<e5m2>({.group = group}));
  sum += static_cast<float>(encode_groups<q::int_block<8>>({}) + encode_groups<q::int_block<4>>({}) +
                            encode_groups<q::int_block<4, q::int_range::asymmetric>>({}));
  sum += static_cast<float>(encode_groups<q::piecewise<4>>({}) + encode_groups<q::sign>({}));
  sum += decode_groups<q::fp16>({}) + static_cast<float>(encode_groups<q::fp16>({}));
  return sum;
}
