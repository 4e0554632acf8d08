#pragma once
// quantize::int_block<Bits, Range>: Bits-bit integers (8, 4 or 2) with one scale per group of
// `group` consecutive sent values (default 128; ZeRO++ and CGX quantize in blocks this way).
//
//   symmetric  (absmax, ZeRO++):  L = 2^(Bits-1) - 1, s = max|x| / L,
//              q = round(x / s) in [-L, L], code = q + L,        decoded = q * s
//   asymmetric (min-max, CGX):    Q = 2^Bits - 1, s = max/Q - min/Q, lo = min (-0 below +0),
//              q = round((x - lo) / s) in [0, Q], code = q,      decoded = lo + q * s
//
// Rounding (config): nearest, ties to even, with |x - decoded| <= s/2 + 2^-20 max|x| (the
// second term covers the float arithmetic: x / s is computed with a reciprocal, see
// pow2_normalizer in group.hpp); or stochastic (floor or ceiling, up with probability equal to
// the fraction, Philox random numbers keyed by seed and step), unbiased to within 2^-16 s,
// |x - decoded| < s + 2^-20 max|x|.
// An all-zero group has s = 0 and decodes to zeros. Metadata per group: f32 s
// (symmetric), f32 s then f32 lo (asymmetric). A group holding NaN or infinity gets a
// non-finite scale, and receivers reject the frame with errc::non_finite_value; so does an
// asymmetric group whose range max - min exceeds the float range.
// Not summable: each rank's scales differ (the agreed-scale path is a later codec).

#include <array>
#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/byteio.hpp"
#include "../core/concepts.hpp"
#include "../core/reduce.hpp"
#include "../core/rounding.hpp"
#include "../core/table16.hpp"
#include "group.hpp"

namespace gradcomp::quantize {

enum class int_range : std::uint8_t {
  symmetric = 0,   // [-max|x|, max|x|], zero exact
  asymmetric = 1,  // [min x, max x], one more level, 8 metadata bytes per group
};

template <unsigned Bits, int_range Range = int_range::symmetric>
struct int_block {
  static_assert(Bits == 2 || Bits == 4 || Bits == 8, "int_block: Bits must be 8, 4 or 2");
  using policy_kind = quantizer_tag;
  struct config {
    std::size_t group = 128;  // values per scale: a power of two in [1, 4096]
    rounding round = rounding::nearest;
  };
  struct meta {
    float scale = 0.0f;
    float lo = 0.0f;   // asymmetric only
    // Not sent: encode computes x / scale as (x * pre) * inv, pre = pow2_normalizer(scale),
    // inv = 1 / (scale * pre) (no division per value, no overflowing or subnormal reciprocal).
    float pre = 1.0f;
    float inv = 0.0f;
  };
  using code_type = std::uint8_t;
  static constexpr bool asymmetric = Range == int_range::asymmetric;
  static constexpr unsigned bits = Bits;
  static constexpr std::uint8_t id = 6;
  static constexpr bool summable = false;
  static constexpr std::size_t meta_bytes = asymmetric ? 8 : 4;
  // Largest |q| (symmetric) or largest q (asymmetric).
  static constexpr float levels = asymmetric ? float((1u << Bits) - 1) : float((1u << (Bits - 1)) - 1);

  static status validate(const config& c) { return check_group_size(c.group); }
  static constexpr std::uint16_t format_param(const config& c) {
    return static_cast<std::uint16_t>(group_param(c.group) | (asymmetric ? 0x10u : 0u) | Bits);
  }
  static constexpr bool unbiased(const config& c) { return c.round == rounding::stochastic; }
  GRADCOMP_HD static bool stochastic(const config& c) { return c.round == rounding::stochastic; }
  GRADCOMP_HD static std::size_t group_size(const config& c) { return c.group; }

  GRADCOMP_HD GRADCOMP_INLINE static meta fit(const config&, const float* x, std::size_t n) {
    meta m;
    if constexpr (asymmetric) {
      // Smallest and largest x in the order of order_key (integer min and max: they
      // vectorise); a NaN lands at an end and makes the scale NaN.
      std::int32_t lo = order_key(x[0]), hi = lo;
      for (std::size_t i = 1; i < n; ++i) {
        const std::int32_t k = order_key(x[i]);
        lo = k < lo ? k : lo;
        hi = k > hi ? k : hi;
      }
      m.lo = from_order_key(lo);
      m.scale = from_order_key(hi) / levels - m.lo / levels;  // no overflow for finite lo, hi
    } else {
      m.scale = max_abs(x, n) / levels;
    }
    // The largest code must decode to a finite value: near FLT_MAX, s * levels may round up
    // to infinity; one or two ulps less fixes that (the clamp in encode keeps codes in range).
    for (int i = 0; i < 2 && m.scale > 0.0f && is_finite_bits(float_bits(m.scale)) &&
                    !is_finite_bits(float_bits(decode({}, m, asymmetric ? levels : 2 * levels)));
         ++i)
      m.scale = bits_float(float_bits(m.scale) - 1);
    set_inverse(m);
    return m;
  }

  // Branch-free within each rounding mode (the mode test is loop-invariant: compilers split
  // the loop), so loops over a group vectorise.
  GRADCOMP_HD static code_type encode(const config& c, const meta& m, float x, std::uint32_t random) {
    const float t = asymmetric ? x - m.lo : x;
    // The clamp also maps NaN (a poisoned group) to a valid code.
    const float y = clamp_float((t * m.pre) * m.inv, asymmetric ? 0.0f : -levels, levels);
    const int q = c.round == rounding::stochastic ? static_cast<int>(round_stochastic(y, random)) : round_even_int(y);
    return static_cast<code_type>(q + (asymmetric ? 0 : static_cast<int>(levels)));
  }

#if GRADCOMP_CPU_DISPATCH
  // fit() of eight groups of gs values each (gs a multiple of 8) at once, with AVX2:
  // metas[q] = fit(c, x + q * gs, gs), the same bits. The eight extremes are found side by
  // side, and the scalar tail of fit (two divisions, the checks) runs once, in vectors.
  GRADCOMP_TARGET_AVX2 static void fit8_avx2(const config&, const float* x, std::size_t gs, meta* metas) {
    const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(levels);
    const __m256i exponent = _mm256_set1_epi32(0x7f800000);
    const auto finite = [&](__m256 v) __attribute__((always_inline, target("avx2"))) {  // as a lane mask
      return _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), exponent), exponent),
                              _mm256_set1_epi32(-1));
    };
    __m256 lo = zero, scale;
    if constexpr (asymmetric) {
      // order_key's minimum and maximum without computing keys: where a group has a negative
      // value (-0 included), its smallest is its largest bit pattern as unsigned, else its
      // smallest as unsigned; where it has a value >= +0, its largest is its largest bit
      // pattern as signed, else its smallest as unsigned. Three integer extremes per vector
      // replace a key (three operations) and a minimum and maximum of the keys: 0.83x the
      // int4 asymmetric compress time.
      __m256i umax[8], umin[8], smax[8];
      for (std::size_t q = 0; q < 8; ++q) {
        const float* g = x + q * gs;
        __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)), b = a, d = a;
        for (std::size_t j = 8; j < gs; j += 8) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + j));
          a = _mm256_max_epu32(a, v);
          b = _mm256_min_epu32(b, v);
          d = _mm256_max_epi32(d, v);
        }
        umax[q] = a;
        umin[q] = b;
        smax[q] = d;
      }
      const auto unsigned_max = [&](__m256i a, __m256i b) __attribute__((always_inline, target("avx2"))) {
        return _mm256_max_epu32(a, b);
      };
      const auto unsigned_min = [&](__m256i a, __m256i b) __attribute__((always_inline, target("avx2"))) {
        return _mm256_min_epu32(a, b);
      };
      const auto signed_max = [&](__m256i a, __m256i b) __attribute__((always_inline, target("avx2"))) {
        return _mm256_max_epi32(a, b);
      };
      const __m256i u_max = detail::reduce_lanes8_avx2(umax, unsigned_max);
      const __m256i u_min = detail::reduce_lanes8_avx2(umin, unsigned_min);
      const __m256i s_max = detail::reduce_lanes8_avx2(smax, signed_max);
      // blendv_ps picks by each lane's sign bit
      lo = _mm256_blendv_ps(_mm256_castsi256_ps(u_min), _mm256_castsi256_ps(u_max), _mm256_castsi256_ps(u_max));
      const __m256 hi =
          _mm256_blendv_ps(_mm256_castsi256_ps(s_max), _mm256_castsi256_ps(u_min), _mm256_castsi256_ps(s_max));
      scale = _mm256_sub_ps(_mm256_div_ps(hi, top), _mm256_div_ps(lo, top));
    } else {
      scale = _mm256_div_ps(_mm256_castsi256_ps(detail::max_abs8_avx2(x, gs)), top);
    }
    for (int i = 0; i < 2; ++i) {  // the largest code must decode to a finite value (see fit)
      const __m256 largest = asymmetric ? _mm256_add_ps(lo, _mm256_mul_ps(top, scale)) : _mm256_mul_ps(top, scale);
      const __m256i positive = _mm256_castps_si256(_mm256_cmp_ps(scale, zero, _CMP_GT_OQ));
      const __m256i fix = _mm256_andnot_si256(finite(largest), _mm256_and_si256(positive, finite(scale)));
      scale = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(scale), fix));  // fix is -1 or 0
    }
    // set_inverse: pre = pow2_normalizer(scale), inv = 1 / (scale * pre); 1 and 0 where the
    // scale is zero or not finite
    const __m256i positive = _mm256_castps_si256(_mm256_cmp_ps(scale, zero, _CMP_GT_OQ));
    const __m256i usable = _mm256_and_si256(positive, finite(scale));
    __m256i e = _mm256_srli_epi32(_mm256_castps_si256(scale), 23);
    e = _mm256_min_epi32(_mm256_max_epi32(e, _mm256_set1_epi32(1)), _mm256_set1_epi32(253));
    __m256 pre = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23));
    const __m256 inv = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(scale, pre)), _mm256_castsi256_ps(usable));
    pre = _mm256_blendv_ps(_mm256_set1_ps(1.0f), pre, _mm256_castsi256_ps(usable));
    alignas(32) float fields[4][8];
    _mm256_store_ps(fields[0], scale);
    _mm256_store_ps(fields[1], lo);
    _mm256_store_ps(fields[2], pre);
    _mm256_store_ps(fields[3], inv);
    for (std::size_t q = 0; q < 8; ++q) metas[q] = {fields[0][q], fields[1][q], fields[2][q], fields[3][q]};
  }

  // encode() with nearest rounding of x[0, n) into out[0, n), 32 values at a time with AVX2:
  // the same codes. Where pre * inv is a normal float (every group but those with scales
  // near the ends of the float range), t * (pre * inv) replaces (t * pre) * inv: t * pre is
  // exact unless it underflows, and then both products lie below 2^-126 and round to 0. The
  // clamp is a max then a min, which take the bound for NaN as clamp_float does.
  GRADCOMP_TARGET_AVX2 static void encode_avx2(const config& c, const meta& m, const float* x, std::size_t n,
                                               code_type* out) {
    const float factor = m.pre * m.inv;
    const bool one_product = is_normal_bits(float_bits(factor));
    const __m256 pre = _mm256_set1_ps(one_product ? factor : m.pre), inv = _mm256_set1_ps(m.inv);
    const __m256 lo = _mm256_set1_ps(m.lo), bottom = _mm256_set1_ps(asymmetric ? 0.0f : -levels),
                 top = _mm256_set1_ps(levels), shift = _mm256_set1_ps(round_shift);
    // round_even_int(y) + offset in one subtraction from the bits of y + round_shift
    const __m256i base = _mm256_set1_epi32(static_cast<int>(float_bits(round_shift)) - (asymmetric ? 0 : int(levels)));
    const auto eight = [&](const float* p) __attribute__((always_inline, target("avx2"))) {
      __m256 t = _mm256_loadu_ps(p);
      if constexpr (asymmetric) t = _mm256_sub_ps(t, lo);
      t = _mm256_mul_ps(t, pre);
      if (!one_product) t = _mm256_mul_ps(t, inv);
      const __m256 y = _mm256_min_ps(_mm256_max_ps(t, bottom), top);
      return _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(y, shift)), base);
    };
    std::size_t i = 0;
    if (c.round == rounding::nearest)
      for (; i + 32 <= n; i += 32)
        detail::store_codes32_avx2(eight(x + i), eight(x + i + 8), eight(x + i + 16), eight(x + i + 24), out + i);
    for (; i < n; ++i) out[i] = encode(c, m, x[i], 0);
  }

  // decode() of codes[0, n) into out[0, n): for 4 and 2 bits through a table of the group's
  // 16 decoded values (core/table16.hpp; for 2 bits each value four times), for 8 bits with
  // decode8_avx2; the same floats, as the table holds decode()'s products. Against the compressor's loop (a conversion and
  // a product per value), decompress took 0.91x the time for int4 and int2, 0.89x for int4
  // asymmetric, accumulate 0.94-0.95x (A/B on a Zen 1 VM).
  template <bool Streaming = false>
  GRADCOMP_TARGET_AVX2 static void decode_avx2(const config& c, const meta& m, const code_type* codes, std::size_t n,
                                              float* out) {
    if constexpr (Bits <= 4) {
      detail::decode_by_table16<Streaming, int_block>(table_avx2(m), c, m, codes, n, out);
    } else {
      std::size_t i = 0;
      for (; i + 8 <= n; i += 8) detail::store8_avx2<Streaming>(out + i, decode8_avx2(m, codes + i));
      for (std::size_t r = 0; r < n % 8; ++r) out[i + r] = decode(c, m, codes[i + r]);  // (see fp8's encode_avx2)
    }
  }

  // decode_avx2 added to sum[0, n) in the same pass, NaN canonical as canonical_nan makes it.
  GRADCOMP_TARGET_AVX2 static void accumulate_avx2(const config& c, const meta& m, const code_type* codes, std::size_t n,
                                                  float* sum) {
    if constexpr (Bits <= 4) {
      detail::accumulate_by_table16<int_block>(table_avx2(m), c, m, codes, n, sum);
    } else {
      std::size_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_add_ps(_mm256_loadu_ps(sum + i), decode8_avx2(m, codes + i));
        _mm256_storeu_ps(sum + i, detail::canonical_nan_avx2(v));
      }
      for (std::size_t r = 0; r < n % 8; ++r) sum[i + r] = canonical_nan(sum[i + r] + decode(c, m, codes[i + r]));
    }
  }

 private:
  // decode() of eight 8-bit codes. q is read off the bits of the float 2^23 + code, less
  // 2^23 + L (exact), rather than converted with vcvtdq2ps, which issues once per 2 cycles
  // on Zen 1: int8 decompress took 0.95x the time, accumulate 0.92x (A/B).
  __attribute__((target("avx2"), always_inline)) static __m256 decode8_avx2(const meta& m, const code_type* codes) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
    const __m256 q = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_or_si256(c, _mm256_set1_epi32(0x4b000000))),
                                   _mm256_set1_ps(0x1p23f + (asymmetric ? 0.0f : levels)));
    const __m256 v = _mm256_mul_ps(q, _mm256_set1_ps(m.scale));
    return asymmetric ? _mm256_add_ps(_mm256_set1_ps(m.lo), v) : v;
  }

  __attribute__((target("avx2"), always_inline)) static detail::table16 table_avx2(const meta& m)
    requires(Bits <= 4)
  {
    // decode()'s q of the table's codes, in make_table16_avx2's order
    alignas(32) static constexpr auto q = [] {
      std::array<float, 16> t{};
      for (std::uint32_t at = 0; at < 16; ++at) {
        const auto code = static_cast<int>(detail::table16_code(at) % (1u << Bits));
        t[at] = static_cast<float>(code - (asymmetric ? 0 : static_cast<int>(levels)));
      }
      return t;
    }();
    __m256 entries[2];
    for (std::size_t r = 0; r < 2; ++r) {
      entries[r] = _mm256_mul_ps(_mm256_load_ps(q.data() + 8 * r), _mm256_set1_ps(m.scale));
      if constexpr (asymmetric) entries[r] = _mm256_add_ps(_mm256_set1_ps(m.lo), entries[r]);
    }
    return detail::make_table16_avx2(entries[0], entries[1]);
  }

 public:
#endif

  GRADCOMP_HD static float decode(const config&, const meta& m, code_type code) {
    const float q = static_cast<float>(static_cast<int>(code) - (asymmetric ? 0 : static_cast<int>(levels)));
    return asymmetric ? m.lo + q * m.scale : q * m.scale;
  }

  // NaN canonical: a poisoned group's scale is NaN arithmetic, whose bits differ by backend.
  GRADCOMP_HD static void store_meta(const meta& m, std::byte* out) {
    store_le<std::uint32_t>(out, float_bits(canonical_nan(m.scale)));
    if constexpr (asymmetric) store_le<std::uint32_t>(out + 4, float_bits(canonical_nan(m.lo)));
  }
  GRADCOMP_HD static meta load_meta(const std::byte* in) {
    meta m;
    m.scale = bits_float(load_le<std::uint32_t>(in));
    if constexpr (asymmetric) m.lo = bits_float(load_le<std::uint32_t>(in + 4));
    return m;
  }
  GRADCOMP_HD static status check_meta(const config&, const meta& m) {
    if (auto s = check_scale(m.scale, levels); !s) return s;
    if constexpr (asymmetric) {
      if (!is_finite_bits(float_bits(m.lo)) || !is_finite_bits(float_bits(m.lo + levels * m.scale)))
        return {errc::non_finite_value, "group minimum is NaN or inf, or its range overflows"};
    }
    return {};
  }

 private:
  // pre and inv of the meta; left 1 and 0 for a zero or non-finite scale (every value then
  // encodes as zero or as the clamp's bound).
  GRADCOMP_HD static void set_inverse(meta& m) {
    if (!(m.scale > 0.0f) || !is_finite_bits(float_bits(m.scale))) return;
    m.pre = pow2_normalizer(m.scale);
    m.inv = 1.0f / (m.scale * m.pre);
  }
};

}  // namespace gradcomp::quantize
