#pragma once
// compressor<Partitioner, Sparsifier, Quantizer, Feedback>: the composition of four policies
// and its CPU execution. Types compose (fixed at compile time); values configure (the
// `config` aggregate, changeable between steps, e.g. for a density warm-up).
//
//   using C = gradcomp::compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;
//   C comp({.sparsify = {.density = 0.01}});
//   auto st = comp.make_state(n);                        // once: residual + workspace
//   std::vector<std::byte> payload(comp.max_payload_bytes<float>(n));
//   auto sent = comp.compress<float>(grad, st, payload); // frames, back to back
//   comp.accumulate<float>(received, sum);               // sum += decoded, per frame
//
// Frames are validated in full before anything is written (docs/wire-format.md).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "core/bits.hpp"
#include "core/byteio.hpp"
#include "core/concepts.hpp"
#include "core/frame.hpp"
#include "core/numeric.hpp"
#include "core/index_codec.hpp"
#include "core/permutation.hpp"
#include "core/philox.hpp"
#include "core/reduce.hpp"
#include "core/rounding.hpp"
#include "core/status.hpp"
#include "cpu/dispatch.hpp"
#include "cpu/prefetch.hpp"
#include "cpu/row_topk.hpp"
#include "cpu/stream.hpp"
#include "cpu/threshold_select.hpp"
#include "cpu/topk_select.hpp"
#include "sparsify/row_topk.hpp"
#include "sparsify/threshold.hpp"
#include "state.hpp"

namespace gradcomp {

template <class Partitioner, class Sparsifier, class Quantizer, class Feedback>
class compressor {
  static_assert(has_policy_kind<Partitioner, partitioner_tag>,
                "gradcomp::compressor: the 1st argument is not a partitioner: it lacks "
                "`using policy_kind = gradcomp::partitioner_tag;`");
  static_assert(has_validate<Partitioner>,
                "gradcomp::compressor: the partitioner needs `struct config` and `static status validate(const config&)`");
  static_assert(partitioner_members<Partitioner>,
                "gradcomp::compressor: the partitioner needs `chunk_count(config, n, element_bytes)` and "
                "`chunk_at(config, n, element_bytes, i)`");
  static_assert(has_policy_kind<Sparsifier, sparsifier_tag>,
                "gradcomp::compressor: the 2nd argument is not a sparsifier: it lacks "
                "`using policy_kind = gradcomp::sparsifier_tag;`");
  static_assert(has_validate<Sparsifier>,
                "gradcomp::compressor: the sparsifier needs `struct config` and `static status validate(const config&)`");
  static_assert(sparsifier_members<Sparsifier>,
                "gradcomp::compressor: the sparsifier needs `id`, `is_dense`, `kind` (a gradcomp::selection) and "
                "`kept(config, n)`");
  static_assert(has_policy_kind<Quantizer, quantizer_tag>,
                "gradcomp::compressor: the 3rd argument is not a quantizer: it lacks "
                "`using policy_kind = gradcomp::quantizer_tag;`");
  static_assert(has_validate<Quantizer>,
                "gradcomp::compressor: the quantizer needs `struct config` and `static status validate(const config&)`");
  static_assert(quantizer_codes<Quantizer>,
                "gradcomp::compressor: the quantizer needs an unsigned `code_type` and `bits`");
  static_assert(quantizer_groups<Quantizer>,
                "gradcomp::compressor: the quantizer needs `meta`, `meta_bytes`, `group_size(config)`, "
                "`fit(config, values, n)`, `store_meta`, `load_meta` and `check_meta(config, meta)` "
                "(derive from gradcomp::ungrouped_quantizer for a plain cast)");
  static_assert(quantizer_encode<Quantizer>,
                "gradcomp::compressor: the quantizer needs `static code_type encode(const config&, const meta&, float, std::uint32_t random)`");
  static_assert(quantizer_decode<Quantizer>,
                "gradcomp::compressor: the quantizer needs `static float decode(const config&, const meta&, code_type)`");
  static_assert(quantizer_traits<Quantizer>,
                "gradcomp::compressor: the quantizer needs `id`, `unbiased(config)`, `summable`, `stochastic(config)` and "
                "`format_param(config)`");
  static_assert(has_policy_kind<Feedback, feedback_tag>,
                "gradcomp::compressor: the 4th argument is not a feedback policy: it lacks "
                "`using policy_kind = gradcomp::feedback_tag;`");
  static_assert(has_validate<Feedback>,
                "gradcomp::compressor: the feedback needs `struct config` and `static status validate(const config&)`");
  static_assert(feedback_members<Feedback>,
                "gradcomp::compressor: the feedback needs `has_state`, `combine(config, g, e)` and "
                "`remainder(config, x, sent)`");
  static_assert(Quantizer::bits >= 1 && Quantizer::bits <= 8 * sizeof(typename Quantizer::code_type),
                "gradcomp::compressor: the quantizer's code_type must hold `bits` bits");

  using code_type = typename Quantizer::code_type;
  using meta_type = typename Quantizer::meta;
  static constexpr unsigned code_bits = Quantizer::bits;
  static constexpr selection kind = Sparsifier::kind;
  static_assert((kind == selection::dense) == Sparsifier::is_dense,
                "gradcomp::compressor: a sparsifier is dense exactly when its kind is selection::dense");
  // Sparse frames other than random-k carry an index list (u32, delta or bitmap).
  static constexpr bool listed = !Sparsifier::is_dense && kind != selection::random;
  static constexpr bool has_momentum = momentum_feedback<Feedback>;

 public:
  using partitioner = Partitioner;
  using sparsifier = Sparsifier;
  using quantizer = Quantizer;
  using feedback = Feedback;

  struct config {
    typename Partitioner::config partition{};
    typename Sparsifier::config sparsify{};
    typename Quantizer::config quantize{};
    typename Feedback::config feedback{};
    // false: compress rejects NaN/inf gradients and decoding rejects frames carrying them.
    // true (default): they travel like any value, so mixed-precision loss scaling sees them.
    bool allow_non_finite = true;
    // Key of the counter-based randomness (stochastic rounding, sampling, random-k): the same
    // seed on every rank and both backends gives the same bits.
    std::uint32_t seed = 0;
    // Sparse frames send their indices in the smallest of u32 list, delta-coded gaps and
    // bitmap (docs/wire-format.md); false: always u32 lists (as the CUDA backend writes).
    bool compact_indices = true;
    // Non-temporal stores for this compressor's outputs on the CPU (cpu/stream.hpp): by the
    // size of each call's output, or always, or never. Only speed depends on it.
    cpu::stores stores = cpu::stores::automatic;
  };

  compressor() = default;
  explicit compressor(const config& c) : cfg_(c) {}

  const config& get_config() const { return cfg_; }
  void set_config(const config& c) { cfg_ = c; }

  status validate() const {
    if (auto s = Partitioner::validate(cfg_.partition); !s) return s;
    if (auto s = Sparsifier::validate(cfg_.sparsify); !s) return s;
    if (auto s = Quantizer::validate(cfg_.quantize); !s) return s;
    if (Quantizer::group_size(cfg_.quantize) > max_group_size)
      return {errc::invalid_argument, "quantizer groups hold at most max_group_size (4096) values"};
    return Feedback::validate(cfg_.feedback);
  }

  // Identifies the frame format: sparsifier, quantizer and the quantizer's format parameters.
  std::uint32_t codec_id() const {
    return (std::uint32_t{Sparsifier::id} << 24) | (std::uint32_t{Quantizer::id} << 16) |
           Quantizer::format_param(cfg_.quantize);
  }

  // --- Host-side plan and size queries.
  template <gradient_element T>
  std::size_t chunk_count(std::size_t n) const {
    return Partitioner::chunk_count(cfg_.partition, n, sizeof(T));
  }
  template <gradient_element T>
  chunk_range chunk(std::size_t n, std::size_t i) const {
    return Partitioner::chunk_at(cfg_.partition, n, sizeof(T), i);
  }
  std::size_t max_frame_bytes(std::size_t chunk_elements) const {
    return frame_layout(cfg_, Sparsifier::kept(cfg_.sparsify, chunk_elements), chunk_elements).frame_bytes();
  }
  template <gradient_element T>
  std::size_t max_payload_bytes(std::size_t n) const {
    std::size_t total = 0;
    for (std::size_t i = 0, c = chunk_count<T>(n); i < c; ++i) total += max_frame_bytes(chunk<T>(n, i).count);
    return total;
  }

  // A state for gradients of n elements: residual and momentum (if the feedback keeps them),
  // thresholds (sparsify::threshold) and the selection workspace, sized for this config
  // (a larger density later needs a new state).
  state make_state(std::size_t n) const {
    state s;
    s.size = n;
    if constexpr (Feedback::has_state) s.residual.assign(n, 0.0f);
    if constexpr (has_momentum) s.momentum.assign(n, 0.0f);
    if constexpr (kind == selection::threshold)
      if (validate()) s.thresholds.assign(threshold_slots(n), 0.0f);
    s.workspace.resize(workspace_bytes(n));
    return s;
  }

  // Workspace bytes for gradients of n elements: the selection's scratch for the largest
  // chunk, then room for its indices.
  std::size_t workspace_bytes(std::size_t n) const {
    if constexpr (Sparsifier::is_dense) {
      return 0;
    } else {
      // (An invalid partition plan cannot be asked for chunks; compress refuses it anyway.)
      const std::size_t c = Partitioner::validate(cfg_.partition) ? largest_chunk(n) : n;
      return align8(selector_bytes(c)) + 4 * Sparsifier::kept(cfg_.sparsify, c);
    }
  }

  // --- Compression. Writes one frame per chunk, back to back; returns the bytes written and
  // advances st.step. `payload` must hold max_payload_bytes<T>(grad.size()). All checks come
  // first: on error, payload and state are untouched.
  template <gradient_element T>
  result<std::size_t> compress(std::span<const T> grad, state& st, std::span<std::byte> payload) const {
    if (auto s = check_compress_args(grad, st); !s) return s;
    const std::size_t max_bytes = max_payload_bytes<T>(grad.size());
    if (payload.size() < max_bytes) return status{errc::buffer_too_small, "payload smaller than max_payload_bytes()"};
    const std::size_t chunks = chunk_count<T>(grad.size());
    for (std::size_t i = 0; i < chunks; ++i)
      if (auto s = check_chunk_size(chunk<T>(grad.size(), i)); !s) return s;
    if (auto s = check_finite(grad.data(), grad.size()); !s) return s;
    // Non-temporal stores when the whole payload would not stay in cache, even if each
    // frame would.
    const bool streaming = cpu::streaming_stores(cfg_.stores, max_bytes);
    std::size_t written = 0;
    for (std::size_t i = 0; i < chunks; ++i)
      written += write_frame<T>(i, grad, st, payload.subspan(written), streaming);
    finish_step(st);
    return written;
  }

  // One chunk's frame, for pipelining chunk i's send with chunk i + 1's compression. After
  // the last chunk of a buffer, call finish_step(st). `frame` must hold
  // max_frame_bytes(chunk<T>(n, i).count).
  template <gradient_element T>
  result<std::size_t> compress_chunk(std::size_t i, std::span<const T> grad, state& st, std::span<std::byte> frame) const {
    if (auto s = check_compress_args(grad, st); !s) return s;
    if (i >= chunk_count<T>(grad.size())) return status{errc::invalid_argument, "chunk index beyond the plan"};
    const chunk_range r = chunk<T>(grad.size(), i);
    if (auto s = check_chunk_size(r); !s) return s;
    if (frame.size() < max_frame_bytes(r.count))
      return status{errc::buffer_too_small, "frame buffer smaller than max_frame_bytes()"};
    if (auto s = check_finite(grad.data() + r.offset, r.count); !s) return s;
    return write_frame<T>(i, grad, st, frame, cpu::streaming_stores(cfg_.stores, max_frame_bytes(r.count)));
  }

  void finish_step(state& st) const { ++st.step; }

  // --- Decoding. `payload` holds one or more frames back to back, for chunks of a buffer of
  // out.size() elements. Every frame is validated before anything is written; on error `out`
  // is untouched. decompress overwrites each frame's chunk (unsent elements become 0);
  // accumulate adds the decoded values to it.
  template <gradient_element T>
  status decompress(std::span<const std::byte> payload, std::span<T> out) const {
    return decode<T>(payload, out, false);
  }
  template <gradient_element T>
  status accumulate(std::span<const std::byte> payload, std::span<T> out) const {
    return decode<T>(payload, out, true);
  }

  // --- Pieces of frame validation shared with the CUDA backend (host and device).

  // Header fields against the receiver: codec, chunk plan for a buffer of n elements, and
  // section sizes implied by the kept count. Assumes frame::parse_header() succeeded.
  GRADCOMP_HD static status check_frame_header(const config& c, std::uint32_t codec, const frame::header& h,
                                               std::size_t n) {
    if (h.codec_id != codec) return {errc::codec_mismatch, "frame codec id differs from the compressor's"};
    const bool dense = Sparsifier::is_dense;
    if (!index_format_allowed(h.indices)) return {errc::codec_mismatch, "frame index format differs from the sparsifier's"};
    const std::size_t element_bytes = h.source_dtype == dtype::f32 ? 4 : 2;
    if (h.chunk_id >= Partitioner::chunk_count(c.partition, n, element_bytes))
      return {errc::size_mismatch, "frame chunk id beyond the receiver's plan"};
    const chunk_range r = Partitioner::chunk_at(c.partition, n, element_bytes, h.chunk_id);
    if (r.offset != h.element_offset || r.count != h.dense_count)
      return {errc::size_mismatch, "frame chunk differs from the receiver's plan"};
    if (dense && h.kept_count != h.dense_count) return {errc::bad_header, "dense frame keeps fewer than all elements"};
    // kept <= dense <= n here, so the sizes below cannot overflow.
    const frame::header expect = frame_layout(c, h.kept_count, h.dense_count);
    if (h.meta_bytes != expect.meta_bytes || h.value_bytes != expect.value_bytes || !index_bytes_plausible(h))
      return {errc::bad_header, "section sizes do not match the kept count"};
    return {};
  }

  // Index formats a frame of this sparsifier may carry.
  GRADCOMP_HD static bool index_format_allowed(frame::index_format f) {
    if constexpr (Sparsifier::is_dense) return f == frame::index_format::none;
    if constexpr (kind == selection::random) return f == frame::index_format::seeded;
    return f == frame::index_format::u32_list || f == frame::index_format::delta || f == frame::index_format::bitmap;
  }

  // The index section's size against the header (a delta section's exact size depends on its
  // width byte: indices::check).
  GRADCOMP_HD static bool index_bytes_plausible(const frame::header& h) {
    switch (h.indices) {
      case frame::index_format::none: return h.index_bytes == 0;
      case frame::index_format::u32_list: return h.index_bytes == indices::u32_bytes(h.kept_count);
      case frame::index_format::bitmap: return h.index_bytes == indices::bitmap_bytes(h.dense_count);
      case frame::index_format::delta:
        return h.index_bytes >= indices::delta_bytes(h.kept_count, 0) && h.index_bytes <= indices::delta_bytes(h.kept_count, 32);
      case frame::index_format::seeded: return h.index_bytes == seeded_index_bytes;
    }
    return false;
  }

  // Random-k frames: the seed (u32) and a zero u32, so that a receiver with another seed
  // refuses the frame instead of scattering its values to the wrong places.
  static constexpr std::size_t seeded_index_bytes = 8;

  // The m-th sparse index j of a chunk of `count` elements, `previous` being index m - 1.
  GRADCOMP_HD static status check_index(std::uint32_t j, std::uint32_t previous, std::size_t m, std::uint64_t count) {
    if (j >= count) return {errc::index_out_of_range, "sparse index >= chunk element count"};
    if (m > 0 && j <= previous) return {errc::index_not_ascending, "sparse indices not strictly ascending"};
    return {};
  }

  // Groups of sent values in a frame sending `kept` values (0 for ungrouped quantizers).
  GRADCOMP_HD static std::size_t group_count(const typename Quantizer::config& qc, std::size_t kept) {
    const std::size_t g = Quantizer::group_size(qc);
    return g == 0 ? 0 : (kept + g - 1) / g;
  }

  // Section sizes (no codec id) of a frame keeping `kept` of `count` elements, its indices as
  // a u32 list (the largest index encoding).
  GRADCOMP_HD static frame::header frame_layout(const config& c, std::size_t kept, std::size_t count) {
    frame::header h;
    h.dense_count = count;
    h.kept_count = Sparsifier::is_dense ? count : kept;
    h.indices = Sparsifier::is_dense         ? frame::index_format::none
                : kind == selection::random ? frame::index_format::seeded
                                             : frame::index_format::u32_list;
    h.index_bytes = Sparsifier::is_dense ? 0 : kind == selection::random ? seeded_index_bytes : 4 * h.kept_count;
    h.meta_bytes = group_count(c.quantize, h.kept_count) * Quantizer::meta_bytes;
    h.value_bytes = packed_bytes(h.kept_count, code_bits);
    return h;
  }

  // Header (codec id and section sizes) of a frame keeping `kept` of `count` elements.
  frame::header layout(std::size_t kept, std::size_t count) const {
    frame::header h = frame_layout(cfg_, kept, count);
    h.codec_id = codec_id();
    return h;
  }

 private:

  // Chunk i's frame, arguments already checked; returns its size.
  template <class T>
  std::size_t write_frame(std::size_t i, std::span<const T> grad, state& st, std::span<std::byte> frame,
                          bool streaming) const {
    const chunk_range r = chunk<T>(grad.size(), i);
    frame::header h = layout(Sparsifier::kept(cfg_.sparsify, r.count), r.count);
    h.source_dtype = dtype_of<T>;
    h.chunk_id = static_cast<std::uint32_t>(i);
    h.step = st.step;
    h.element_offset = r.offset;
    const T* g = grad.data() + r.offset;
    float* e = Feedback::has_state ? st.residual.data() + r.offset : nullptr;
    float* u = has_momentum ? st.momentum.data() + r.offset : nullptr;
    const element_feedback<T> fb{cfg_.feedback, g, e, u, clip_factor(g, r.count)};
    std::byte* out = frame.data();
    if constexpr (!Sparsifier::is_dense) {
      encode_sparse(fb, h, st, out, streaming);
      return h.frame_bytes();
    }
    frame::write_header(h, out);
    frame::zero_padding(h, out);
    if constexpr (Sparsifier::is_dense) {
      if constexpr (code_bits == 8 * sizeof(code_type) && !has_momentum) {
        if (is_plain_cast()) {  // the body is the values: checksummed as they are written
          std::uint32_t body_crc = encode_cast(fb, r.count, out + h.value_offset(), streaming);
          const std::size_t end = h.value_offset() + h.value_bytes;
          body_crc = crc32c(std::span<const std::byte>(out + end, align8(end) - end), body_crc);
          frame::seal(frame.first(h.frame_bytes()), h.value_offset(), body_crc);
          return h.frame_bytes();
        }
      }
      encode_dense(fb, h, out, streaming);
    }
    return h.frame_bytes();
  }

  // The feedback's per-element work on one chunk (g, and e, u where the feedback keeps them).
  template <class T>
  struct element_feedback {
    const typename Feedback::config& cfg;
    const T* g;
    float* e;
    float* u;
    float clip;  // momentum's local clipping factor, else 1

    // x_j, the value considered for sending, without side effects.
    float peek(std::size_t j) const {
      if constexpr (has_momentum) {
        return Feedback::combine(cfg, Feedback::velocity(cfg, mul_rn(clip, to_float(g[j])), u[j]), e[j]);
      } else if constexpr (Feedback::has_state) {
        return Feedback::combine(cfg, to_float(g[j]), e[j]);
      } else {
        return to_float(g[j]);
      }
    }
    // x_j, leaving the state as if nothing were sent (e = x, u = u').
    float scan(std::size_t j) const {
      if constexpr (has_momentum) {
        u[j] = Feedback::velocity(cfg, mul_rn(clip, to_float(g[j])), u[j]);
        return e[j] = Feedback::combine(cfg, u[j], e[j]);
      } else if constexpr (Feedback::has_state) {
        return e[j] = Feedback::combine(cfg, to_float(g[j]), e[j]);
      } else {
        return to_float(g[j]);
      }
    }
    // x_j after scan(j).
    float value(std::size_t j) const {
      if constexpr (Feedback::has_state) {
        return e[j];
      } else {
        return to_float(g[j]);
      }
    }
    // A prefetch hook: asks for the g, e and u of elements [j, j + n).
    auto prefetcher() const {
      return [this](std::size_t j, std::size_t n) {
        cpu::prefetch(g + j, n);
        if constexpr (Feedback::has_state) cpu::prefetch(e + j, n);
        if constexpr (has_momentum) cpu::prefetch(u + j, n);
      };
    }
    // Element j was sent as `decoded`: keep the rest, and mask the momentum (DGC).
    void sent(std::size_t j, float x, float decoded) const {
      if constexpr (Feedback::has_state) e[j] = Feedback::remainder(cfg, x, decoded);
      if constexpr (has_momentum) u[j] = 0.0f;
    }
  };

  // Momentum's local gradient clipping factor for a chunk: squared norm summed in blocks of
  // max_tree_sum values (tree order, core/reduce.hpp), block sums added in double in order.
  template <class T>
  float clip_factor(const T* g, std::size_t count) const {
    if constexpr (has_momentum) {
      if (!(cfg_.feedback.clip_norm > 0.0f)) return 1.0f;
      double total = 0.0;
      alignas(64) float block[max_tree_sum];
      for (std::size_t j0 = 0; j0 < count; j0 += max_tree_sum) {
        const std::size_t n = std::min(max_tree_sum, count - j0);
        for (std::size_t i = 0; i < n; ++i) block[i] = to_float(g[j0 + i]);
        total += tree_sum(block, n, [](float x) { return mul_rn(x, x); });
      }
      return Feedback::clip_scale(cfg_.feedback, static_cast<float>(total));
    } else {
      (void)g;
      (void)count;
      return 1.0f;
    }
  }

  // The largest chunk of a buffer of n elements, for either element size.
  std::size_t largest_chunk(std::size_t n) const {
    std::size_t most = 0;
    for (std::size_t i = 0, c = chunk_count<float>(n); i < c; ++i) most = std::max(most, chunk<float>(n, i).count);
    for (std::size_t i = 0, c = chunk_count<bf16_t>(n); i < c; ++i) most = std::max(most, chunk<bf16_t>(n, i).count);
    return most;
  }
  std::size_t threshold_slots(std::size_t n) const { return std::max(chunk_count<float>(n), chunk_count<bf16_t>(n)); }

  // Scratch of the selection skeleton for a chunk of c elements.
  std::size_t selector_bytes(std::size_t c) const {
    if constexpr (kind == selection::exact_topk) return cpu::topk_selector::workspace_bytes(c);
    if constexpr (kind == selection::threshold) return cpu::threshold_selector::workspace_bytes(cfg_.sparsify, c);
    if constexpr (kind == selection::row_topk) return cpu::row_topk_selector::workspace_bytes(cfg_.sparsify.cols);
    return 0;
  }

  // A quantizer used as a cast: no groups, no randomness (the fused, checksummed fast path).
  bool is_plain_cast() const {
    return Quantizer::group_size(cfg_.quantize) == 0 && !Quantizer::stochastic(cfg_.quantize);
  }

  static status check_chunk_size(chunk_range r) {
    if (!Sparsifier::is_dense && r.count > 0xffffffffu) return {errc::invalid_argument, "sparse chunks hold at most 2^32 - 1 elements"};
    return {};
  }

  template <class T>
  status check_finite(const T* g, std::size_t count) const {
    if (!cfg_.allow_non_finite)
      for (std::size_t j = 0; j < count; ++j)
        if (!is_finite_bits(float_bits(to_float(g[j])))) return {errc::non_finite_value, "gradient holds NaN or inf"};
    return {};
  }

  template <gradient_element T>
  status check_compress_args(std::span<const T> grad, const state& st) const {
    if (auto s = validate(); !s) return s;
    if (grad.size() != st.size) return {errc::size_mismatch, "gradient size differs from the state's"};
    if (Feedback::has_state && st.residual.size() != st.size) return {errc::size_mismatch, "state has no residual"};
    if (has_momentum && st.momentum.size() != st.size) return {errc::size_mismatch, "state has no momentum"};
    if (kind == selection::threshold && st.thresholds.size() < threshold_slots(st.size))
      return {errc::size_mismatch, "state has no thresholds: use make_state()"};
    if (st.workspace.size() < workspace_bytes(st.size))
      return {errc::size_mismatch, "state workspace too small for this config: use make_state()"};
    if (chunk_count<T>(grad.size()) > 0xffffffffu) return {errc::invalid_argument, "more than 2^32 chunks"};
    return {};
  }

  // Returns the CRC32C of the value bytes written.
  template <class T>
  std::uint32_t encode_cast(const element_feedback<T>& fb, std::size_t count, std::byte* values, bool streaming) const {
    // The code lambdas capture copies: byte-sized code stores might alias a referenced config,
    // and GCC then runs the scalar version of the vectorised loop (8x slower for fp8).
    const auto qc = cfg_.quantize;
    const auto fc = cfg_.feedback;
    constexpr meta_type none{};
    const T* const g = fb.g;
    float* const e = fb.e;
    const auto ahead = fb.prefetcher();
    if constexpr (Feedback::has_state) {
      return cpu::write_codes<code_type>(
          count,
          [qc, fc, none, g, e](std::size_t j) {
            const float x = Feedback::combine(fc, to_float(g[j]), e[j]);
            const code_type c = Quantizer::encode(qc, none, x, 0);
            e[j] = Feedback::remainder(fc, x, Quantizer::decode(qc, none, c));
            return c;
          },
          values, 0, streaming, ahead);
    } else if constexpr (std::is_same_v<T, float> && has_avx2_encoder<Quantizer>) {
      struct codes {  // what the lambda below does, plus the hand-vectorised block
        typename Quantizer::config qc;
        const float* g;
        code_type operator()(std::size_t j) const { return Quantizer::encode(qc, meta_type{}, g[j], 0); }
        GRADCOMP_TARGET_AVX2 void block32(std::size_t j, code_type* out) const {
          Quantizer::encode_avx2(qc, meta_type{}, g + j, 32, out);
        }
      };
      return cpu::write_codes<code_type>(count, codes{qc, g}, values, 0, streaming, ahead);
    } else {
      return cpu::write_codes<code_type>(
          count, [qc, none, g](std::size_t j) { return Quantizer::encode(qc, none, to_float(g[j]), 0); }, values, 0,
          streaming, ahead);
    }
  }

  // Values per block of encode_values() when the quantizer has no groups.
  static constexpr std::size_t ungrouped_block = 1024;
  // Groups per batch of encode_values(): a batch's groups are all fitted before any is
  // encoded, so the scalar tail of each fit (reductions, divisions) overlaps its neighbours'
  // instead of stalling every group's vector loop.
  static constexpr std::size_t batch_groups(std::size_t gs) {
    return gs == 0 ? 1 : std::clamp<std::size_t>(ungrouped_block / gs, 1, 16);
  }

  // Encodes the sent values x_m, m < h.kept_count, a batch of whole groups (or
  // ungrouped_block values) at a time: load(m0, n, xs) returns x_m0 .. x_m0+n-1, put in xs or
  // where they already are; keep(m0, n, x, decoded) gets them back with their decoded values,
  // for the feedback. Writes each group's meta and the packed codes into frame f (header,
  // indices and padding already written), and seals it: the values' CRC32C is taken as they
  // are produced.
  // ahead(m, n) may be called to say that x_m .. x_m+n-1 will be loaded about
  // prefetch_values_ahead values later (m + n <= h.kept_count), so it can prefetch them.
  template <class Load, class Keep, class Prefetch = cpu::no_prefetch>
  void encode_values(const frame::header& h, std::byte* f, bool streaming, Load&& load, Keep&& keep,
                     Prefetch&& ahead = {}) const {
    cpu::run_best([&]() GRADCOMP_LOOP_BODY {
      // Locals of the vectorised function: byte-sized code stores cannot alias them (copies
      // of the config included), so the loops over a group vectorise.
      const auto qc = cfg_.quantize;
      const std::size_t gs = Quantizer::group_size(qc), block = gs ? gs : ungrouped_block;
      const std::size_t batch = block * batch_groups(gs);  // <= max_group_size
      const bool stochastic = Quantizer::stochastic(qc);
      [[maybe_unused]] const bool avx2 = cpu::avx2_active();
      std::byte* meta = f + h.meta_offset();
      alignas(64) float xs[max_group_size];
      alignas(64) float decoded[max_group_size];
      alignas(64) std::uint32_t random[max_group_size + 64];
      meta_type metas[batch_groups(1)];
      cpu::packed_stream<code_type, code_bits> writer(f + h.value_offset(), streaming);
      static_assert(decltype(writer)::max_put >= max_group_size, "a batch must fit the writer's room");
      for (std::size_t m0 = 0; m0 < h.kept_count; m0 += batch) {
        const std::size_t n = std::min<std::size_t>(batch, h.kept_count - m0);
        const std::size_t groups = (n + block - 1) / block;
        code_type* const out = writer.room();
        const float* const x = load(m0, n, xs);
        if (gs) {
          const std::size_t first = gs ? m0 / gs : 0;  // (a ?: keeps nvcc from flagging / 0 for casts)
          std::size_t q = 0;
          if constexpr (has_avx2_fitter<Quantizer>)
            if (avx2 && gs % 8 == 0)
              for (; q + 8 <= n / gs; q += 8) Quantizer::fit8_avx2(qc, x + q * gs, gs, metas + q);
          for (; q < groups; ++q) metas[q] = Quantizer::fit(qc, x + q * gs, std::min(gs, n - q * gs));
          for (q = 0; q < groups; ++q) Quantizer::store_meta(metas[q], meta + (first + q) * Quantizer::meta_bytes);
        }
        if (stochastic) fill_random(random, m0, n, h.chunk_id, h.step);
        for (std::size_t q = 0; q < groups; ++q) {
          const meta_type mt = gs ? metas[q] : meta_type{};
          const std::size_t i0 = q * block, i1 = std::min(n, i0 + block);
          cpu::ask_ahead(ahead, m0 + i0, block, h.kept_count);
          if (stochastic) {
            for (std::size_t i = i0; i < i1; ++i) out[i] = Quantizer::encode(qc, mt, x[i], random[i]);
          } else if (has_avx2_encoder<Quantizer> && avx2) {
            if constexpr (has_avx2_encoder<Quantizer>) Quantizer::encode_avx2(qc, mt, x + i0, i1 - i0, out + i0);
          } else {
            for (std::size_t i = i0; i < i1; ++i) out[i] = Quantizer::encode(qc, mt, x[i], 0);
          }
          if constexpr (Feedback::has_state)
            for (std::size_t i = i0; i < i1; ++i) decoded[i] = Quantizer::decode(qc, mt, out[i]);
        }
        if constexpr (Feedback::has_state) keep(m0, n, x, decoded);
        writer.commit(n);
      }
      // body = [meta, indices, their padding] then [values, padding]
      const std::size_t end = h.value_offset() + h.value_bytes;
      std::uint32_t values_crc = writer.finish();
      values_crc = crc32c(std::span<const std::byte>(f + end, align8(end) - end), values_crc);
      frame::seal(std::span(f, h.frame_bytes()), h.value_offset(), values_crc);
    });
  }

  // random[i] = random16_at(seed, step, chunk, quantizer, m0 + i) for i < n; random holds
  // max_group_size + 64 values (the batch form rounds up, and starts at a multiple of 8).
  void fill_random(std::uint32_t* random, std::size_t m0, std::size_t n, std::uint32_t chunk, std::uint64_t step) const {
    const std::size_t skip = m0 % 8;
    random16_fill(random, m0 - skip, n + skip, cfg_.seed, step, chunk, random_stream::quantizer);
    if (skip)
      for (std::size_t i = 0; i < n; ++i) random[i] = random[i + skip];
  }

  template <class T>
  void encode_dense(const element_feedback<T>& fb, const frame::header& h, std::byte* f, bool streaming) const {
    encode_values(
        h, f, streaming, [&](std::size_t m0, std::size_t n, float* xs) {
          if constexpr (std::is_same_v<T, float> && !Feedback::has_state) {
            return fb.g + m0;  // the gradient itself: no copy
          } else {
            for (std::size_t i = 0; i < n; ++i) xs[i] = fb.peek(m0 + i);
            return static_cast<const float*>(xs);
          }
        },
        [&](std::size_t m0, std::size_t n, const float* xs, const float* decoded) {
          for (std::size_t i = 0; i < n; ++i) fb.sent(m0 + i, xs[i], decoded[i]);
        },
        fb.prefetcher());
  }

  // Selects the chunk's sent elements into the workspace's index buffer; returns their count.
  template <class T>
  std::size_t select_indices(const element_feedback<T>& fb, const frame::header& h, state& st, std::uint32_t* idx) const {
    const std::size_t count = h.dense_count;
    const std::span<std::byte> scratch(st.workspace.data(), align8(selector_bytes(count)));
    const auto peek_key = [&](std::size_t j) { return abs_key(fb.peek(j)); };
    const auto scan_key = [&](std::size_t j) { return abs_key(fb.scan(j)); };  // x = g + e computed once, here
    const auto key_at = [&](std::size_t j) { return abs_key(fb.value(j)); };
    // The scans prefetch the gradient only when it is all they read: with a residual (two
    // streams read, one written) prefetching measured 6-20% slower, without it 12-18% faster.
    const auto ahead = [&] {
      if constexpr (Feedback::has_state) {
        return cpu::no_prefetch{};
      } else {
        return fb.prefetcher();
      }
    }();
    if constexpr (kind == selection::exact_topk) {
      cpu::topk_selector(scratch, count, h.kept_count).select(peek_key, scan_key, key_at, idx, ahead);
      return h.kept_count;
    } else if constexpr (kind == selection::threshold) {
      float& last = st.thresholds[h.chunk_id];
      cpu::threshold_selector select(scratch, cfg_.sparsify, count, cfg_.seed, h.step, h.chunk_id, last);
      const std::size_t kept = select.select(peek_key, scan_key, key_at, idx, ahead);
      last = select.threshold();
      return kept;
    } else if constexpr (kind == selection::row_topk) {
      return cpu::row_topk_selector(scratch, count, cfg_.sparsify.cols, Sparsifier::per_row(cfg_.sparsify))
          .select(scan_key, idx);
    } else {
      static_assert(kind == selection::random, "gradcomp::compressor: no CPU selection for this sparsifier kind");
      if constexpr (Feedback::has_state)
        for (std::size_t j = 0; j < count; ++j) (void)fb.scan(j);
      const feistel_permutation pi(count, cfg_.seed, h.step, h.chunk_id);
      for (std::size_t m = 0; m < h.kept_count; ++m) idx[m] = pi(static_cast<std::uint32_t>(m));
      return h.kept_count;
    }
  }

  // A sparse frame: selection, then the header in the index encoding chosen for the
  // selected indices, the index section, and the values.
  template <class T>
  void encode_sparse(const element_feedback<T>& fb, frame::header& h, state& st, std::byte* f, bool streaming) const {
    auto* idx = reinterpret_cast<std::uint32_t*>(st.workspace.data() + align8(selector_bytes(h.dense_count)));
    const std::size_t kept = select_indices(fb, h, st, idx);
    if (kept != h.kept_count) {  // threshold: data-dependent count
      const frame::header sized = layout(kept, h.dense_count);
      h.kept_count = kept;
      h.meta_bytes = sized.meta_bytes;
      h.index_bytes = sized.index_bytes;
      h.value_bytes = sized.value_bytes;
    }
    std::byte* section = f + h.index_offset();  // (after the meta section, whose size is fixed by now)
    if constexpr (listed) {
      const indices::encoding enc = indices::choose(idx, kept, h.dense_count, cfg_.compact_indices);
      h.indices = enc.format;
      h.index_bytes = enc.bytes;
      indices::write(enc, idx, kept, h.dense_count, section);
    } else {
      store_le<std::uint32_t>(section, cfg_.seed);
      store_le<std::uint32_t>(section + 4, 0);
    }
    frame::write_header(h, f);
    frame::zero_padding(h, f);
    const T* g = fb.g;
    constexpr std::size_t ahead = 32;  // kept elements are scattered: keep many loads in flight
    encode_values(
        h, f, streaming,
        [&](std::size_t m0, std::size_t n, float* xs) {
          for (std::size_t i = 0; i < n; ++i) {
            const std::size_t m = m0 + i;
            if (m + ahead < kept) {
              if constexpr (Feedback::has_state) {
                GRADCOMP_PREFETCH(fb.e + idx[m + ahead]);
              } else {
                GRADCOMP_PREFETCH(g + idx[m + ahead]);
              }
            }
            xs[i] = fb.value(idx[m]);
          }
          return static_cast<const float*>(xs);
        },
        [&](std::size_t m0, std::size_t n, const float* xs, const float* decoded) {
          for (std::size_t i = 0; i < n; ++i) fb.sent(idx[m0 + i], xs[i], decoded[i]);
        });
  }

  // The indices of a validated sparse frame, a block at a time, in value order: where[i] =
  // index of value m0 + i, i < n. Listed frames read their index section; random-k frames
  // evaluate the permutation their (seed, step, chunk) name.
  struct listed_indices {
    indices::reader list;
    void next(std::size_t, std::size_t n, std::uint32_t* where) { list.next(where, n); }
  };
  struct seeded_indices {
    feistel_permutation pi;
    void next(std::size_t m0, std::size_t n, std::uint32_t* where) const {
      for (std::size_t i = 0; i < n; ++i) where[i] = pi(static_cast<std::uint32_t>(m0 + i));
    }
  };
  auto indices_of(const frame::header& h, const std::byte* f) const {
    if constexpr (kind == selection::random) {
      return seeded_indices{feistel_permutation(h.dense_count, cfg_.seed, h.step, h.chunk_id)};
    } else {
      return listed_indices{indices::reader(h.indices, f + h.index_offset(), h.index_bytes)};
    }
  }

  // Meta of group q of frame f (validated by check_frame before use).
  meta_type group_meta(const frame::header& h, const std::byte* f, std::size_t q) const {
    return Quantizer::load_meta(f + h.meta_offset() + q * Quantizer::meta_bytes);
  }

  // Checks a parsed frame against this compressor's config and a buffer of n elements, then
  // its indices, group metadata and (when forbidden) non-finite values.
  status check_frame(const frame::header& h, const std::byte* f, std::size_t n) const {
    if (auto s = check_frame_header(cfg_, codec_id(), h, n); !s) return s;
    if constexpr (listed) {
      if (auto s = indices::check(h.indices, f + h.index_offset(), h.index_bytes, h.kept_count, h.dense_count); !s) return s;
    } else if constexpr (kind == selection::random) {
      if (load_le<std::uint32_t>(f + h.index_offset()) != cfg_.seed || load_le<std::uint32_t>(f + h.index_offset() + 4) != 0)
        return {errc::codec_mismatch, "random-k frame made with another seed"};
    }
    const auto& qc = cfg_.quantize;
    for (std::size_t q = 0, groups = group_count(qc, h.kept_count); q < groups; ++q)
      if (auto s = Quantizer::check_meta(qc, group_meta(h, f, q)); !s) return s;
    if (!cfg_.allow_non_finite) {
      const std::byte* values = f + h.value_offset();
      const std::size_t gs = Quantizer::group_size(qc);
      for (std::size_t m = 0; m < h.kept_count; ++m) {
        const meta_type mt = gs ? group_meta(h, f, m / gs) : meta_type{};
        if (!is_finite_bits(float_bits(Quantizer::decode(qc, mt, load_code<code_type, code_bits>(values, m)))))
          return {errc::non_finite_value, "frame carries NaN or inf"};
      }
    }
    return {};
  }

  // Ungrouped codes of at most this many bits decode through a table of every code's value
  // (wider codes, natural's 9 bits, measured slower that way: the lookups do not vectorise).
  static constexpr unsigned max_table_bits = 8;
  // Values per prefetch of a dense accumulate (see apply_frame).
  static constexpr std::size_t prefetch_piece = 128;

  // Decodes frame f into out, a batch of whole groups (or ungrouped_block values) at a time,
  // as encode_values() wrote them: codes read in place (bytes) or unpacked into a local buffer
  // (0.91-0.94x the int8 and fp8 decompress time in place), then decoded; a dense decompress
  // with `streaming_output` goes out with non-temporal stores. Ungrouped codes of up to
  // max_table_bits bits are looked up in a table that Quantizer::decode fills (the same bits,
  // one load per value instead of the conversion arithmetic: unscaled fp8).
  template <class T>
  void apply_frame(const frame::header& h, const std::byte* f, T* out, bool add, bool streaming_output) const {
    // is_dense again here, as a constant: sparse instantiations then have no streaming copy
    // (GCC under nvcc warned that its buffer may be uninitialised)
    const bool streaming = Sparsifier::is_dense && !add && streaming_output;
    if constexpr (Sparsifier::is_dense && std::is_same_v<T, float> && has_avx2_accumulator<Quantizer>)
      if (add && cpu::avx2_active()) return accumulate_in_one_pass(h, f, out + h.element_offset);
    T* region = out + h.element_offset;
#if GRADCOMP_CPU_DISPATCH
    if constexpr (Sparsifier::is_dense && std::is_same_v<T, float> &&
                  (has_streaming_avx2_decoder<Quantizer> || !has_avx2_decoder<Quantizer>))
      if (streaming && reinterpret_cast<std::uintptr_t>(region) % 16 == 0 &&
          Quantizer::group_size(cfg_.quantize) % 4 == 0 && cpu::avx2_active())
        return decompress_streaming(h, f, region);
#endif
    if (!Sparsifier::is_dense && !add)
      for (std::size_t j = 0; j < h.dense_count; ++j) region[j] = from_float<T>(0.0f);
    cpu::run_best([&]() GRADCOMP_LOOP_BODY {
      const auto qc = cfg_.quantize;  // locals: output stores cannot alias them
      const std::size_t gs = Quantizer::group_size(qc), block = gs ? gs : ungrouped_block;
      const std::size_t batch = block * batch_groups(gs);
      const std::byte* values = f + h.value_offset();
      // Byte codes are read where they lie in the frame; wider or packed ones are unpacked
      // into a local buffer first.
      constexpr bool in_place = code_bits == 8 && sizeof(code_type) == 1;
      alignas(64) code_type unpacked[in_place ? 1 : max_group_size + 8];
      const code_type* codes = unpacked;
      alignas(64) T decoded[max_group_size];
      alignas(64) std::uint32_t where[Sparsifier::is_dense ? 1 : max_group_size];
      constexpr bool tabled = code_bits <= max_table_bits;
      constexpr std::uint32_t table_size = tabled ? 1u << code_bits : 1u;
      alignas(64) float table[table_size];
      // A block decoder's floats: decoded itself when T is float.
      constexpr bool decoded_floats = std::is_same_v<T, float>;
      alignas(64) float block_buffer[has_avx2_decoder<Quantizer> && !decoded_floats ? max_group_size : 1];
      float* const block_values = decoded_floats ? reinterpret_cast<float*>(decoded) : block_buffer;
      auto sparse_indices = indices_of(h, f);
      // value_of(meta, i): the decoded value of codes[i]; one loop nest per way of computing
      // it. prepare(meta, i0, i1) runs first for each group's codes[i0, i1); it returns
      // std::true_type when it has written their values to decoded[i0, i1) already.
      const auto decode_all = [&](auto value_of, auto prepare) GRADCOMP_LOOP_BODY {
        for (std::size_t b0 = 0; b0 < h.kept_count; b0 += batch) {
          const std::size_t nb = std::min<std::size_t>(batch, h.kept_count - b0);
          if constexpr (!Sparsifier::is_dense) sparse_indices.next(b0, nb, where);
          for (std::size_t i0 = 0; i0 < nb; i0 += block) {
            const std::size_t i1 = std::min(nb, i0 + block);
            if constexpr (in_place) {
              codes = reinterpret_cast<const code_type*>(values) + b0;
            } else {
              unpack_codes<code_type, code_bits>(values, b0 + i0, i1 - i0, unpacked + i0);
            }
            const meta_type mt = gs ? group_meta(h, f, (b0 + i0) / gs) : meta_type{};
            [[maybe_unused]] constexpr bool prepared = decltype(prepare(mt, i0, i1))::value;
            prepare(mt, i0, i1);
            if constexpr (Sparsifier::is_dense) {
              T* to = region + b0;
              const auto prefetch_later = [&](std::size_t p0, std::size_t p1) {  // what [p0, p1) will need later
                if (const std::size_t later = b0 + p0 + cpu::prefetch_values_ahead; later + (p1 - p0) <= h.kept_count) {
                  cpu::prefetch(values + later * code_bits / 8, (p1 - p0) * code_bits / 8);
                  if (add) cpu::prefetch(region + later, p1 - p0);
                }
              };
              if (add) {
                // A piece at a time, each asking for its inputs: the prefetches of a whole
                // 1024-value block of ungrouped codes at once (the sum's 64 lines) filled the
                // miss buffers, and accumulate took 1.2-1.4x the time (fp8, fp16, bf16).
                for (std::size_t p0 = i0; p0 < i1; p0 += prefetch_piece) {
                  const std::size_t p1 = std::min(i1, p0 + prefetch_piece);
                  prefetch_later(p0, p1);
                  for (std::size_t i = p0; i < p1; ++i)
                    to[i] = from_float<T>(canonical_nan(to_float(to[i]) + value_of(mt, i)));
                }
              } else if (prefetch_later(i0, i1); streaming) {  // stored below, a batch at a time
                if constexpr (!prepared)
                  for (std::size_t i = i0; i < i1; ++i) decoded[i] = from_float<T>(value_of(mt, i));
              } else {
                for (std::size_t i = i0; i < i1; ++i) to[i] = from_float<T>(value_of(mt, i));
              }
            } else {
              constexpr std::size_t ahead = 16;  // scattered outputs: keep several misses in flight
              for (std::size_t i = i0; i < std::min(i0 + ahead, i1); ++i) GRADCOMP_PREFETCH(region + where[i]);
              for (std::size_t i = i0; i < i1; ++i) {
                if (i + ahead < i1) GRADCOMP_PREFETCH(region + where[i + ahead]);
                T& to = region[where[i]];
                const float v = value_of(mt, i);
                to = from_float<T>(add ? canonical_nan(to_float(to) + v) : v);
              }
            }
          }
          // One streaming copy per batch: a copy per group of 128 measured 1.08-1.17x the
          // decompress time (int8, int4, sign).
          if (streaming)
            cpu::detail::copy_tile(reinterpret_cast<std::byte*>(region + b0), reinterpret_cast<const std::byte*>(decoded),
                                   nb * sizeof(T), true);
        }
      };
      const auto nothing = [](const meta_type&, std::size_t, std::size_t) { return std::false_type{}; };
      if (has_avx2_decoder<Quantizer> && cpu::avx2_active()) {
        if constexpr (has_avx2_decoder<Quantizer>)
          decode_all([&](const meta_type&, std::size_t i) { return block_values[i]; },
                     [&](const meta_type& mt, std::size_t i0, std::size_t i1) {
                       Quantizer::decode_avx2(qc, mt, codes + i0, i1 - i0, block_values + i0);
                       return std::bool_constant<decoded_floats>{};
                     });
      } else if (tabled && gs == 0) {
        for (std::uint32_t c = 0; c < table_size; ++c)
          table[c] = Quantizer::decode(qc, meta_type{}, static_cast<code_type>(c));
        decode_all([&](const meta_type&, std::size_t i) { return table[codes[i] & (table_size - 1u)]; }, nothing);
      } else {
        decode_all([&](const meta_type& mt, std::size_t i) { return Quantizer::decode(qc, mt, codes[i]); }, nothing);
      }
    });
    if (streaming) cpu::detail::streaming_fence();
  }

#if GRADCOMP_CPU_DISPATCH
  // The dense fp32 decoders below walk frame f a group (or ungrouped_block values) at a time:
  // body(i0, n, codes, meta) gets codes i0 .. i0 + n - 1, read where they lie (byte codes) or
  // unpacked into a local buffer, and their group's meta.
  template <class Body>
  __attribute__((always_inline, target(GRADCOMP_AVX2_ISA))) void for_each_block(const frame::header& h,
                                                                               const std::byte* f, Body&& body) const {
    const std::size_t gs = Quantizer::group_size(cfg_.quantize), block = gs ? gs : ungrouped_block;
    const std::byte* values = f + h.value_offset();
    constexpr bool in_place = code_bits == 8 && sizeof(code_type) == 1;
    alignas(64) code_type unpacked[in_place ? 1 : max_group_size + 8];
    for (std::size_t i0 = 0; i0 < h.kept_count; i0 += block) {
      const std::size_t n = std::min<std::size_t>(block, h.kept_count - i0);
      const code_type* codes = unpacked;
      if constexpr (in_place) {
        codes = reinterpret_cast<const code_type*>(values) + i0;
      } else {
        unpack_codes<code_type, code_bits>(values, i0, n, unpacked);
      }
      body(i0, n, codes, gs ? group_meta(h, f, i0 / gs) : meta_type{});
    }
  }

  // apply_frame's dense accumulate into fp32 for quantizers with an accumulate_avx2 hook: codes
  // decoded and added in one pass, prefetch_piece values at a time (piecewise<4> accumulate:
  // 0.78x the time of decoding into a buffer first). Its own function: as a fourth loop nest
  // in apply_frame's body it gained less (0.91-0.94x) and made GCC compile piecewise
  // decompress 1.04-1.13x slower.
  GRADCOMP_VECTORIZE GRADCOMP_TARGET_AVX2 void accumulate_in_one_pass(const frame::header& h, const std::byte* f,
                                                                      float* region) const
    requires has_avx2_accumulator<Quantizer>
  {
    const auto qc = cfg_.quantize;
    const std::byte* values = f + h.value_offset();
    for_each_block(h, f, [&](std::size_t i0, std::size_t n, const code_type* codes, const meta_type& mt)
                             __attribute__((always_inline, target(GRADCOMP_AVX2_ISA))) {
      for (std::size_t p0 = 0; p0 < n; p0 += prefetch_piece) {
        const std::size_t p1 = std::min(n, p0 + prefetch_piece);
        if (const std::size_t later = i0 + p0 + cpu::prefetch_values_ahead; later + (p1 - p0) <= h.kept_count) {
          cpu::prefetch(values + later * code_bits / 8, (p1 - p0) * code_bits / 8);
          cpu::prefetch(region + later, p1 - p0);
        }
        Quantizer::accumulate_avx2(qc, mt, codes + p0, p1 - p0, region + i0 + p0);
      }
    });
  }

  // apply_frame's dense decompress into a large fp32 buffer, 16-byte aligned, groups a
  // multiple of 4: the values go out eight at a time in non-temporal stores, straight from
  // the registers that decoded them. Through a batch buffer copied out, each value was also
  // written and read in L1: int8 decompress took 1.3x the time, int4 and sign 1.8x.
  GRADCOMP_VECTORIZE GRADCOMP_TARGET_AVX2 void decompress_streaming(const frame::header& h, const std::byte* f,
                                                                    float* region) const {
    const auto qc = cfg_.quantize;  // a local: output stores cannot alias it
    const std::byte* values = f + h.value_offset();
    if constexpr (has_packed_avx2_decoder<Quantizer>) {
      const std::size_t gs = Quantizer::group_size(qc), block = gs ? gs : ungrouped_block;
      if (block * code_bits % 8 == 0) {  // every block starts on a byte: decoded from the packed codes
        const std::size_t available = packed_bytes(h.kept_count, code_bits);
        for (std::size_t i0 = 0; i0 < h.kept_count; i0 += block) {
          const std::size_t n = std::min<std::size_t>(block, h.kept_count - i0), at = i0 * code_bits / 8;
          if (const std::size_t later = i0 + cpu::prefetch_values_ahead; later + n <= h.kept_count)
            cpu::prefetch(values + later * code_bits / 8, n * code_bits / 8);
          const meta_type mt = gs ? group_meta(h, f, i0 / gs) : meta_type{};
          std::size_t i = Quantizer::template decode_packed_avx2<true>(qc, mt, values + at, n, available - at, region + i0);
          for (; i < n; ++i)  // the frame's last few codes, which a vector read would overrun
            region[i0 + i] = Quantizer::decode(qc, mt, load_code<code_type, code_bits>(values, i0 + i));
        }
        _mm_sfence();
        return;
      }
    }
    for_each_block(h, f, [&](std::size_t i0, std::size_t n, const code_type* codes, const meta_type& mt)
                             __attribute__((always_inline, target(GRADCOMP_AVX2_ISA))) {
      if (const std::size_t later = i0 + cpu::prefetch_values_ahead; later + n <= h.kept_count)
        cpu::prefetch(values + later * code_bits / 8, n * code_bits / 8);
      float* to = region + i0;
      if constexpr (has_avx2_decoder<Quantizer>) {
        Quantizer::template decode_avx2<true>(qc, mt, codes, n, to);
      } else {
        std::size_t i = 0;
        for (; i + 32 <= n; i += 32) {  // 32 at a time: qsgd and terngrad 2x faster than 8
          alignas(32) float v[32];
          for (std::size_t k = 0; k < 32; ++k) v[k] = Quantizer::decode(qc, mt, codes[i + k]);
          for (std::size_t k = 0; k < 32; k += 8) detail::store8_avx2<true>(to + i + k, _mm256_load_ps(v + k));
        }
        for (; i + 8 <= n; i += 8) {
          alignas(32) float v[8];
          for (std::size_t k = 0; k < 8; ++k) v[k] = Quantizer::decode(qc, mt, codes[i + k]);
          detail::store8_avx2<true>(to + i, _mm256_load_ps(v));
        }
        for (; i < n; ++i) to[i] = Quantizer::decode(qc, mt, codes[i]);
      }
    });
    _mm_sfence();
  }
#endif

  template <class T>
  status decode(std::span<const std::byte> payload, std::span<T> out, bool add) const {
    if (auto s = validate(); !s) return s;
    if (payload.empty()) return {errc::truncated, "empty payload"};
    std::size_t dense = 0;  // elements the frames cover
    for (std::size_t at = 0; at < payload.size();) {  // validate everything first
      const auto h = frame::parse(payload.subspan(at));
      if (!h) return h.error();
      if (auto s = check_frame(*h, payload.data() + at, out.size()); !s) return s;
      dense += h->dense_count;
      at += h->frame_bytes();
    }
    // By default a dense decompress stores non-temporally when all it writes would not stay
    // in cache, even if each frame's part would (4 MiB chunks: int8 decompress 0.69x the time).
    const bool streaming_output = cpu::streaming_stores(cfg_.stores, dense * sizeof(T));
    for (std::size_t at = 0; at < payload.size();) {
      const auto h = frame::parse(payload.subspan(at), false);
      apply_frame(*h, payload.data() + at, out.data(), add, streaming_output);
      at += h->frame_bytes();
    }
    return {};
  }

  config cfg_{};
};

}  // namespace gradcomp
