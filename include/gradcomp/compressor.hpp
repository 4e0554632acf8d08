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

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "core/bits.hpp"
#include "core/byteio.hpp"
#include "core/concepts.hpp"
#include "core/frame.hpp"
#include "core/numeric.hpp"
#include "core/status.hpp"
#include "cpu/dispatch.hpp"
#include "cpu/stream.hpp"
#include "cpu/topk_select.hpp"
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
                "gradcomp::compressor: the sparsifier needs `id`, `is_dense` and `kept(config, n)`");
  static_assert(has_policy_kind<Quantizer, quantizer_tag>,
                "gradcomp::compressor: the 3rd argument is not a quantizer: it lacks "
                "`using policy_kind = gradcomp::quantizer_tag;`");
  static_assert(has_validate<Quantizer>,
                "gradcomp::compressor: the quantizer needs `struct config` and `static status validate(const config&)`");
  static_assert(quantizer_codes<Quantizer>,
                "gradcomp::compressor: the quantizer needs an unsigned `code_type` and `bits`");
  static_assert(quantizer_encode<Quantizer>,
                "gradcomp::compressor: the quantizer needs `static code_type encode(const config&, float)`");
  static_assert(quantizer_decode<Quantizer>,
                "gradcomp::compressor: the quantizer needs `static float decode(const config&, code_type)`");
  static_assert(quantizer_traits<Quantizer>,
                "gradcomp::compressor: the quantizer needs `id`, `unbiased`, `summable` and `format_param(config)`");
  static_assert(has_policy_kind<Feedback, feedback_tag>,
                "gradcomp::compressor: the 4th argument is not a feedback policy: it lacks "
                "`using policy_kind = gradcomp::feedback_tag;`");
  static_assert(has_validate<Feedback>,
                "gradcomp::compressor: the feedback needs `struct config` and `static status validate(const config&)`");
  static_assert(feedback_members<Feedback>,
                "gradcomp::compressor: the feedback needs `has_state`, `combine(config, g, e)` and "
                "`remainder(config, x, sent)`");
  static_assert(Quantizer::bits == 8 * sizeof(typename Quantizer::code_type),
                "gradcomp::compressor: this version stores byte-sized codes only");

  using code_type = typename Quantizer::code_type;

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
  };

  compressor() = default;
  explicit compressor(const config& c) : cfg_(c) {}

  const config& get_config() const { return cfg_; }
  void set_config(const config& c) { cfg_ = c; }

  status validate() const {
    if (auto s = Partitioner::validate(cfg_.partition); !s) return s;
    if (auto s = Sparsifier::validate(cfg_.sparsify); !s) return s;
    if (auto s = Quantizer::validate(cfg_.quantize); !s) return s;
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
    return frame_layout(Sparsifier::kept(cfg_.sparsify, chunk_elements), chunk_elements).frame_bytes();
  }
  template <gradient_element T>
  std::size_t max_payload_bytes(std::size_t n) const {
    std::size_t total = 0;
    for (std::size_t i = 0, c = chunk_count<T>(n); i < c; ++i) total += max_frame_bytes(chunk<T>(n, i).count);
    return total;
  }

  // A state for gradients of n elements: residual (if the feedback keeps one) and workspace.
  state make_state(std::size_t n) const {
    state s;
    s.size = n;
    if constexpr (Feedback::has_state) s.residual.assign(n, 0.0f);
    if constexpr (!Sparsifier::is_dense) s.workspace.resize(cpu::topk_selector::workspace_bytes(n));
    return s;
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
    const bool streaming = max_bytes >= cpu::streaming_store_bytes;
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
    return write_frame<T>(i, grad, st, frame, max_frame_bytes(r.count) >= cpu::streaming_store_bytes);
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
    if (h.indices != (dense ? frame::index_format::none : frame::index_format::u32_list))
      return {errc::codec_mismatch, "frame index format differs from the sparsifier's"};
    const std::size_t element_bytes = h.source_dtype == dtype::f32 ? 4 : 2;
    if (h.chunk_id >= Partitioner::chunk_count(c.partition, n, element_bytes))
      return {errc::size_mismatch, "frame chunk id beyond the receiver's plan"};
    const chunk_range r = Partitioner::chunk_at(c.partition, n, element_bytes, h.chunk_id);
    if (r.offset != h.element_offset || r.count != h.dense_count)
      return {errc::size_mismatch, "frame chunk differs from the receiver's plan"};
    if (dense && h.kept_count != h.dense_count) return {errc::bad_header, "dense frame keeps fewer than all elements"};
    // kept <= dense <= n here, so the sizes below cannot overflow.
    const frame::header expect = frame_layout(h.kept_count, h.dense_count);
    if (h.meta_bytes != expect.meta_bytes || h.index_bytes != expect.index_bytes || h.value_bytes != expect.value_bytes)
      return {errc::bad_header, "section sizes do not match the kept count"};
    return {};
  }

  // The m-th sparse index j of a chunk of `count` elements, `previous` being index m - 1.
  GRADCOMP_HD static status check_index(std::uint32_t j, std::uint32_t previous, std::size_t m, std::uint64_t count) {
    if (j >= count) return {errc::index_out_of_range, "sparse index >= chunk element count"};
    if (m > 0 && j <= previous) return {errc::index_not_ascending, "sparse indices not strictly ascending"};
    return {};
  }

  // Section sizes (no codec id) of a frame keeping `kept` of `count` elements.
  GRADCOMP_HD static frame::header frame_layout(std::size_t kept, std::size_t count) {
    frame::header h;
    h.dense_count = count;
    h.kept_count = Sparsifier::is_dense ? count : kept;
    h.indices = Sparsifier::is_dense ? frame::index_format::none : frame::index_format::u32_list;
    h.index_bytes = Sparsifier::is_dense ? 0 : 4 * h.kept_count;
    h.value_bytes = packed_bytes(h.kept_count, Quantizer::bits);
    return h;
  }

  // Header (codec id and section sizes) of a frame keeping `kept` of `count` elements.
  frame::header layout(std::size_t kept, std::size_t count) const {
    frame::header h = frame_layout(kept, count);
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
    std::byte* out = frame.data();
    frame::write_header(h, out);
    frame::zero_padding(h, out);
    if constexpr (Sparsifier::is_dense) {  // the body is the values: checksummed as they are written
      std::uint32_t body_crc = encode_dense(g, e, r.count, out + h.value_offset(), streaming);
      const std::size_t end = h.value_offset() + h.value_bytes;
      body_crc = crc32c(std::span<const std::byte>(out + end, align8(end) - end), body_crc);
      frame::seal(frame.first(h.frame_bytes()), body_crc);
    } else {
      encode_topk(g, e, r.count, h.kept_count, st.workspace, out + h.index_offset(), out + h.value_offset());
      frame::seal(frame.first(h.frame_bytes()));
    }
    return h.frame_bytes();
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
    if (!Sparsifier::is_dense && st.workspace.size() < cpu::topk_selector::workspace_bytes(st.size))
      return {errc::size_mismatch, "state workspace too small: use make_state()"};
    if (chunk_count<T>(grad.size()) > 0xffffffffu) return {errc::invalid_argument, "more than 2^32 chunks"};
    return {};
  }

  static void store_code(std::byte* values, std::size_t j, code_type c) {
    store_le<code_type>(values + j * sizeof(code_type), c);
  }
  static code_type load_code(const std::byte* values, std::size_t j) {
    return load_le<code_type>(values + j * sizeof(code_type));
  }

  // Returns the CRC32C of the value bytes written.
  template <class T>
  std::uint32_t encode_dense(const T* g, float* e, std::size_t count, std::byte* values, bool streaming) const {
    const auto& qc = cfg_.quantize;
    const auto& fc = cfg_.feedback;
    if constexpr (Feedback::has_state) {
      return cpu::write_codes<code_type>(
          count,
          [&](std::size_t j) {
            const float x = Feedback::combine(fc, to_float(g[j]), e[j]);
            const code_type c = Quantizer::encode(qc, x);
            e[j] = Feedback::remainder(fc, x, Quantizer::decode(qc, c));
            return c;
          },
          values, 0, streaming);
    } else {
      return cpu::write_codes<code_type>(count, [&](std::size_t j) { return Quantizer::encode(qc, to_float(g[j])); },
                                         values, 0, streaming);
    }
  }

  template <class T>
  void encode_topk(const T* g, float* e, std::size_t count, std::size_t k, std::span<std::byte> workspace,
                   std::byte* indices, std::byte* values) const {
    const auto& qc = cfg_.quantize;
    const auto& fc = cfg_.feedback;
    cpu::topk_selector select(workspace, count, k);
    if constexpr (Feedback::has_state) {  // x = g + e is computed and stored during the scan
      select.select([&](std::size_t j) { return abs_key(Feedback::combine(fc, to_float(g[j]), e[j])); },
                    [&](std::size_t j) {
                      e[j] = Feedback::combine(fc, to_float(g[j]), e[j]);
                      return abs_key(e[j]);
                    },
                    [&](std::size_t j) { return abs_key(e[j]); }, indices);
    } else {
      const auto key = [&](std::size_t j) { return abs_key(to_float(g[j])); };
      select.select(key, key, key, indices);
    }
    constexpr std::size_t ahead = 32;  // kept elements are scattered: keep many loads in flight
    for (std::size_t m = 0; m < k; ++m) {
      if (m + ahead < k) {
        const std::uint32_t next = load_le<std::uint32_t>(indices + 4 * (m + ahead));
        if constexpr (Feedback::has_state) {
          GRADCOMP_PREFETCH(e + next);
        } else {
          GRADCOMP_PREFETCH(g + next);
        }
      }
      const std::uint32_t j = load_le<std::uint32_t>(indices + 4 * m);
      const float x = Feedback::has_state ? e[j] : to_float(g[j]);
      const code_type c = Quantizer::encode(qc, x);
      store_code(values, m, c);
      if constexpr (Feedback::has_state) e[j] = Feedback::remainder(fc, x, Quantizer::decode(qc, c));
    }
  }

  // Checks a parsed frame against this compressor's config and a buffer of n elements, then
  // its indices and (when forbidden) non-finite values.
  status check_frame(const frame::header& h, const std::byte* f, std::size_t n) const {
    if (auto s = check_frame_header(cfg_, codec_id(), h, n); !s) return s;
    if constexpr (!Sparsifier::is_dense) {
      const std::byte* idx = f + h.index_offset();
      std::uint32_t previous = 0;
      for (std::size_t m = 0; m < h.kept_count; ++m) {
        const std::uint32_t j = load_le<std::uint32_t>(idx + 4 * m);
        if (auto s = check_index(j, previous, m, h.dense_count); !s) return s;
        previous = j;
      }
    }
    if (!cfg_.allow_non_finite) {
      const std::byte* values = f + h.value_offset();
      for (std::size_t m = 0; m < h.kept_count; ++m)
        if (!is_finite_bits(float_bits(Quantizer::decode(cfg_.quantize, load_code(values, m)))))
          return {errc::non_finite_value, "frame carries NaN or inf"};
    }
    return {};
  }

  template <class T>
  void apply_frame(const frame::header& h, const std::byte* f, T* out, bool add) const {
    const auto& qc = cfg_.quantize;
    T* region = out + h.element_offset;
    const std::byte* values = f + h.value_offset();
    if constexpr (Sparsifier::is_dense) {
      cpu::run_best([&]() GRADCOMP_LOOP_BODY {
        if (add) {
          for (std::size_t j = 0; j < h.dense_count; ++j)
            region[j] = from_float<T>(canonical_nan(to_float(region[j]) + Quantizer::decode(qc, load_code(values, j))));
        } else {
          for (std::size_t j = 0; j < h.dense_count; ++j) region[j] = from_float<T>(Quantizer::decode(qc, load_code(values, j)));
        }
      });
    } else {
      const std::byte* idx = f + h.index_offset();
      if (!add)
        for (std::size_t j = 0; j < h.dense_count; ++j) region[j] = from_float<T>(0.0f);
      for (std::size_t m = 0; m < h.kept_count; ++m) {
        const std::uint32_t j = load_le<std::uint32_t>(idx + 4 * m);
        const float v = Quantizer::decode(qc, load_code(values, m));
        region[j] = from_float<T>(add ? canonical_nan(to_float(region[j]) + v) : v);
      }
    }
  }

  template <class T>
  status decode(std::span<const std::byte> payload, std::span<T> out, bool add) const {
    if (auto s = validate(); !s) return s;
    if (payload.empty()) return {errc::truncated, "empty payload"};
    for (std::size_t at = 0; at < payload.size();) {  // validate everything first
      const auto h = frame::parse(payload.subspan(at));
      if (!h) return h.error();
      if (auto s = check_frame(*h, payload.data() + at, out.size()); !s) return s;
      at += h->frame_bytes();
    }
    for (std::size_t at = 0; at < payload.size();) {
      const auto h = frame::parse(payload.subspan(at), false);
      apply_frame(*h, payload.data() + at, out.data(), add);
      at += h->frame_bytes();
    }
    return {};
  }

  config cfg_{};
};

}  // namespace gradcomp
