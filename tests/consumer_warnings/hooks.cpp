// Compiled by tests/consumer_warnings/CMakeLists.txt, not run: every AVX2 hook of the
// quantizers, inlined into AVX2 code with constant sizes, as in a user's microbenchmark.
#include <gradcomp/quantize/fp16.hpp>
#include <gradcomp/quantize/fp8.hpp>
#include <gradcomp/quantize/int_block.hpp>
#include <gradcomp/quantize/piecewise.hpp>

#include <cstddef>
#include <cstdint>

namespace q = gradcomp::quantize;

namespace {
constexpr std::size_t group = 128, groups = 8;
std::uint8_t codes[group * groups];
std::uint16_t wide_codes[group * groups];
float values[group * groups];

template <class Q>
__attribute__((target("avx2"))) float decode_groups(const typename Q::config& c) {
  const typename Q::meta m{};
  float sum = 0.0f;
  for (std::size_t g = 0; g < groups; ++g) {
    Q::decode_avx2(c, m, codes + g * group, group, values + g * group);
    sum += values[g * group];
  }
  return sum;
}

template <class Q>
__attribute__((target("avx2"))) unsigned encode_groups(const typename Q::config& c) {
  typename Q::meta m[groups];
  Q::fit8_avx2(c, values, group, m);
  unsigned sum = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    Q::encode_avx2(c, m[g], values + g * group, group, codes + g * group);
    sum += codes[g * group];
  }
  return sum;
}

// fp16: ungrouped, 16-bit codes
__attribute__((target("avx2"))) float fp16_blocks() {
  using Q = q::fp16;
  float sum = 0.0f;
  for (std::size_t g = 0; g < groups; ++g) {
    Q::encode_avx2({}, {}, values + g * group, group, wide_codes + g * group);
    Q::decode_avx2({}, {}, wide_codes + g * group, group, values + g * group);
    sum += values[g * group];
  }
  return sum;
}

template <class Q>
__attribute__((target("avx2"))) float fit_groups(const typename Q::config& c) {
  typename Q::meta m[groups];
  Q::fit8_avx2(c, values, group, m);
  return m[0].max + m[groups - 1].max;
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
  sum += fit_groups<q::piecewise<4>>({});
  sum += fp16_blocks();
  return sum;
}
