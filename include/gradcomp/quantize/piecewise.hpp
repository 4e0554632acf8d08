#pragma once
// quantize::piecewise<Bits>: AccTFM's piecewise quantization. Per group of `group` sent values
// (default 128), M = max|x| and a breakpoint p in (0, M/2] split the range into a dense centre
// [-p, p] and sparse tails p < |x| <= M, each with its own step. With L = 2^(Bits-2) - 1 and
// T = 2^(Bits-2), the Bits-bit code is a region bit (the top bit) and Bits-1 bits:
//
//   centre (top bit 0): sc = p / L, q = round(x / sc) in [-L, L],  code = q + L,
//                       decoded = q * sc                    (2L + 1 levels, zero exact)
//   tails  (top bit 1): st = (M - p) / T, j = round((M - |x|) / st) in [0, T - 1],
//                       code = 2^(Bits-1) | sign << (Bits-2) | (T - 1 - j),
//                       decoded = +-(M - j * st)            (T levels a side: p + st .. M)
//
// so each region has 2^(Bits-1) codes and the grid has 2^Bits - 1 levels, as many as
// int_block's symmetric grid, but fine near zero and coarse in the tails. The centre keeps
// exact zero: zeros stay zeros, and one huge value leaves the rest of its group at 0 rather
// than at a non-zero level. That costs the centre's 2^(Bits-1)-th code (code 2^(Bits-1) - 1 is
// never written; it decodes as q = L) and some error: on t(3) data a zero-free centre of
// 2^(Bits-1) levels has about 30% less squared error at 3 bits, 15% at 4 and none at 8.
// A value goes to the tails when |x| > p and round((M - |x|) / st) < T, i.e. when a tail
// level is nearer than the centre's top level p (ties to the centre).
//
// Rounding (config): nearest, ties to even (of x / sc or (M - |x|) / st), with
//   |x| <= p:  |x - decoded| <= sc / 2 + eps,      |x| > p:  |x - decoded| <= st / 2 + eps,
//   eps = 2^-20 M + 2^-140
// (eps covers the float arithmetic; its second term only matters for groups of subnormal
// values, whose steps round to the subnormal grid); or stochastic (the neighbouring level
// above or below, with the probabilities that make it unbiased to within eps; between p and
// the first tail level too), with sc and st in place of sc / 2 and st / 2.
//
// Breakpoint search, in fit(): the candidates are p_k = M * (k / 32) for k = 1 .. 16, M/32 to
// M/2 (a larger p rarely wins: even for uniform data the best p is near M * L / (L + T), below
// M/2). Quantizing the group once per candidate and summing the errors (the exhaustive
// search) costs 16 quantize passes per value, and made compression take some 20 times as long
// as a memcpy of its input; the error is not unimodal in p (levels pass over clusters of
// values), so a golden-section search is no way out. Instead the candidates are ranked by a
// model and only the best `search` of them (config, default 1: the model's choice) are
// quantized to compare their errors:
//   1. model: a value quantized with step s errs by about s^2 / 12; with n_c(k) non-zero
//      values at most p_k (centre, step p_k / L) and n_t(k) above (tails, step (M - p_k) / T),
//      score(k) = n_c(k) k^2 T^2 + n_t(k) (32 - k)^2 L^2 (the model error times (32 L T / M)^2,
//      an integer: the same on every backend). Zeros are exact for every p and left out.
//      One counting pass of 16 compares per value.
//   2. exact: for the `search` best scores (ties: smaller k), the group is quantized with
//      nearest rounding by the very arithmetic of encode and decode (split() and level()
//      below), the squared errors (x_i - q(x_i))^2, each scaled by 2^-e with 2^e near M (exact,
//      no overflow near FLT_MAX), are added with tree_sum (the fixed tree order, so every
//      backend gets the same sums), and the smallest sum wins; ties go to the smaller p.
// search = 16 is the exhaustive search. On t(3), normal and uniform data in groups of 128 the
// model's choice errs 2-12% more than the exhaustive search's (up to 28% on data that is
// mostly zeros), search = 3 0-2% (3-9%) (docs/quantizers.md); the exhaustive set itself is
// within 2% of a 512-breakpoint search at 3 and 4 bits. Each exact candidate costs about one
// more quantize pass. A group holding NaN or inf keeps k = 1.
//
// Metadata per group: f32 M, then u8 k (5 bytes); p = M * (k / 32) is recomputed by the
// receiver. check_meta rejects a non-finite M (errc::non_finite_value: the sender's group held
// NaN or inf), a negative M, and k outside [1, 16] (errc::bad_meta: k = 0 would be p = 0, and
// k > 16 is no candidate). An all-zero group has M = 0 and decodes to zeros. Decoded values
// never exceed M in magnitude, so no finite M overflows.
// Not summable: each rank's M and p differ.

#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/byteio.hpp"
#include "../core/concepts.hpp"
#include "../core/ids.hpp"
#include "../core/options.hpp"
#include "../core/reduce.hpp"
#include "../core/rounding.hpp"
#include "group.hpp"


namespace gradcomp::quantize {
GRADCOMP_PRECISE_BEGIN

struct piecewise_config {
  std::size_t group = 128;  // values per (M, p): a power of two in [1, 4096]
  rounding round = rounding::nearest;
  // Breakpoint candidates whose errors are computed and compared, best model scores first
  // (1: the model's choice; 16: every candidate). Only the sender's choice of p depends on
  // it, not the format.
  std::uint8_t search = 1;
  // The members a tool sets by name (core/options.hpp).
  static constexpr auto options() {
    return std::tuple{option{"group", &piecewise_config::group}, option{"rounding", &piecewise_config::round}};
  }
};

template <unsigned Bits = 4>
struct piecewise : grouped_quantizer<piecewise_config> {
  static_assert(Bits >= 3 && Bits <= 8, "piecewise: Bits must be in [3, 8] (a region bit, a sign bit and a magnitude)");
  struct meta {
    float max = 0.0f;       // M = max|x|; sent
    std::uint8_t k = 1;     // p = M * (k / 32); sent
    float p = 0.0f;         // the rest follow from M and k (levels, derive); not sent
    float sc = 0.0f;        // centre step
    float st = 0.0f;        // tail step
    // encode() only (derive() sets them; load_meta() leaves them 0):
    float pre = 0.0f;       // a power of two 2^-e with 2^e near M (exact scaling)
    float inv_sc = 0.0f;    // 1 / (sc * pre), or 0 where sc is 0 or not finite
    float inv_st = 0.0f;    // 1 / (st * pre), likewise
  };
  static constexpr unsigned bits = Bits;
  static constexpr std::uint8_t id = ids::quantizer::piecewise;
  static constexpr std::size_t meta_bytes = 5;
  static constexpr std::uint32_t region_codes = 1u << (Bits - 1);  // codes per region
  static constexpr std::uint32_t tail_levels = 1u << (Bits - 2);   // T: levels per tail
  static constexpr std::uint32_t centre_levels = tail_levels - 1;  // L: non-zero levels a side
  static constexpr std::uint8_t candidates = 16;                   // k = 1 .. 16
  static constexpr float fraction_step = 1.0f / 32.0f;             // p_k = M * (k * fraction_step)

  static status validate(const config& c) {
    if (c.search < 1 || c.search > candidates) return {errc::invalid_argument, "piecewise search must be in [1, 16]"};
    return check_group_size(c.group);
  }
  static constexpr std::uint16_t format_param(const config& c) {
    return static_cast<std::uint16_t>(group_param(c.group) | Bits);
  }

  // What decode() reads of the meta of a group with maximum M and breakpoint index k
  // (p = M * (k / 32)): the receiver's load_meta() builds only this (the reciprocals below cost
  // two more divisions per group, and decode never reads them), the sender's fit() builds it
  // through derive(), so both decode the same bits.
  GRADCOMP_HD static meta levels(float max, std::uint8_t k) {
    meta m;
    m.max = max;
    m.k = k;
    m.p = max * (static_cast<float>(k) * fraction_step);
    m.sc = m.p / static_cast<float>(centre_levels);
    m.st = (max - m.p) / static_cast<float>(tail_levels);
    return m;
  }

  // levels() plus what encode() needs.
  GRADCOMP_HD static meta derive(float max, std::uint8_t k) {
    meta m = levels(max, k);
    // encode multiplies (x * pre) by 1 / (sc * pre): the bits of x * (1 / sc) (pre is a power
    // of two), but finite where 1 / sc would overflow (sc subnormal), so it never divides.
    m.pre = pow2_normalizer(max);
    m.inv_sc = inverse(m.sc * m.pre);
    m.inv_st = inverse(m.st * m.pre);
    return m;
  }

  // Inlined where the compressor calls it, so its loops get the ISA run_best() picks.
  GRADCOMP_HD GRADCOMP_INLINE static meta fit(const config& c, const float* x, std::size_t n) {
    const float max = max_abs(x, n);
    // All zeros: every candidate's error is 0, ties keep k = 1; NaN or inf: k = 1 (rejected anyway).
    if (max == 0.0f || !is_finite_bits(float_bits(max))) return derive(max, 1);
    // 1. The model's scores, from the count of non-zero values at most p_k per candidate (the
    // candidates side by side: one vector compare per value).
    std::uint32_t p[candidates], centre[candidates] = {};
    for (std::uint8_t k = 1; k <= candidates; ++k) p[k - 1] = abs_key(max * (static_cast<float>(k) * fraction_step));  // levels()' p
    std::uint32_t nonzero = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t a = abs_key(x[i]);
      const std::uint32_t counted = a != 0u;
      nonzero += counted;
      for (std::uint8_t k = 0; k < candidates; ++k) centre[k] += counted & (a <= p[k]);
    }
    std::uint64_t score[candidates];
    for (std::uint8_t k = 1; k <= candidates; ++k) {
      const std::uint64_t kk = k, rest = 32u - k, T = tail_levels, L = centre_levels;
      score[k - 1] = centre[k - 1] * kk * kk * T * T + (nonzero - centre[k - 1]) * rest * rest * L * L;
    }
    // 2. Exact errors of the best `search` scores. Errors are scaled by 2^-e with 2^e near M:
    // exact, and their squares stay below 16.
    const float scale = pow2_normalizer(max);
    const std::uint32_t rounds = c.search < candidates ? c.search : candidates;
    std::uint32_t tried = 0;  // bit k - 1: candidate k already chosen
    std::uint8_t best = 0;
    float best_err = 0.0f;
    for (std::uint32_t r = 0; r < rounds; ++r) {
      std::uint8_t k = 0;  // the best score not tried yet, ties to the smaller k
      for (std::uint8_t j = 1; j <= candidates; ++j)
        if (!(tried >> (j - 1) & 1u) && (k == 0 || score[j - 1] < score[k - 1])) k = j;
      if (rounds == 1) return derive(max, k);  // the model's choice: nothing to compare it with
      tried |= 1u << (k - 1);
      const meta m = derive(max, k);
      // encode's nearest rounding and decode's level, on |v|: every step is odd or even in v,
      // so the error is the same float as (v - decode(encode(v)))^2 scaled, in fewer steps
      // (no sign, no lower clamps: |v| <= M is finite here).
      const float lc = static_cast<float>(centre_levels), lt = static_cast<float>(tail_levels);
      const auto squared_error = [&](float v) {
        const float a = bits_float(abs_key(v));
        const float q = round_even((a * m.pre) * m.inv_sc);
        const float j = round_even(((m.max - a) * m.pre) * m.inv_st);
        const float centre = (q < lc ? q : lc) * m.sc, outer = m.max - j * m.st;
        const float d = (a - select_float((a > m.p) & (j < lt), outer, centre)) * scale;
        return d * d;
      };
      const float err = tree_sum(x, n, squared_error);  // vectorised inside tree_sum, no array of errors
      if (best == 0 || err < best_err || (err == best_err && k < best)) {
        best = k;
        best_err = err;
      }
    }
    return derive(max, best);
  }

  GRADCOMP_HD static code_type encode(const config& c, const meta& m, float x, std::uint32_t random) {
    const parts s = split(m, x, random, c.round == rounding::stochastic);
    const std::uint32_t centre = static_cast<std::uint32_t>(static_cast<int>(s.q) + static_cast<int>(centre_levels));
    // j < T in the tails (j = T, the centre's top level, is masked off when unused).
    const std::uint32_t tail = region_codes | (s.sign >> (32 - (Bits - 1))) |
                               (tail_levels - 1u - (static_cast<std::uint32_t>(s.j) & (tail_levels - 1u)));
    // A bit select, not ?: (GCC turns that into a branch around the float-to-int conversions,
    // which it may not speculate, and the compressor's encode loop stayed scalar: 8 ns a value).
    return static_cast<code_type>(detail::select(s.tail, tail, centre));
  }

  GRADCOMP_HD static float decode(const config&, const meta& m, code_type code) {
    const parts s = code_parts(code);
    return level(m, s.q, s.j, s.tail, s.sign);
  }


  GRADCOMP_HD static void store_meta(const meta& m, std::byte* out) {
    store_le<std::uint32_t>(out, float_bits(m.max));
    out[4] = static_cast<std::byte>(m.k);
  }
  GRADCOMP_HD static meta load_meta(const std::byte* in) {
    return levels(bits_float(load_le<std::uint32_t>(in)), static_cast<std::uint8_t>(in[4]));
  }
  GRADCOMP_HD static status check_meta(const config&, const meta& m) {
    if (!is_finite_bits(float_bits(m.max)))
      return {errc::non_finite_value, "group maximum is NaN or inf (the sender's gradient held non-finite values)"};
    if (float_bits(m.max) >> 31) return {errc::bad_meta, "group maximum is negative"};
    if (m.k < 1 || m.k > candidates) return {errc::bad_meta, "piecewise breakpoint index outside [1, 16]"};
    return {};
  }

 private:
  // One value's rounding, shared by encode (which builds the code) and fit (which needs the
  // decoded value): centre level q, tail distance j (levels below M), region and sign.
  struct parts {
    float q;
    float j;
    std::uint32_t tail;  // 1 in the tails, else 0
    std::uint32_t sign;  // the sign bit of x, in place
  };

  GRADCOMP_HD static parts split(const meta& m, float x, std::uint32_t random, bool stochastic) {
    const float a = bits_float(abs_key(x));
    const float lc = static_cast<float>(centre_levels), lt = static_cast<float>(tail_levels);
    const float y = (x * m.pre) * m.inv_sc;
    const float v = ((m.max - a) * m.pre) * m.inv_st;
    // Round, then clamp: the same result as the other way round, since the bounds are integers.
    // Both roundings, picked on bits: the mode is a run-time value, and a ?: here is control
    // flow that keeps the compilers from vectorising the caller's loop.
    const float q = select_float(stochastic, round_stochastic(y, random), round_even(y));
    const float j = select_float(stochastic, round_stochastic(v, random), round_even(v));
    parts s;
    s.q = clamp(q, -lc, lc);
    s.j = clamp(j, 0.0f, lt);
    s.tail = (a > m.p) & (j < lt);  // 0 for NaN
    s.sign = float_bits(x) & 0x80000000u;
    return s;
  }

  // What decode() reads off a code: centre level q, tail distance j, region and sign.
  GRADCOMP_HD static constexpr parts code_parts(std::uint32_t code) {
    const std::uint32_t c = code & (region_codes - 1u);
    const std::uint32_t centre_code = c < 2 * centre_levels ? c : 2 * centre_levels;  // the unused code reads as L
    return {static_cast<float>(static_cast<int>(centre_code) - static_cast<int>(centre_levels)),
            static_cast<float>(tail_levels - 1u - (c & (tail_levels - 1u))), (code & region_codes) != 0 ? 1u : 0u,
            (c & tail_levels) << (32 - (Bits - 1))};
  }


  // The decoded value of split()'s result, by the operations decode() uses: the same bits.
  GRADCOMP_HD static float value(const meta& m, const parts& s) { return level(m, s.q, s.j, s.tail, s.sign); }

  // Centre level q * sc, or tail level M - j * st with the given sign bit. Both are computed
  // and one is picked by bit operations, so loops stay branch-free.
  GRADCOMP_HD static float level(const meta& m, float q, float j, bool tail, std::uint32_t sign) {
    const float centre = q * m.sc;
    const float magnitude = m.max - j * m.st;
    return bits_float(detail::select(tail, float_bits(magnitude) ^ sign, float_bits(centre)));
  }

  // v clamped to [lo, hi], NaN to lo, by bit selects: compilers cannot turn them into branches
  // (as they do with ?: on floats, moving arithmetic under a condition), so loops vectorise.
  GRADCOMP_HD static float clamp(float v, float lo, float hi) {
    v = bits_float(detail::select(!(v >= lo), float_bits(lo), float_bits(v)));
    return bits_float(detail::select(v > hi, float_bits(hi), float_bits(v)));
  }

  // 1 / s where it is finite and non-zero, else 0 (then s is 0 or the group is rejected).
  GRADCOMP_HD static float inverse(float s) {
    if (!(s > 0.0f) || !is_finite_bits(float_bits(s))) return 0.0f;
    const float r = 1.0f / s;
    return is_finite_bits(float_bits(r)) ? r : 0.0f;
  }
};

GRADCOMP_PRECISE_END
}  // namespace gradcomp::quantize

