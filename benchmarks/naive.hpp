#pragma once
// Naive scalar baselines of benchmarks/cpu_bench.cpp: each codec's transform written the
// plain way a user would write it first, from the policies' own per-value math (Q::fit,
// Q::encode, Q::decode) and the standard library, with none of the compressor's framing,
// checks or tuning. Buffers are allocated once, outside the timed calls; nothing else is
// optimised. Every baseline has encode(x) (reads n floats, keeps its output inside) and
// decode(y, add) (y = decoded, or y += decoded when add).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include <gradcomp/gradcomp.hpp>

namespace naive {
namespace gc = gradcomp;

// Codes of `bits` bits each, packed least significant bit first; a call ends on a byte.
template <class Code>
std::byte* pack(const Code* codes, std::size_t n, unsigned bits, std::byte* out) {
  std::uint64_t acc = 0;
  unsigned have = 0;
  for (std::size_t i = 0; i < n; ++i) {
    acc |= std::uint64_t{codes[i]} << have;
    for (have += bits; have >= 8; have -= 8, acc >>= 8) *out++ = static_cast<std::byte>(acc);
  }
  if (have > 0) *out++ = static_cast<std::byte>(acc);
  return out;
}

template <class Code>
const std::byte* unpack(const std::byte* in, std::size_t n, unsigned bits, Code* codes) {
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
  std::uint64_t acc = 0;
  unsigned have = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (; have < bits; have += 8) acc |= std::uint64_t{std::to_integer<std::uint8_t>(*in++)} << have;
    codes[i] = static_cast<Code>(acc & mask);
    acc >>= bits;
    have -= bits;
  }
  return in;
}

// A quantizer over a dense buffer: per group, Q::fit and the metadata, then Q::encode of each
// value (with random16_at's Philox number when stochastic, one call per value) and the
// packing of the codes. Whole-byte codes are stored as they come (bf16: out[i] = bf16(x[i])).
template <class Q>
struct quantizer {
  using code = typename Q::code_type;
  static constexpr bool whole_bytes = Q::bits == 8 * sizeof(code);
  typename Q::config c;
  std::size_t n, block;
  std::vector<code> codes;
  std::vector<std::byte> bytes;

  quantizer(const typename Q::config& cfg, std::size_t count)
      : c(cfg), n(count), block(Q::group_size(cfg) ? Q::group_size(cfg) : 4096), codes(block),
        bytes(n * sizeof(code) + (n / block + 1) * (Q::meta_bytes + 1)) {}

  void encode(const float* x) {
    const bool grouped = Q::group_size(c) > 0;
    std::byte* out = bytes.data();
    for (std::size_t g0 = 0; g0 < n; g0 += block) {
      const std::size_t len = std::min(block, n - g0);
      typename Q::meta m{};
      if (grouped) {
        m = Q::fit(c, x + g0, len);
        Q::store_meta(m, out);
        out += Q::meta_bytes;
      }
      for (std::size_t j = 0; j < len; ++j) {
        const std::uint32_t u =
            Q::stochastic(c) ? gc::random16_at(0, 0, 0, gc::random_stream::quantizer, g0 + j) : 0u;
        const code q = Q::encode(c, m, x[g0 + j], u);
        if constexpr (whole_bytes) std::memcpy(out + j * sizeof(code), &q, sizeof q);
        else codes[j] = q;
      }
      if constexpr (whole_bytes) out += len * sizeof(code);
      else out = pack(codes.data(), len, Q::bits, out);
    }
  }

  void decode(float* y, bool add) {
    const bool grouped = Q::group_size(c) > 0;
    const std::byte* in = bytes.data();
    for (std::size_t g0 = 0; g0 < n; g0 += block) {
      const std::size_t len = std::min(block, n - g0);
      typename Q::meta m{};
      if (grouped) {
        m = Q::load_meta(in);
        in += Q::meta_bytes;
      }
      if constexpr (whole_bytes) {
        std::memcpy(codes.data(), in, len * sizeof(code));
        in += len * sizeof(code);
      } else {
        in = unpack(in, len, Q::bits, codes.data());
      }
      for (std::size_t j = 0; j < len; ++j) {
        const float v = Q::decode(c, m, codes[j]);
        if (add) y[g0 + j] += v;
        else y[g0 + j] = v;
      }
    }
  }
};

// Sparsifiers with bf16 values: u32 indices and bf16 values, scattered back by decode.
struct sparse {
  enum class rule { topk, row_topk, threshold, randomk };
  rule how;
  double density;
  std::size_t n, cols;
  std::vector<float> mag;  // |x|, for nth_element
  std::vector<std::uint32_t> idx, perm;
  std::vector<std::uint16_t> val;
  std::size_t kept = 0;

  sparse(rule r, double d, std::size_t count, std::size_t row = 0)
      : how(r), density(d), n(count), cols(row), mag(count), idx(count), val(count) {}

  std::size_t k_of(std::size_t len) const { return static_cast<std::size_t>(std::ceil(density * double(len))); }

  void keep(const float* x, std::size_t i) {
    idx[kept] = static_cast<std::uint32_t>(i);
    val[kept++] = gc::bf16_bits_from_float(x[i]);
  }

  // The k largest |x| of x[lo, hi), ties to the lower index: nth_element on a copy of |x|,
  // then a gather in index order.
  void top(const float* x, std::size_t lo, std::size_t hi, std::size_t k) {
    if (k == 0) return;
    for (std::size_t i = lo; i < hi; ++i) mag[i - lo] = std::fabs(x[i]);
    std::nth_element(mag.begin(), mag.begin() + std::ptrdiff_t(k - 1), mag.begin() + std::ptrdiff_t(hi - lo),
                     std::greater<>());
    const float t = mag[k - 1];
    std::size_t ties = k - static_cast<std::size_t>(std::count_if(mag.begin(), mag.begin() + std::ptrdiff_t(k - 1),
                                                                  [t](float a) { return a > t; }));
    for (std::size_t i = lo; i < hi; ++i) {
      const float a = std::fabs(x[i]);
      if (a > t || (a == t && ties > 0)) {
        ties -= a == t ? 1 : 0;
        keep(x, i);
      }
    }
  }

  // Random-k: a partial Fisher-Yates shuffle of 0..n-1 with Philox numbers.
  void shuffle(std::size_t k) {
    perm.resize(n);
    std::iota(perm.begin(), perm.end(), 0u);
    for (std::size_t m = 0; m < k; ++m)
      std::swap(perm[m], perm[m + gc::philox_at(0, 0, 0, gc::random_stream::sparsifier, m) % (n - m)]);
  }

  void encode(const float* x) {
    kept = 0;
    if (how == rule::topk) {
      top(x, 0, n, std::min(n, k_of(n)));
    } else if (how == rule::row_topk) {
      for (std::size_t r = 0; r < n; r += cols) top(x, r, std::min(n, r + cols), std::min(n - r, k_of(cols)));
    } else if (how == rule::threshold) {  // the top-k threshold of every 100th |x|, then a pass
      std::size_t s = 0;
      for (std::size_t i = 0; i < n; i += 100) mag[s++] = std::fabs(x[i]);
      const std::size_t k = std::max<std::size_t>(1, k_of(s));
      std::nth_element(mag.begin(), mag.begin() + std::ptrdiff_t(k - 1), mag.begin() + std::ptrdiff_t(s),
                       std::greater<>());
      const float t = mag[k - 1];
      for (std::size_t i = 0; i < n; ++i)
        if (std::fabs(x[i]) >= t) keep(x, i);
    } else {
      const std::size_t k = k_of(n);
      shuffle(k);
      for (std::size_t m = 0; m < k; ++m) keep(x, perm[m]);
    }
  }

  void decode(float* y, bool add) {
    if (how == rule::randomk) shuffle(kept);  // the receiver draws the positions again
    const std::uint32_t* at = how == rule::randomk ? perm.data() : idx.data();
    if (!add) std::fill(y, y + n, 0.0f);
    for (std::size_t m = 0; m < kept; ++m) {
      const float v = gc::float_from_bf16_bits(val[m]);
      if (add) y[at[m]] += v;
      else y[at[m]] = v;
    }
  }
};

// Error feedback around a baseline: x = g + e; encode(x); e = x - decode(encode(x)).
template <class Inner>
struct residual {
  Inner inner;
  std::vector<float> e, sent;

  residual(Inner in, std::size_t n) : inner(std::move(in)), e(n, 0.0f), sent(n) {}
  void encode(const float* g) {
    for (std::size_t i = 0; i < e.size(); ++i) e[i] += g[i];
    inner.encode(e.data());
    inner.decode(sent.data(), false);
    for (std::size_t i = 0; i < e.size(); ++i) e[i] -= sent[i];
  }
  void decode(float* y, bool add) { inner.decode(y, add); }
};

}  // namespace naive
