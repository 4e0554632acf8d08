#pragma once
// The grouped path of the CUDA backend: quantizers with per-group metadata (Q::fit,
// store_meta / load_meta / check_meta), codes narrower than their code_type (bit-packed, LSB
// first, as core/byteio.hpp's pack_bits and load_code) or stochastic rounding (Philox). The
// casts keep the fused fast path of compressor.cuh.
//
// Compression works in SPANS: a span is span_values<Q>(group) consecutive sent values of one
// chunk (whole groups, at least span_min values: 1024 for int_block), encoded by one block in
// four phases with a barrier between them:
//
//   load    x_i (combine(g, e), or the gathered top-k value) into shared memory, one padding
//           word after each group so that threads fitting neighbouring groups use other banks
//   fit     one thread per group: Q::fit over the group's contiguous values (the CPU's call on
//           the same array, hence the same bits), store_meta into the frame's meta section
//   encode  one thread per 8 values (one Philox call): Q::encode, residual update
//   store   one thread per 32-bit word of packed codes: the codes overlapping it
//
// A span's codes start at bit m0 * bits with m0 a multiple of the span size (of 32 values),
// so they start on a word boundary: blocks never share a byte, whatever the bit width and
// group size. Checksums are taken afterwards by a separate pass over the frame bodies, which
// also zeroes the section padding (body_keep_mask).
//
// Decoding reads each value's group metadata and code straight from the frame (value_at),
// and validates every group's metadata before anything is written (meta_errors).
//
// The phases are GRADCOMP_HD functions of (thread, thread count): the kernels call them with
// threadIdx.x, and the host tests run them for every simulated thread in turn and compare the
// frame with the CPU's, byte for byte (tests/cuda/grouped_host_test.cu).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../core/bits.hpp"
#include "../core/byteio.hpp"
#include "../core/concepts.hpp"
#include "../core/frame.hpp"
#include "../core/numeric.hpp"
#include "../core/philox.hpp"
#include "../core/status.hpp"
#include "common.cuh"

namespace gradcomp::cuda::detail {

// Quantizers that are plain casts whatever their config (no groups, no metadata, codes as
// wide as code_type, not stochastic: ungrouped_quantizer's defaults) run on the fast path;
// every other quantizer runs on the grouped path.
template <class Q>
inline constexpr bool is_cast = std::is_base_of_v<ungrouped_quantizer, Q> && Q::meta_bytes == 0 &&
                                Q::bits == 8 * sizeof(typename Q::code_type);

// --- Span geometry.

// Where value i of a span sits in shared memory: one padding word after each group of
// gs >= 2 values (group q starts at q * (gs + 1): an odd stride, so the threads fitting
// groups q, q + 1, ... read different banks).
GRADCOMP_HD constexpr std::uint32_t slot(std::uint32_t i, std::uint32_t gs) { return gs > 1 ? i + i / gs : i; }

// Shared memory of encode_groups_kernel: the staged values (largest slot + 1 over every
// supported span: gs + 1 for a span of one group of gs >= 1024 values, at most 1.5 * 1024
// for smaller groups), the codes of a span, and the metadata of a span's groups.
inline constexpr std::uint32_t max_span = static_cast<std::uint32_t>(max_group_size);  // values of a span at most
inline constexpr std::uint32_t span_slots = max_span + 1 > 1536 ? max_span + 1 : 1536;
inline constexpr std::size_t span_shared_bytes = 46 * 1024;  // static shared memory is at most 48 KiB

// Group metadata in shared memory: meta_words<Q> 32-bit words per group, copied as bytes (a
// meta may have default member initializers, which __shared__ objects cannot have).
template <class Q>
inline constexpr std::uint32_t meta_words = static_cast<std::uint32_t>((sizeof(typename Q::meta) + 3) / 4);

// Values of a span at least: 1024, halved while the metadata of that many one-value groups
// would not fit beside the staged values and codes; a power of two, at least 32 (whole
// 32-bit words of codes, whole Philox calls of 8 values).
template <class Q>
constexpr std::uint32_t span_min_for() {
  const std::size_t budget = span_shared_bytes - 4 * std::size_t{span_slots} - max_span * sizeof(typename Q::code_type);
  std::uint32_t s = 1024;
  while (s > 32 && std::size_t{s} * meta_words<Q> * 4 > budget) s /= 2;
  return s;
}
template <class Q>
inline constexpr std::uint32_t span_min = span_min_for<Q>();

// Values of a span for group size gs (0: no groups): whole groups, at least span_min.
template <class Q>
GRADCOMP_HD constexpr std::uint32_t span_values(std::size_t gs) {
  return gs > span_min<Q> ? static_cast<std::uint32_t>(gs) : span_min<Q>;
}

// Group sizes the span geometry supports: 0 or a power of two up to max_group_size (then a
// span holds whole groups and a multiple of 32 values).
GRADCOMP_HD constexpr bool span_group_ok(std::size_t gs) {
  return gs == 0 || (gs <= max_group_size && (gs & (gs - 1)) == 0);
}

template <class Q>
GRADCOMP_HD inline void put_meta(std::uint32_t* words, std::uint32_t q, const typename Q::meta& m) {
  static_assert(std::is_trivially_copyable_v<typename Q::meta>, "gradcomp::cuda: quantizer meta must be trivially copyable");
  std::memcpy(words + q * meta_words<Q>, static_cast<const void*>(&m), sizeof m);
}
template <class Q>
GRADCOMP_HD inline typename Q::meta get_meta(const std::uint32_t* words, std::uint32_t q) {
  typename Q::meta m;
  std::memcpy(static_cast<void*>(&m), words + q * meta_words<Q>, sizeof m);
  return m;
}

// Stochastic rounding's random numbers of values 8k .. 8k + 7 of a chunk come from one Philox
// call, as random16_at (core/philox.hpp) defines them: value 8k + l takes half l % 2 (0: low)
// of word l / 2, as the high 16 bits. The host tests compare these with random16_at.
GRADCOMP_HD inline philox_u32x4 octet_philox(std::uint32_t seed, std::uint64_t step, std::uint32_t chunk, std::uint64_t k) {
  return philox4x32_10({{static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k >> 32), chunk,
                         static_cast<std::uint32_t>(random_stream::quantizer)}},
                       seed, static_cast<std::uint32_t>(step));
}
GRADCOMP_HD inline std::uint32_t octet_random(const philox_u32x4& r, unsigned l) {
  const std::uint32_t w = r.v[(l / 2) % 4];
  return l % 2 ? (w & 0xffff0000u) : (w << 16);
}

// Word w (bits [32w, 32w + 32)) of codes[0..n) packed Bits bits each, LSB first, as pack_bits
// writes them; bits past the last code are zero.
template <unsigned Bits, class Code>
GRADCOMP_HD inline std::uint32_t pack_word(const Code* codes, std::uint32_t n, std::uint32_t w) {
  static_assert(Bits >= 1 && Bits <= 32);
  constexpr std::uint64_t mask = Bits == 32 ? 0xffffffffull : (std::uint64_t{1} << Bits) - 1u;
  const std::uint64_t first = std::uint64_t{32} * w, end = first + 32;
  std::uint32_t word = 0;
  // Code i covers bits [i * Bits, (i + 1) * Bits); the first one overlapping the word may
  // start before it (its high bits land in the word's low bits).
  for (std::uint64_t i = first / Bits; i < n && i * Bits < end; ++i) {
    const std::uint64_t c = static_cast<std::uint64_t>(codes[i]) & mask, at = i * Bits;
    word |= at >= first ? static_cast<std::uint32_t>(c << (at - first)) : static_cast<std::uint32_t>(c >> (first - at));
  }
  return word;
}

// A 32-bit store at a 4-byte aligned address (a plain store on the device).
GRADCOMP_HD inline void store_word(std::byte* p, std::uint32_t v) {
#if GRADCOMP_DEVICE_CODE
  *reinterpret_cast<std::uint32_t*>(p) = v;
#else
  store_le<std::uint32_t>(p, v);
#endif
}

// One span: what a block of encode_groups_kernel works on.
template <class C, class T>
struct span_work {
  typename C::config cfg;
  const T* g;                   // the chunk's gradient (element 0 of the chunk)
  float* e;                     // the chunk's residual, or null without feedback state
  const std::uint32_t* idx;     // top-k: the chunk's index section (value m is element idx[m])
  std::byte* frame;             // the chunk's frame
  std::uint64_t value_offset;   // of the frame's value section
  std::uint64_t m0;             // first value of the span in the chunk (a multiple of the span size)
  std::uint32_t n;              // values in the span, 1 .. span_values<Q>(group)
  std::uint32_t chunk;          // chunk id (Philox counter)
  std::uint64_t step;           // the step written in the header (Philox key)
};

template <class C>
GRADCOMP_HD inline std::uint32_t group_of(const typename C::config& cfg) {
  return static_cast<std::uint32_t>(C::quantizer::group_size(cfg.quantize));
}

// Phase 1: xs[slot(i)] = the value encoded as x_{m0 + i}, as the CPU's encode_dense /
// encode_topk load it.
template <class C, class T>
GRADCOMP_HD void span_load(const span_work<C, T>& w, float* xs, unsigned t, unsigned nt) {
  using F = typename C::feedback;
  const std::uint32_t gs = group_of<C>(w.cfg);
  for (std::uint32_t i = t; i < w.n; i += nt) {
    float x;
    if constexpr (C::sparsifier::is_dense) {
      const std::uint64_t k = w.m0 + i;
      x = to_float(w.g[k]);
      if constexpr (F::has_state) x = F::combine(w.cfg.feedback, x, w.e[k]);
    } else {
      const std::uint32_t j = w.idx[w.m0 + i];
      if constexpr (F::has_state) {
        x = w.e[j];  // x = combine(g, e) was stored by the selection's first pass
      } else {
        x = to_float(w.g[j]);
      }
    }
    xs[slot(i, gs)] = x;
  }
}

// Phase 2: each group's meta, from its contiguous values, into `metas` (shared) and the frame.
template <class C, class T>
GRADCOMP_HD void span_fit(const span_work<C, T>& w, const float* xs, std::uint32_t* metas, unsigned t, unsigned nt) {
  using Q = typename C::quantizer;
  const std::uint32_t gs = group_of<C>(w.cfg);
  if (gs == 0) return;
  const std::uint32_t groups = (w.n + gs - 1) / gs;
  std::byte* meta = w.frame + frame::header_bytes + (w.m0 / gs) * Q::meta_bytes;  // meta_offset() == header_bytes
  for (std::uint32_t q = t; q < groups; q += nt) {
    const std::uint32_t first = q * gs, count = w.n - first < gs ? w.n - first : gs;
    const typename Q::meta m = Q::fit(w.cfg.quantize, xs + slot(first, gs), count);
    put_meta<Q>(metas, q, m);
    Q::store_meta(m, meta + std::size_t{q} * Q::meta_bytes);
  }
}

// Phase 3: codes[i] for every value of the span, and the residual of the values sent.
template <class C, class T>
GRADCOMP_HD void span_encode(const span_work<C, T>& w, const float* xs, const std::uint32_t* metas,
                             typename C::quantizer::code_type* codes, unsigned t, unsigned nt) {
  using Q = typename C::quantizer;
  using F = typename C::feedback;
  const auto& qc = w.cfg.quantize;
  const std::uint32_t gs = group_of<C>(w.cfg);
  const bool stochastic = Q::stochastic(qc);
  for (std::uint32_t k = t; 8 * k < w.n; k += nt) {
    // Not stochastic: the CPU passes 0 as the random number.
    const philox_u32x4 r = stochastic ? octet_philox(w.cfg.seed, w.step, w.chunk, w.m0 / 8 + k) : philox_u32x4{{0, 0, 0, 0}};
    for (std::uint32_t l = 0; l < 8; ++l) {
      const std::uint32_t i = 8 * k + l;
      if (i >= w.n) break;
      const typename Q::meta m = gs ? get_meta<Q>(metas, i / gs) : typename Q::meta{};
      const float x = xs[slot(i, gs)];
      const auto code = Q::encode(qc, m, x, octet_random(r, l));
      codes[i] = code;
      if constexpr (F::has_state) {
        const std::uint64_t j = C::sparsifier::is_dense ? w.m0 + i : w.idx[w.m0 + i];
        w.e[j] = F::remainder(w.cfg.feedback, x, Q::decode(qc, m, code));
      }
    }
  }
}

// Phase 4: the span's packed codes into the value section, whole 32-bit words (the bits after
// the last code of the section are zero: they are padding).
template <class C, class T>
GRADCOMP_HD void span_store(const span_work<C, T>& w, const typename C::quantizer::code_type* codes, unsigned t,
                            unsigned nt) {
  constexpr unsigned bits = C::quantizer::bits;
  const auto words = static_cast<std::uint32_t>((std::uint64_t{w.n} * bits + 31) / 32);
  std::byte* out = w.frame + w.value_offset + w.m0 * bits / 8;  // m0 * bits is a multiple of 32
  for (std::uint32_t k = t; k < words; k += nt) store_word(out + 4 * std::size_t{k}, pack_word<bits>(codes, w.n, k));
}

// Bytes of the 32-bit word at body offset b (bytes after the header) that are not section
// padding: a mask with 0x00 in the padding bytes (which must be zero) and 0xff elsewhere.
GRADCOMP_HD inline std::uint32_t body_keep_mask(const frame::header& h, std::uint64_t b) {
  const std::uint64_t ends[3] = {h.meta_offset() + h.meta_bytes, h.index_offset() + h.index_bytes,
                                 h.value_offset() + h.value_bytes};
  const std::uint64_t at = frame::header_bytes + b;
  std::uint32_t keep = 0xffffffffu;
  for (std::uint64_t end : ends)
    for (unsigned k = 0; k < 4; ++k)
      if (at + k >= end && at + k < align8(end)) keep &= ~(0xffu << (8 * k));
  return keep;
}

// --- Decoding.

// Group q's metadata in frame f (the CPU's group_meta).
template <class C>
GRADCOMP_HD typename C::quantizer::meta group_meta_at(const std::byte* f, std::uint64_t q) {
  return C::quantizer::load_meta(f + frame::header_bytes + q * C::quantizer::meta_bytes);
}

// Value m of frame f, decoded with its group's metadata, as the CPU's apply_frame does.
template <class C>
GRADCOMP_HD float value_at(const typename C::quantizer::config& qc, const std::byte* f, std::uint64_t value_offset,
                           std::uint64_t m) {
  using Q = typename C::quantizer;
  const std::size_t gs = Q::group_size(qc);
  const typename Q::meta meta = gs ? group_meta_at<C>(f, m / gs) : typename Q::meta{};
  return Q::decode(qc, meta, load_code<typename Q::code_type, Q::bits>(f + value_offset, m));
}

// Q::check_meta on the groups whose metadata starts in body bytes [begin, end) of frame f
// (keeping `kept` values; header already checked), those of thread t of nt: the smallest
// (q << 8 | errc) over failing groups q, or ~0. The smallest q decides, as on the CPU.
template <class C>
GRADCOMP_HD std::uint64_t meta_errors(const typename C::quantizer::config& qc, const std::byte* f, std::uint64_t kept,
                                      std::uint64_t begin, std::uint64_t end, unsigned t, unsigned nt) {
  using Q = typename C::quantizer;
  constexpr std::uint64_t mb = Q::meta_bytes;
  const std::uint64_t groups = C::group_count(qc, kept);
  std::uint64_t q0 = 0, q1 = groups;
  if constexpr (mb != 0) {
    q0 = ceil_div(begin, mb);
    q1 = min_u64(groups, ceil_div(end, mb));
  } else if (begin != 0) {
    q0 = groups;  // no meta bytes: the tile at the start of the body checks every group
  }
  for (std::uint64_t q = q0 + t; q < q1; q += nt)
    if (const status s = Q::check_meta(qc, group_meta_at<C>(f, q)); !s)
      return (q << 8) | static_cast<std::uint32_t>(s.code());  // this thread's later groups are larger
  return ~std::uint64_t{0};
}

// Whether a value whose first bit lies in body bytes [begin, end) of frame f decodes to NaN or
// infinity (those of thread t of nt).
template <class C>
GRADCOMP_HD bool non_finite_in(const typename C::quantizer::config& qc, const std::byte* f, std::uint64_t value_offset,
                               std::uint64_t kept, std::uint64_t begin, std::uint64_t end, unsigned t, unsigned nt) {
  constexpr unsigned bits = C::quantizer::bits;
  const std::uint64_t v0 = value_offset - frame::header_bytes;  // the value section in body bytes
  const std::uint64_t lo = begin > v0 ? (begin - v0) * 8 : 0, hi = end > v0 ? (end - v0) * 8 : 0;
  const std::uint64_t m1 = min_u64(kept, ceil_div(hi, bits));
  for (std::uint64_t m = ceil_div(lo, bits) + t; m < m1; m += nt)
    if (!is_finite_bits(float_bits(value_at<C>(qc, f, value_offset, m)))) return true;
  return false;
}

}  // namespace gradcomp::cuda::detail
