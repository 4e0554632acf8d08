#pragma once
// router<Slots...>: one compressor over a laid-out buffer that sends each tensor through one
// of a compile-time set of compressors (the slots), chosen at run time by the tensor's role
// and size. Each tensor is its own buffer region: its slot compresses the sub-span
// [offset, offset + elements), so its frames' chunk ids and offsets are relative to the
// tensor. A payload is the frames of every tensor, in layout order, each tensor's in chunk
// order. The layout is configuration both sides share; the routing is not: a receiver takes
// the decoder from each frame's codec id, so a sender may reroute a tensor (compress it or
// not) without telling the receivers. Slots must have distinct codec ids (validate()).
//
//   using R = model::tagc_router<>;  // model/tagc.hpp: top-k + bf16, bf16, fp32
//   R r(model::gpt2_layout(model::gpt2_small), model::tagc_routing());
//   auto st = r.make_state();
//   std::vector<std::byte> payload(r.max_payload_bytes<float>());
//   auto sent = r.compress<float>(grad, st, payload);   // all-gathered by the transport
//   r.accumulate<float>(gathered, sum);                  // every rank's payload, back to back
//
// Gather path: payloads differ per rank; the transport all-gathers them and each receiver
// accumulates them all (one call over the concatenation). Decoding checks every frame of the
// call before writing anything (engine::detail::check_frame).

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../compressor.hpp"
#include "layout.hpp"
#include "../state.hpp"
#include "../engine/frame_checks.hpp"
#include "telemetry.hpp"

namespace gradcomp::model {

struct routing {
  std::array<std::size_t, role_count> slot_of_role{};  // slot index for each role
  std::size_t small_elements = 0;                      // tensors with fewer elements ...
  std::size_t small_slot = 0;                          // ... go to this slot
};

// The slot of a tensor of `elements` elements and role `r`: by size first (small tensors),
// then by role. Shared by router (gather path) and split (summable path).
inline std::size_t slot_for(const routing& g, std::size_t elements, role r) {
  if (elements < g.small_elements) return g.small_slot;
  return g.slot_of_role[static_cast<std::size_t>(r)];
}

struct router_state {
  std::vector<state> tensors;     // one per layout tensor, made by its slot
  std::vector<std::size_t> slots;  // the slot each was made for
};

template <class... Slots>
class router {
  static_assert(sizeof...(Slots) >= 1, "gradcomp::model::router needs at least one slot");

 public:
  static constexpr std::size_t slot_count = sizeof...(Slots);
  static constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();

  explicit router(layout l, routing r = {}, std::tuple<Slots...> slots = {}, classifier c = {})
      : layout_(std::move(l)), routing_(r), slots_(std::move(slots)), classifier_(std::move(c)) {
    roles_ = classifier_.classify(layout_);
  }

  status validate() const {
    if (auto s = layout_.validate(); !s) return s;
    status bad{};
    for_each_slot([&](const auto& c, std::size_t) {
      if (auto s = c.validate(); !s && bad) bad = s;
    });
    if (!bad) return bad;
    for (std::size_t a = 0; a < slot_count; ++a)
      for (std::size_t b = a + 1; b < slot_count; ++b)
        if (codec_of(a) == codec_of(b)) return {errc::invalid_argument, "router slots share a codec id"};
    for (std::size_t s : routing_.slot_of_role)
      if (s >= slot_count) return {errc::invalid_argument, "routing names a slot beyond the router's"};
    if (routing_.small_slot >= slot_count) return {errc::invalid_argument, "routing names a slot beyond the router's"};
    return {};
  }

  const layout& get_layout() const { return layout_; }
  const routing& get_routing() const { return routing_; }
  void set_routing(const routing& r) { routing_ = r; }  // states made before need make_state()
  role role_of(std::size_t t) const { return roles_[t]; }
  // The slot of tensor t: by size first (small tensors), then by role.
  std::size_t route(std::size_t t) const { return slot_for(routing_, layout_[t].elements(), roles_[t]); }
  template <std::size_t I>
  const auto& slot() const { return std::get<I>(slots_); }
  template <std::size_t I>
  auto& slot() { return std::get<I>(slots_); }  // to change a slot's config between steps
  std::uint32_t codec_of(std::size_t s) const {
    return visit(s, [](const auto& c) { return c.codec_id(); });
  }
  std::size_t slot_of_codec(std::uint32_t codec) const {
    for (std::size_t s = 0; s < slot_count; ++s)
      if (codec_of(s) == codec) return s;
    return npos;
  }

  router_state make_state() const {
    router_state st;
    for (std::size_t t = 0; t < layout_.size(); ++t) {
      st.tensors.push_back(visit(route(t), [&](const auto& c) { return c.make_state(layout_[t].elements()); }));
      st.slots.push_back(route(t));
    }
    return st;
  }

  // --- Sizes and the global chunk plan (every tensor's chunks, in layout order).
  template <gradient_element T>
  std::size_t max_payload_bytes() const {
    std::size_t total = 0;
    for (std::size_t t = 0; t < layout_.size(); ++t)
      total += visit(route(t), [&](const auto& c) { return c.template max_payload_bytes<T>(layout_[t].elements()); });
    return total;
  }
  template <gradient_element T>
  std::size_t chunk_count() const {
    std::size_t total = 0;
    for (std::size_t t = 0; t < layout_.size(); ++t) total += chunks_of<T>(t, route(t));
    return total;
  }
  struct chunk_ref {
    std::size_t tensor = npos, chunk = 0;
  };
  template <gradient_element T>
  chunk_ref locate(std::size_t i) const {
    for (std::size_t t = 0; t < layout_.size(); ++t) {
      const std::size_t c = chunks_of<T>(t, route(t));
      if (i < c) return {t, i};
      i -= c;
    }
    return {};
  }
  template <gradient_element T>
  std::size_t max_frame_bytes(std::size_t i) const {
    const chunk_ref r = locate<T>(i);
    if (r.tensor == npos) return 0;
    const std::size_t n = layout_[r.tensor].elements();
    return visit(route(r.tensor), [&](const auto& c) { return c.max_frame_bytes(c.template chunk<T>(n, r.chunk).count); });
  }

  // --- Compression. Every tensor's frames, back to back; advances every tensor's step. All
  // checks come first (configs, state against layout and routing, room, finite values where
  // a slot forbids others), so on error payload and state are untouched.
  template <gradient_element T>
  result<std::size_t> compress(std::span<const T> grad, router_state& st, std::span<std::byte> payload,
                               telemetry* tel = nullptr) const {
    if (auto s = check_compress_args(grad, st); !s) return s;
    if (payload.size() < max_payload_bytes<T>())
      return status{errc::buffer_too_small, "payload smaller than max_payload_bytes()"};
    for (std::size_t t = 0; t < layout_.size(); ++t)
      if (auto s = check_finite(t, grad); !s) return s;
    std::size_t written = 0;
    for (std::size_t t = 0; t < layout_.size(); ++t) {
      const auto w = visit(route(t), [&](const auto& c) {
        using C = std::remove_cvref_t<decltype(c)>;
        return observed_compress<C, T>(c, region(grad, t), st.tensors[t], payload.subspan(written), tel, t, roles_[t],
                                       route(t));
      });
      if (!w) return w;  // (not reached: checked above)
      written += *w;
    }
    return written;
  }

  // Global chunk i (locate()), for pipelining; after the last, finish_step(st). `frame` must
  // hold max_frame_bytes<T>(i).
  template <gradient_element T>
  result<std::size_t> compress_chunk(std::size_t i, std::span<const T> grad, router_state& st, std::span<std::byte> frame,
                                     telemetry* tel = nullptr) const {
    if (auto s = check_compress_args(grad, st); !s) return s;
    const chunk_ref r = locate<T>(i);
    if (r.tensor == npos) return status{errc::invalid_argument, "chunk index beyond the plan"};
    if (auto s = check_finite(r.tensor, grad); !s) return s;
    return visit(route(r.tensor), [&](const auto& c) {
      using C = std::remove_cvref_t<decltype(c)>;
      return observed_compress_chunk<C, T>(c, r.chunk, region(grad, r.tensor), st.tensors[r.tensor], frame, tel,
                                           r.tensor, roles_[r.tensor], route(r.tensor));
    });
  }
  void finish_step(router_state& st) const {
    for (std::size_t t = 0; t < st.tensors.size() && t < st.slots.size(); ++t)
      visit(st.slots[t], [&](const auto& c) { c.finish_step(st.tensors[t]); });
  }

  // --- Decoding. `payload`: one or more router payloads back to back (an all-gather's
  // output). decompress overwrites each tensor region a frame covers, accumulate adds to it;
  // elements outside the layout are not touched, nor is anything on error.
  template <gradient_element T>
  status decompress(std::span<const std::byte> payload, std::span<T> out) const {
    return decode(payload, out, false);
  }
  template <gradient_element T>
  status accumulate(std::span<const std::byte> payload, std::span<T> out) const {
    return decode(payload, out, true);
  }
  // Frames of tensor t alone (any of its chunks, from any slot and any number of ranks), e.g.
  // one frame of a pipelined step; `out` is the whole buffer.
  template <gradient_element T>
  status accumulate_tensor(std::size_t t, std::span<const std::byte> frames, std::span<T> out) const {
    return decode_tensor(t, frames, out, true);
  }
  template <gradient_element T>
  status decompress_tensor(std::size_t t, std::span<const std::byte> frames, std::span<T> out) const {
    return decode_tensor(t, frames, out, false);
  }

  // --- Checkpoint: every tensor's state image (gradcomp::save_checkpoint, with its slot's
  // codec id), in layout order. Loading is all or nothing.
  std::size_t checkpoint_bytes(const router_state& st) const {
    std::size_t n = 0;
    for (const state& s : st.tensors) n += gradcomp::checkpoint_bytes(s);
    return n;
  }
  result<std::size_t> save_checkpoint(const router_state& st, std::span<std::byte> out) const {
    if (auto s = check_state(st); !s) return s;
    if (out.size() < checkpoint_bytes(st))
      return status{errc::buffer_too_small, "checkpoint buffer smaller than checkpoint_bytes()"};
    std::size_t at = 0;
    for (std::size_t t = 0; t < st.tensors.size(); ++t) {
      const auto w = gradcomp::save_checkpoint(st.tensors[t], codec_of(st.slots[t]), out.subspan(at));
      if (!w) return w;
      at += *w;
    }
    return at;
  }
  status load_checkpoint(std::span<const std::byte> in, router_state& st) const {
    if (auto s = check_state(st); !s) return s;
    if (in.size() != checkpoint_bytes(st)) return {errc::size_mismatch, "checkpoint size differs from the router state's"};
    router_state loaded = st;  // (a restart is not the hot path: all or nothing beats a copy)
    std::size_t at = 0;
    for (std::size_t t = 0; t < st.tensors.size(); ++t) {
      const std::size_t bytes = gradcomp::checkpoint_bytes(st.tensors[t]);
      if (auto s = gradcomp::load_checkpoint(in.subspan(at, bytes), codec_of(st.slots[t]), loaded.tensors[t]); !s) return s;
      at += bytes;
    }
    st = std::move(loaded);
    return {};
  }

 private:
  template <class F>
  decltype(auto) visit(std::size_t s, F&& f) const {
    return visit_from<0>(s, f);
  }
  template <std::size_t I, class F>
  decltype(auto) visit_from(std::size_t s, F& f) const {
    if constexpr (I + 1 == slot_count) {
      return f(std::get<I>(slots_));  // s < slot_count is checked by callers (validate)
    } else {
      if (s == I) return f(std::get<I>(slots_));
      return visit_from<I + 1>(s, f);
    }
  }
  template <class F>
  void for_each_slot(F&& f) const {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::get<I>(slots_), I), ...); }(std::index_sequence_for<Slots...>{});
  }

  template <class T>
  std::size_t chunks_of(std::size_t t, std::size_t s) const {
    return visit(s, [&](const auto& c) { return c.template chunk_count<T>(layout_[t].elements()); });
  }
  // Chunks of tensor t in slot s for frames of source type d.
  std::size_t chunks_of(std::size_t t, std::size_t s, dtype d) const {
    return d == dtype::f32 ? chunks_of<float>(t, s) : chunks_of<bf16_t>(t, s);
  }
  template <class T>
  std::span<T> region(std::span<T> buffer, std::size_t t) const {
    return buffer.subspan(layout_[t].offset, layout_[t].elements());
  }

  status check_state(const router_state& st) const {
    if (auto s = validate(); !s) return s;
    if (st.tensors.size() != layout_.size() || st.slots.size() != layout_.size())
      return {errc::size_mismatch, "router state made for another layout: use make_state()"};
    for (std::size_t t = 0; t < layout_.size(); ++t) {
      if (st.slots[t] != route(t)) return {errc::size_mismatch, "router state made for another routing: use make_state()"};
      if (st.tensors[t].size != layout_[t].elements()) return {errc::size_mismatch, "router state made for another layout"};
    }
    return {};
  }
  template <class T>
  status check_compress_args(std::span<const T> grad, const router_state& st) const {
    if (auto s = check_state(st); !s) return s;
    if (grad.size() < layout_.extent()) return {errc::size_mismatch, "buffer smaller than the layout's extent"};
    for (const tensor_desc& t : layout_.tensors())
      if (t.type != dtype_of<T>) return {errc::invalid_argument, "layout element type differs from the buffer's"};
    return {};
  }
  template <class T>
  status check_finite(std::size_t t, std::span<const T> grad) const {
    const bool allowed = visit(route(t), [](const auto& c) { return c.get_config().allow_non_finite; });
    if (!allowed)
      for (const T& x : region(grad, t))
        if (!is_finite_bits(float_bits(to_float(x)))) return {errc::non_finite_value, "gradient holds NaN or inf"};
    return {};
  }

  // Walks a payload of whole router payloads: each frame is assigned to its tensor (layout
  // order, each tensor's frames in chunk order, all from one slot). on_frame(t, s, bytes)
  // checks a frame and returns its header; on_run(t, s, bytes) gets each tensor's frames.
  template <class OnFrame, class OnRun>
  status walk(std::span<const std::byte> payload, OnFrame&& on_frame, OnRun&& on_run) const {
    if (payload.empty()) return {errc::truncated, "empty payload"};
    if (layout_.size() == 0) return {errc::size_mismatch, "payload for an empty layout"};
    std::size_t t = 0, j = 0, chunks = 0, s = npos, run = 0;
    dtype type = dtype::f32;
    for (std::size_t at = 0; at < payload.size();) {
      const auto peek = frame::parse_header(payload.data() + at, payload.size() - at);
      if (!peek) return peek.error();
      if (j == 0) {
        s = slot_of_codec(peek->codec_id);
        if (s == npos) return {errc::codec_mismatch, "frame codec id is none of the router's slots"};
        type = peek->source_dtype;
        chunks = chunks_of(t, s, type);
        run = at;
      } else if (peek->codec_id != codec_of(s) || peek->source_dtype != type) {
        return {errc::codec_mismatch, "a tensor's frames come from more than one codec"};
      }
      const auto h = on_frame(t, s, payload.subspan(at));
      if (!h) return h.error();
      if (h->chunk_id != j) return {errc::size_mismatch, "frame out of the router's order (chunk id)"};
      at += h->frame_bytes();
      if (++j == chunks) {
        on_run(t, s, payload.subspan(run, at - run));
        j = 0;
        t = t + 1 == layout_.size() ? 0 : t + 1;
      }
    }
    if (j != 0 || t != 0) return {errc::truncated, "payload ends inside a router payload"};
    return {};
  }

  template <class T>
  status apply(std::size_t t, std::size_t s, std::span<const std::byte> frames, std::span<T> out, bool add) const {
    return visit(s, [&](const auto& c) {
      const std::span<T> r = region(out, t);
      return add ? c.template accumulate<T>(frames, r) : c.template decompress<T>(frames, r);
    });
  }

  template <class T>
  status decode(std::span<const std::byte> payload, std::span<T> out, bool add) const {
    if (auto s = validate(); !s) return s;
    if (out.size() < layout_.extent()) return {errc::size_mismatch, "buffer smaller than the layout's extent"};
    const auto check = [&](std::size_t t, std::size_t s, std::span<const std::byte> f) {
      return visit(s, [&](const auto& c) { return engine::detail::check_frame(c, f, layout_[t].elements()); });
    };
    const auto peek = [](std::size_t, std::size_t, std::span<const std::byte> f) {
      return frame::parse_header(f.data(), f.size());
    };
    if (auto s = walk(payload, check, [](std::size_t, std::size_t, std::span<const std::byte>) {}); !s) return s;
    status failed{};
    (void)walk(payload, peek, [&](std::size_t t, std::size_t s, std::span<const std::byte> frames) {
      if (auto r = apply(t, s, frames, out, add); !r && failed) failed = r;
    });
    return failed;
  }

  template <class T>
  status decode_tensor(std::size_t t, std::span<const std::byte> frames, std::span<T> out, bool add) const {
    if (auto s = validate(); !s) return s;
    if (t >= layout_.size()) return {errc::invalid_argument, "tensor index beyond the layout"};
    if (out.size() < layout_.extent()) return {errc::size_mismatch, "buffer smaller than the layout's extent"};
    if (frames.empty()) return {errc::truncated, "empty payload"};
    for (int pass = 0; pass < 2; ++pass) {  // check every frame, then decode each
      for (std::size_t at = 0; at < frames.size();) {
        const auto peek = frame::parse_header(frames.data() + at, frames.size() - at);
        if (!peek) return peek.error();
        const std::size_t s = slot_of_codec(peek->codec_id);
        if (s == npos) return {errc::codec_mismatch, "frame codec id is none of the router's slots"};
        const std::span<const std::byte> f = frames.subspan(at, peek->frame_bytes());
        if (pass == 0) {
          const auto h = visit(s, [&](const auto& c) { return engine::detail::check_frame(c, f, layout_[t].elements()); });
          if (!h) return h.error();
        } else if (auto r = apply(t, s, f, out, add); !r) {
          return r;
        }
        at += peek->frame_bytes();
      }
    }
    return {};
  }

  layout layout_;
  routing routing_;
  std::tuple<Slots...> slots_;
  classifier classifier_;
  std::vector<role> roles_;
};

}  // namespace gradcomp::model
