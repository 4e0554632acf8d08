#pragma once
// composition<Partitioner, Sparsifier, Quantizer, Feedback, Transform>: what the policies mean
// together, independent of any backend. It holds the run-time config and answers every question
// both backends must answer alike: the codec id, the chunk plan, frame sizes and section layout,
// and the checks of a received frame's header. compressor<> (CPU) derives from it; the CUDA
// backend takes the same object. The policies are checked one member at a time, so a mistake
// reads as a sentence rather than a template dump.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../core/byteio.hpp"
#include "../core/concepts.hpp"
#include "../core/frame.hpp"
#include "../core/ids.hpp"
#include "../core/index_codec.hpp"
#include "../core/numeric.hpp"
#include "../core/status.hpp"
#include "../core/stores.hpp"
#include "../transform/identity.hpp"

namespace gradcomp::engine::detail {

template <class Partitioner, class Sparsifier, class Quantizer, class Feedback, class Transform = transform::identity>
class composition {
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
  static_assert(quantizer_codes<Quantizer>, "gradcomp::compressor: the quantizer needs an unsigned `code_type` and `bits`");
  static_assert(quantizer_groups<Quantizer>,
                "gradcomp::compressor: the quantizer needs `meta`, `meta_bytes`, `group_size(config)`, "
                "`fit(config, values, n)`, `store_meta`, `load_meta` and `check_meta(config, meta)` "
                "(derive from gradcomp::ungrouped_quantizer for a plain cast, from "
                "gradcomp::quantize::grouped_quantizer<config> for one with groups)");
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
  static_assert(has_policy_kind<Transform, transform_tag>,
                "gradcomp::compressor: the 5th argument is not a transform: it lacks "
                "`using policy_kind = gradcomp::transform_tag;`");
  static_assert(transform_policy<Transform>,
                "gradcomp::compressor: the transform needs `struct config`, `validate`, `is_identity`, `word`, `seed`, "
                "`block`, `forward_block` and `inverse_block` (gradcomp/transform/identity.hpp)");
  // Only reported once the policy is otherwise complete, so one mistake gives one message.
  static_assert(!sparsifier_policy<Sparsifier> || ids::id_allowed<Sparsifier>,
                "gradcomp::compressor: the sparsifier's `id` lies in the library's range [1, 127]: a sparsifier "
                "defined outside gradcomp takes an id in [ids::first_user, 255] = [128, 255] (gradcomp/core/ids.hpp)");
  static_assert(!quantizer_policy<Quantizer> || ids::id_allowed<Quantizer>,
                "gradcomp::compressor: the quantizer's `id` lies in the library's range [1, 127]: a quantizer "
                "defined outside gradcomp takes an id in [ids::first_user, 255] = [128, 255] (gradcomp/core/ids.hpp)");
  static_assert(Quantizer::bits >= 1 && Quantizer::bits <= 8 * sizeof(typename Quantizer::code_type),
                "gradcomp::compressor: the quantizer's code_type must hold `bits` bits");
  static_assert((Sparsifier::kind == selection::dense) == Sparsifier::is_dense,
                "gradcomp::compressor: a sparsifier is dense exactly when its kind is selection::dense");

 public:
  using partitioner = Partitioner;
  using sparsifier = Sparsifier;
  using quantizer = Quantizer;
  using feedback = Feedback;
  using transform = Transform;
  using code_type = typename Quantizer::code_type;
  using meta_type = typename Quantizer::meta;
  static constexpr unsigned code_bits = Quantizer::bits;
  static constexpr selection kind = Sparsifier::kind;
  static constexpr bool dense = Sparsifier::is_dense;
  // Sparse frames other than random-k carry an index list (u32, delta or bitmap).
  static constexpr bool listed = !dense && kind != selection::random;
  static constexpr bool has_momentum = momentum_feedback<Feedback>;
  // A transform other than the identity: chunks are transformed before selection and
  // quantization (feedback then lives in the transformed domain) and inverted after decoding.
  static constexpr bool transformed = !Transform::is_identity;

  struct config {
    typename Partitioner::config partition{};
    typename Sparsifier::config sparsify{};
    typename Quantizer::config quantize{};
    typename Feedback::config feedback{};
    typename Transform::config transform{};
    // false: compress rejects NaN/inf gradients and decoding rejects frames carrying them.
    // true (default): they travel like any value, so mixed-precision loss scaling sees them.
    bool allow_non_finite = true;
    // Key of the counter-based randomness (stochastic rounding, sampling, random-k): the same
    // seed on every rank and both backends gives the same bits.
    std::uint32_t seed = 0;
    // Sparse frames send their indices in the smallest of u32 list, delta-coded gaps and
    // bitmap (docs/wire-format.md); false: always u32 lists (as the CUDA backend writes).
    bool compact_indices = true;
    // Non-temporal stores for the CPU backend's outputs (core/stores.hpp): by the size of each
    // call's output, or always, or never. Only speed depends on it.
    gradcomp::stores stores = gradcomp::stores::automatic;
  };

  composition() = default;
  explicit composition(const config& c) : cfg_(c) {}

  const config& get_config() const { return cfg_; }
  void set_config(const config& c) { cfg_ = c; }

  status validate() const {
    if (auto s = Partitioner::validate(cfg_.partition); !s) return s;
    if (auto s = Sparsifier::validate(cfg_.sparsify); !s) return s;
    if (auto s = Quantizer::validate(cfg_.quantize); !s) return s;
    if (Quantizer::group_size(cfg_.quantize) > max_group_size)
      return {errc::invalid_argument, "quantizer groups hold at most max_group_size (4096) values"};
    if (auto s = Feedback::validate(cfg_.feedback); !s) return s;
    return Transform::validate(cfg_.transform);
  }

  // Identifies the frame format: sparsifier, quantizer and the quantizer's format parameters.
  std::uint32_t codec_id() const {
    return (std::uint32_t{Sparsifier::id} << 24) | (std::uint32_t{Quantizer::id} << 16) |
           Quantizer::format_param(cfg_.quantize);
  }

  // --- The chunk plan and sizes (host).
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
  // The largest chunk of a buffer of n elements, for either element size.
  std::size_t largest_chunk(std::size_t n) const {
    std::size_t most = 0;
    for (std::size_t i = 0, c = chunk_count<float>(n); i < c; ++i) most = std::max(most, chunk<float>(n, i).count);
    for (std::size_t i = 0, c = chunk_count<bf16_t>(n); i < c; ++i) most = std::max(most, chunk<bf16_t>(n, i).count);
    return most;
  }
  // Chunks of either element size's plan (per-chunk state, e.g. thresholds, is kept for both).
  std::size_t chunk_slots(std::size_t n) const { return std::max(chunk_count<float>(n), chunk_count<bf16_t>(n)); }

  // Header (codec id and section sizes) of a frame keeping `kept` of `count` elements.
  frame::header layout(std::size_t kept, std::size_t count) const {
    frame::header h = frame_layout(cfg_, kept, count);
    h.codec_id = codec_id();
    return h;
  }

  // --- Frame rules, host and device.

  // Random-k frames: the seed (u32) and a zero u32, so that a receiver with another seed
  // refuses the frame instead of scattering its values to the wrong places.
  static constexpr std::size_t seeded_index_bytes = 8;

  // Groups of sent values in a frame sending `kept` values (0 for ungrouped quantizers).
  GRADCOMP_HD static std::size_t group_count(const typename Quantizer::config& qc, std::size_t kept) {
    const std::size_t g = Quantizer::group_size(qc);
    return g == 0 ? 0 : (kept + g - 1) / g;
  }

  // Section sizes and transform fields (no codec id) of a frame keeping `kept` of `count`
  // elements, its indices as a u32 list (the largest index encoding).
  GRADCOMP_HD static frame::header frame_layout(const config& c, std::size_t kept, std::size_t count) {
    frame::header h;
    h.dense_count = count;
    h.kept_count = dense ? count : kept;
    h.indices = dense                       ? frame::index_format::none
                : kind == selection::random ? frame::index_format::seeded
                                            : frame::index_format::u32_list;
    h.index_bytes = dense ? 0 : kind == selection::random ? seeded_index_bytes : 4 * h.kept_count;
    h.meta_bytes = group_count(c.quantize, h.kept_count) * Quantizer::meta_bytes;
    h.value_bytes = packed_bytes(h.kept_count, code_bits);
    h.transform = Transform::word(c.transform);
    h.transform_seed = Transform::seed(c.transform);
    return h;
  }

  // Index formats a frame of this sparsifier may carry.
  GRADCOMP_HD static bool index_format_allowed(frame::index_format f) {
    if constexpr (dense) return f == frame::index_format::none;
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

  // Header fields against the receiver: codec and transform, chunk plan for a buffer of n
  // elements, and section sizes implied by the kept count. Assumes frame::parse_header() succeeded.
  GRADCOMP_HD static status check_frame_header(const config& c, std::uint32_t codec, const frame::header& h,
                                               std::size_t n) {
    if (h.codec_id != codec) return {errc::codec_mismatch, "frame codec id differs from the compressor's"};
    if (h.transform != Transform::word(c.transform) || h.transform_seed != Transform::seed(c.transform))
      return {errc::codec_mismatch, "frame transform differs from the compressor's"};
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

  // Meta of group q of the frame at f (validated before use).
  GRADCOMP_HD static meta_type group_meta(const frame::header& h, const std::byte* f, std::size_t q) {
    return Quantizer::load_meta(f + h.meta_offset() + q * Quantizer::meta_bytes);
  }

 protected:
  config cfg_{};
};

}  // namespace gradcomp::engine::detail
