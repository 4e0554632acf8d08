#pragma once
// The CPU executor of engine/flow.hpp: a chunk at a time (select, encode, seal back to back,
// while the chunk is in cache), on the calling thread, in the caller's gradcomp::state.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "../core/bits.hpp"
#include "../core/byteio.hpp"
#include "../core/frame.hpp"
#include "../core/index_codec.hpp"
#include "../core/permutation.hpp"
#include "../engine/feedback.hpp"
#include "../engine/flow.hpp"
#include "../engine/frame_checks.hpp"
#include "../state.hpp"
#include "decode.hpp"
#include "encode.hpp"
#include "randomk_select.hpp"
#include "row_topk.hpp"
#include "selector.hpp"
#include "stores.hpp"
#include "threshold_select.hpp"
#include "topk_select.hpp"
#include "transform.hpp"

namespace gradcomp::cpu::detail {

struct executor {
  using state_type = state;
  using compress_result = result<std::size_t>;

  // --- Memory of a composition's state (compressor::make_state).

  // Scratch of the selection for a chunk of c elements.
  template <class C>
  static std::size_t selector_bytes(const C& comp, std::size_t c) {
    if constexpr (C::kind == selection::dense) {
      return 0;
    } else {
      return selector_for<C::kind>::workspace_bytes(comp, c);
    }
  }
  // Workspace for gradients of n elements: the selection's scratch for the largest chunk,
  // then room for its indices (and, for row top-k, their values: see kept_values), then, with
  // a transform, the largest chunk transformed.
  template <class C>
  static std::size_t workspace_bytes(const C& comp, std::size_t n) {
    if constexpr (C::transformed) return align8(selection_bytes(comp, n)) + 4 * largest_chunk(comp, n);
    else return selection_bytes(comp, n);
  }
  template <class C>
  static std::size_t selection_bytes(const C& comp, std::size_t n) {
    if constexpr (C::dense) {
      return 0;
    } else {
      const std::size_t c = largest_chunk(comp, n);
      const std::size_t kept = C::sparsifier::kept(comp.get_config().sparsify, c);
      return align8(selector_bytes(comp, c)) + 4 * kept + (kept_values<C> ? 4 * (row_topk_selector::out_slack + kept) : 0);
    }
  }
  // (An invalid partition plan cannot be asked for chunks; compress refuses it anyway.)
  template <class C>
  static std::size_t largest_chunk(const C& comp, std::size_t n) {
    return C::partitioner::validate(comp.get_config().partition) ? comp.largest_chunk(n) : n;
  }
  // Row top-k writes the kept values beside their indices while each row is in cache, so that
  // encode reads them in order rather than gathering them from the whole chunk.
  template <class C>
  static constexpr bool kept_values = C::kind == selection::row_topk;

  // --- Compression.

  template <class C>
  status check_state(const C& comp, const state& st, std::size_t n) const {
    if (n != st.size) return {errc::size_mismatch, "gradient size differs from the state's"};
    if (C::feedback::has_state && st.residual.size() != st.size) return {errc::size_mismatch, "state has no residual"};
    if (C::has_momentum && st.momentum.size() != st.size) return {errc::size_mismatch, "state has no momentum"};
    if (C::kind == selection::threshold && st.thresholds.size() < comp.chunk_slots(st.size))
      return {errc::size_mismatch, "state has no thresholds: use make_state()"};
    if (st.workspace.size() < workspace_bytes(comp, st.size))
      return {errc::size_mismatch, "state workspace too small for this config: use make_state()"};
    return {};
  }
  template <class C, class T>
  status check_memory(const C&, std::span<const T>, const engine::detail::chunk_span&, std::span<std::byte>) const {
    return {};  // the state's workspace was checked with it; the payload may have any alignment
  }
  template <class C, class T>
  status reject_non_finite(const C& comp, std::span<const T> grad, const engine::detail::chunk_span& chunks) const {
    for (std::size_t i = chunks.first; i < chunks.first + chunks.count; ++i) {
      const chunk_range r = comp.template chunk<T>(grad.size(), i);
      for (std::size_t j = r.offset; j < r.offset + r.count; ++j)
        if (!is_finite_bits(float_bits(to_float(grad[j])))) return {errc::non_finite_value, "gradient holds NaN or inf"};
    }
    return {};
  }

  template <class C, class T>
  struct compress_job {
    const C& comp;
    std::span<const T> grad;
    float* transformed;        // with a transform: the current chunk, transformed (workspace)
    state& st;
    std::span<std::byte> payload;
    engine::detail::chunk_span chunks;
    bool streaming;            // non-temporal stores: the frames together would not stay in cache
    std::size_t written = 0;   // payload bytes so far
    frame::header h{};         // the current chunk's frame
    std::uint32_t* idx = nullptr;  // its kept indices (sparse)
    float* values = nullptr;       // and their values (kept_values)
    std::uint32_t values_crc = 0;
  };

  template <class C, class T>
  compress_job<C, T> start_compress(const C& comp, std::span<const T> grad, state& st, std::span<std::byte> payload,
                                    const engine::detail::chunk_span& chunks) const {
    float* const t = C::transformed ? reinterpret_cast<float*>(st.workspace.data() + align8(selection_bytes(comp, st.size))) : nullptr;
    return {comp, grad, t, st, payload, chunks, streaming_stores(comp.get_config().stores, chunks.payload_bytes)};
  }
  template <class J>
  std::size_t chunks_per_batch(const J&) const {
    return 1;
  }

  template <class C, class T>
  void select(compress_job<C, T>& job, std::size_t i, std::size_t) const {
    start_frame(job, i);
    job.idx = reinterpret_cast<std::uint32_t*>(job.st.workspace.data() + align8(selector_bytes(job.comp, job.h.dense_count)));
    if constexpr (kept_values<C>) job.values = reinterpret_cast<float*>(job.idx + job.h.kept_count + row_topk_selector::out_slack);
    const std::size_t kept = select_indices(job, job.idx);
    frame::header& h = job.h;
    if (kept != h.kept_count) {  // threshold and row top-k: a data-dependent count
      const frame::header sized = job.comp.layout(kept, h.dense_count);
      h.kept_count = kept;
      h.meta_bytes = sized.meta_bytes;
      h.index_bytes = sized.index_bytes;
      h.value_bytes = sized.value_bytes;
    }
    std::byte* const f = job.payload.data() + job.written;
    std::byte* const section = f + h.index_offset();  // (after the meta section, whose size is fixed by now)
    const auto& cfg = job.comp.get_config();
    if constexpr (C::listed) {
      const indices::encoding enc = indices::choose(job.idx, kept, h.dense_count, cfg.compact_indices);
      h.indices = enc.format;
      h.index_bytes = enc.bytes;
      indices::write(enc, job.idx, kept, h.dense_count, section);
    } else {
      store_le<std::uint32_t>(section, cfg.seed);
      store_le<std::uint32_t>(section + 4, 0);
    }
  }

  template <class C, class T>
  void encode(compress_job<C, T>& job, std::size_t i, std::size_t) const {
    using F = typename C::feedback;
    using Q = typename C::quantizer;
    if constexpr (C::dense) start_frame(job, i);
    const frame::header& h = job.h;
    std::byte* const f = job.payload.data() + job.written;
    frame::zero_padding(h, f);
    const auto fb = feedback_of(job);
    const auto& cfg = job.comp.get_config();
    const value_section<Q> s{cfg.quantize, f + h.meta_offset(), f + h.value_offset(), h.kept_count, job.streaming,
                             cfg.seed, h.step, h.chunk_id};
    constexpr bool feeds_back = F::has_state;
    const auto load = [&](std::size_t m0, std::size_t n, float* xs) -> const float* {
      if constexpr (kept_values<C>) {
        return job.values + m0;  // written by the selection
      } else if constexpr (!C::dense) {
        for (std::size_t m = 0; m < n; ++m) xs[m] = fb.value(job.idx[m0 + m]);  // x was stored by the selection's scan
      } else if constexpr (std::is_same_v<source_type<C, T>, float> && !feeds_back && !C::has_momentum) {
        return fb.g + m0;  // the gradient itself: no copy
      } else {
        for (std::size_t m = 0; m < n; ++m) xs[m] = fb.peek(m0 + m);
      }
      return xs;
    };
    const auto keep = [&](std::size_t m0, std::size_t n, const float* xs, const float* decoded) {
      for (std::size_t m = 0; m < n; ++m) fb.sent(C::dense ? m0 + m : job.idx[m0 + m], xs[m], decoded[m]);
    };
    job.values_crc = encode_values<Q, feeds_back>(s, load, keep);
  }

  template <class C, class T>
  void seal(compress_job<C, T>& job, std::size_t, std::size_t) const {
    const frame::header& h = job.h;
    const std::span<std::byte> f = job.payload.subspan(job.written, h.frame_bytes());
    frame::write_header(h, f.data());
    // the body is [meta, indices, their padding] then [values, padding]; the values' CRC was
    // taken as they were written
    const std::size_t end = h.value_offset() + h.value_bytes;
    const std::uint32_t values_crc = crc32c(std::span<const std::byte>(f.data() + end, align8(end) - end), job.values_crc);
    frame::seal(f, h.value_offset(), values_crc);
    job.written += h.frame_bytes();
  }

  template <class C, class T>
  compress_result finish_compress(compress_job<C, T>& job) const {
    if (job.chunks.whole_buffer) ++job.st.step;
    return job.written;
  }

  // --- Decoding.

  template <class C, class T>
  status check_decode_memory(const C&, std::span<const std::byte>, std::span<T>) const {
    return {};
  }

  template <class C, class T>
  struct decode_job {
    const C& comp;
    std::span<const std::byte> payload;
    std::span<T> out;
    bool add;
    bool streaming = false;
  };

  template <class C, class T>
  decode_job<C, T> start_decode(const C& comp, std::span<const std::byte> payload, std::span<T> out, bool add) const {
    return {comp, payload, out, add};
  }

  // Every frame of `payload` checked for a buffer of n elements; the elements they cover.
  template <class C>
  result<std::size_t> check_frames(const C& comp, std::span<const std::byte> payload, std::size_t n) const {
    std::size_t dense = 0;
    for (std::size_t at = 0; at < payload.size();) {
      const auto h = engine::detail::check_frame(comp, payload.subspan(at), n);
      if (!h) return h.error();
      dense += h->dense_count;
      at += h->frame_bytes();
    }
    return dense;
  }

  template <class C, class T>
  status validate_frames(decode_job<C, T>& job) const {
    const result<std::size_t> dense = check_frames(job.comp, job.payload, job.out.size());
    if (!dense) return dense.error();
    // A dense decompress stores non-temporally when all it writes would not stay in cache,
    // even if each frame's part would.
    job.streaming = streaming_stores(job.comp.get_config().stores, *dense * sizeof(T));
    return {};
  }

  template <class C, class T>
  void apply_frames(decode_job<C, T>& job) const {
    [[maybe_unused]] std::vector<float> chunk;  // with a transform: a frame's chunk before its inverse
    for (std::size_t at = 0; at < job.payload.size();) {
      const auto h = frame::parse(job.payload.subspan(at), false);
      if constexpr (C::transformed) {
        apply_inverse(job, *h, job.payload.data() + at, chunk);
      } else {
        apply_frame<C>(job.comp.get_config(), *h, job.payload.data() + at, job.out.data(), job.add, job.streaming);
      }
      at += h->frame_bytes();
    }
  }

  template <class C, class T>
  status finish_decode(decode_job<C, T>&) const {
    return {};
  }

 private:
  // A frame of a transformed composition: decoded into `chunk`, inverted there, then written
  // (or added) to its place in out.
  template <class C, class T>
  static void apply_inverse(decode_job<C, T>& job, frame::header h, const std::byte* f, std::vector<float>& chunk) {
    const auto& cfg = job.comp.get_config();
    const std::size_t offset = h.element_offset;
    chunk.resize(h.dense_count);
    h.element_offset = 0;
    apply_frame<C>(cfg, h, f, chunk.data(), false, false);
    transform_chunk<typename C::transform>(cfg.transform, h.chunk_id, chunk.data(), h.dense_count, true);
    T* const to = job.out.data() + offset;
    if (job.add) {
      for (std::size_t j = 0; j < h.dense_count; ++j) to[j] = from_float<T>(canonical_nan(to_float(to[j]) + chunk[j]));
    } else {
      for (std::size_t j = 0; j < h.dense_count; ++j) to[j] = from_float<T>(chunk[j]);
    }
  }

  // The header of chunk i's frame before selection (a u32 index list of the most it may keep).
  template <class C, class T>
  static void start_frame(compress_job<C, T>& job, std::size_t i) {
    const chunk_range r = job.comp.template chunk<T>(job.grad.size(), i);
    frame::header h = job.comp.layout(C::sparsifier::kept(job.comp.get_config().sparsify, r.count), r.count);
    h.source_dtype = dtype_of<T>;
    h.chunk_id = static_cast<std::uint32_t>(i);
    h.step = job.st.step;
    h.element_offset = r.offset;
    job.h = h;
    if constexpr (C::transformed) {
      const T* g = job.grad.data() + r.offset;
      for (std::size_t j = 0; j < r.count; ++j) job.transformed[j] = to_float(g[j]);
      transform_chunk<typename C::transform>(job.comp.get_config().transform, h.chunk_id, job.transformed, r.count, false);
    }
  }

  // What the feedback and selection read: the gradient, or with a transform its chunk
  // transformed (fp32 whatever the gradient's type).
  template <class C, class T>
  using source_type = std::conditional_t<C::transformed, float, T>;

  template <class C, class T>
  static auto feedback_of(const compress_job<C, T>& job) {
    using F = typename C::feedback;
    const frame::header& h = job.h;
    const source_type<C, T>* g;
    if constexpr (C::transformed) g = job.transformed;
    else g = job.grad.data() + h.element_offset;
    float* e = F::has_state ? job.st.residual.data() + h.element_offset : nullptr;
    float* u = C::has_momentum ? job.st.momentum.data() + h.element_offset : nullptr;
    const auto& fc = job.comp.get_config().feedback;
    return engine::detail::element_feedback<F, source_type<C, T>>{fc, g, e, u, engine::detail::clip_factor<F>(fc, g, h.dense_count)};
  }

  // Selects the chunk's sent elements into idx (the kind's selector_for, cpu/selector.hpp);
  // returns their count. With feedback the selection's scan stores x = combine(g, e) in e,
  // where encode reads it.
  template <class C, class T>
  static std::size_t select_indices(compress_job<C, T>& job, std::uint32_t* idx) {
    const auto fb = feedback_of(job);
    const std::span<std::byte> scratch(job.st.workspace.data(), align8(selector_bytes(job.comp, job.h.dense_count)));
    return selector_for<C::kind>::select(chunk_input<C, decltype(fb)>{job.comp, job.st, job.h, fb, scratch, job.values}, idx);
  }
};

}  // namespace gradcomp::cpu::detail
