#pragma once
// TAGC-2 as a summable codec (summable/phases.hpp; docs/tagc.md). Per rank and step:
//
//   phase 0, "bitmap": x = g + e (error feedback); each shard of x (summable::shard_of) keeps
//     |x| >= t, t from the threshold sparsifier's sampled search (cpu/threshold_select.hpp,
//     key (state::key, step), chunk = shard index, started from the shard's last threshold).
//     The kept positions of the whole buffer go out as a 1-bit bitmap (reduced by OR) or in
//     the sum-safe packing (reduced by SUM); the transport all-reduces it (not shardable).
//   receive(0): the union of every rank's kept positions, validated (tail bits, sum-safe
//     fields <= W, at most max_items per shard); r follows from it (config::rows: the fullest
//     lane of any shard), the same on every rank.
//   phase 1, "sketch": for each destination shard, the count sketch (sketch/count_sketch.hpp)
//     of x at the union's positions of that shard, r * B cells (f32 or bf16); shard i's cells at
//     [i r B, (i + 1) r B). Reduced by SUM; shardable (reduce-scatter: rank i gets shard i).
//     The rank then decodes its own cells (the peel with fallback zero) and keeps e = x - that
//     at the union's positions: what its cells convey, exactly, so that the ranks' sent values
//     add up to what the receivers decode, and sent + e' == g + e on every rank.
//   receive(1): the peel decode of the summed cells: the ranks' summed x at every position that
//     peels, 0 elsewhere (those values are still in the senders' residuals).
//
// Every call checks its stage, sizes and values before writing; on error nothing advances.
// The phases have names (encode_bitmap, receive_bitmap, encode_sketch, receive_sketch,
// finish_step: the calls of cuda::tagc::codec) and the summable phase interface's numbers
// (encode(k), receive(k)). The checks are tagc/flow.hpp's, shared with the parallel form; the
// kernels are the CPU executor's (cpu/tagc.hpp).

#include <cstddef>
#include <cstdint>
#include <span>

#include "../cpu/tagc.hpp"
#include "flow.hpp"
#include "state.hpp"

namespace gradcomp::tagc {

class codec {
 public:
  static constexpr summable::aggregation aggregation_kind = summable::aggregation::summable;
  using state_type = tagc::state;
  static constexpr std::size_t bitmap_phase = 0, sketch_phase = 1;

  codec() = default;
  explicit codec(const config& c) : cfg_(c) {}
  const config& get_config() const { return cfg_; }
  status validate() const { return tagc::validate(cfg_); }
  std::uint32_t codec_id() const { return tagc::codec_id(cfg_); }
  std::size_t phase_count() const { return 2; }

  // Sizes `st` for gradients of n elements on rank `rank` of `world` (once, outside the step).
  status make_state(std::size_t n, std::uint32_t world, std::uint32_t rank, state& st) const {
    if (status s = validate(); !s) return s;
    if (status s = detail::check_world(world, rank); !s) return s;
    if (status s = detail::check_sizes(cfg_, n, world); !s) return s;
    st = state{};
    st.size = n;
    st.world = world;
    st.rank = rank;
    st.key = cfg_.seed;
    st.residual.assign(n, 0.0f);
    st.thresholds.assign(world, 0.0f);
    st.union_bits.assign(sketch::bitmap_words(n), 0u);
    st.workspace.resize(cpu::detail::tagc_layout::of(cfg_, n, world).total);
    return {};
  }

  result<summable::phase> describe(std::size_t k, const state& st) const {
    if (status s = check_state(st); !s) return s;
    if (k == bitmap_phase) return detail::bitmap_phase(cfg_, st.size, st.world);
    if (k != sketch_phase) return status{errc::invalid_argument, "TAGC has phases 0 (bitmap) and 1 (sketch)"};
    if (st.at < stage::encode_sketch)
      return status{errc::invalid_argument, "TAGC sketch size is known once the reduced bitmap is received"};
    return detail::sketch_phase(cfg_, st.world, st.rows);
  }

  // Phase 0: x = g + e, each shard's threshold search, the kept positions into `out`
  // (describe(0).bytes()).
  status encode_bitmap(state& st, std::span<const float> grad, std::span<std::byte> out) const {
    const result<summable::phase> p = describe(bitmap_phase, st);
    if (!p) return p.error();
    if (st.at != stage::encode_bitmap) return detail::out_of_order();
    if (status s = detail::check_buffer(*p, out.size(), out.data(), "phase buffer differs from describe().bytes()"); !s) return s;
    if (grad.size() != st.size) return {errc::size_mismatch, "gradient differs from the state's size"};
    cpu::detail::tagc_kernels(cfg_).encode_bitmap(grad, st, reinterpret_cast<std::uint32_t*>(out.data()));
    st.at = stage::receive_bitmap;
    return {};
  }

  // receive(0): the reduced bitmap (the whole buffer: the phase is not shardable), checked; the
  // union and r.
  status receive_bitmap(state& st, std::span<const std::byte> in) const {
    const result<summable::phase> p = describe(bitmap_phase, st);
    if (!p) return p.error();
    if (st.at != stage::receive_bitmap) return detail::out_of_order();
    if (status s = detail::check_buffer(*p, in.size(), in.data(), "reduced buffer differs from the phase's size (not shardable)"); !s)
      return s;
    const std::span<const std::uint32_t> words(reinterpret_cast<const std::uint32_t*>(in.data()), p->count);
    if (status s = cpu::detail::tagc_kernels(cfg_).receive_bitmap(words, st); !s) return s;
    st.at = stage::encode_sketch;
    return {};
  }

  // Phase 1: every destination shard's cells into `out` (describe(1).bytes()), then the residual
  // keeps x minus what this rank's own cells convey.
  status encode_sketch(state& st, std::span<std::byte> out) const {
    const result<summable::phase> p = describe(sketch_phase, st);
    if (!p) return p.error();
    if (st.at != stage::encode_sketch) return detail::out_of_order();
    if (status s = detail::check_buffer(*p, out.size(), out.data(), "phase buffer differs from describe().bytes()"); !s) return s;
    const cpu::detail::tagc_kernels k(cfg_);
    if (cfg_.cells == summable::wire_type::f32) {
      k.encode_sketch(st, std::span<float>(reinterpret_cast<float*>(out.data()), p->count));
    } else {
      k.encode_sketch(st, std::span<bf16_t>(reinterpret_cast<bf16_t*>(out.data()), p->count));
    }
    st.at = stage::receive_sketch;
    return {};
  }

  // receive(1): the reduced sketch, whole (`kind` whole, out: n values) or this rank's shard
  // (out: its shard_of range); positions that do not peel decode to 0 (they stay in the
  // senders' residuals).
  status receive_sketch(state& st, std::span<const std::byte> in, summable::received kind, std::span<float> out) const {
    const result<summable::phase> p = describe(sketch_phase, st);
    if (!p) return p.error();
    if (st.at != stage::receive_sketch) return detail::out_of_order();
    const bool whole = kind == summable::received::whole;
    if (in.size() != (whole ? p->bytes() : p->shard_bytes()))
      return {errc::size_mismatch, whole ? "reduced buffer differs from the phase's size" : "reduced shard differs from the phase's shard size"};
    if (status s = summable::check_alignment(*p, in.data()); !s) return s;
    if (status s = detail::check_output(st.size, st.world, st.rank, kind, out.size()); !s) return s;
    const cpu::detail::tagc_kernels k(cfg_);
    if (cfg_.cells == summable::wire_type::f32) {
      k.receive_sketch(std::span<const float>(reinterpret_cast<const float*>(in.data()), in.size() / 4), kind, st, out);
    } else {
      k.receive_sketch(std::span<const bf16_t>(reinterpret_cast<const bf16_t*>(in.data()), in.size() / 2), kind, st, out);
    }
    st.at = stage::done;
    return {};
  }

  void finish_step(state& st) const {
    ++st.step;
    st.at = stage::encode_bitmap;
  }

  // The summable phase interface (summable/phases.hpp): phase k = 0 (bitmap) or 1 (sketch);
  // receive(1) tells the whole sketch from this rank's shard by the buffer's size.
  status encode(std::size_t k, std::span<const float> grad, state& st, std::span<std::byte> out) const {
    if (k == bitmap_phase) return encode_bitmap(st, grad, out);
    if (k == sketch_phase) return encode_sketch(st, out);
    return {errc::invalid_argument, "TAGC has phases 0 (bitmap) and 1 (sketch)"};
  }
  status receive(std::size_t k, state& st, std::span<const std::byte> in, std::span<float> out) const {
    if (k == bitmap_phase) return receive_bitmap(st, in);
    const result<summable::phase> p = describe(k, st);
    if (!p) return p.error();
    if (st.at != stage::receive_sketch) return detail::out_of_order();
    const result<summable::received> got = summable::classify(*p, in.size());
    if (!got) return got.error();
    return receive_sketch(st, in, *got, out);
  }

  // The largest buffer any phase of a step can need (send: whole; a reduce-scatter receives
  // 1 / W of the sketch phase), for buffers allocated once.
  std::size_t max_phase_bytes(const state& st) const {
    if (!check_state(st)) return 0;
    return detail::max_phase_bytes(cfg_, st.size, st.world);
  }

 private:
  status check_state(const state& st) const {
    if (status s = validate(); !s) return s;
    if (status s = detail::check_world(st.world, st.rank); !s) return s;
    if (st.residual.size() != st.size || st.thresholds.size() != st.world || st.union_bits.size() != sketch::bitmap_words(st.size) ||
        st.workspace.size() < cpu::detail::tagc_layout::of(cfg_, st.size, st.world).total)
      return {errc::size_mismatch, "TAGC state not sized by this codec's make_state"};
    if (reinterpret_cast<std::uintptr_t>(st.workspace.data()) % 8 != 0)
      return {errc::invalid_argument, "TAGC workspace must be 8-byte aligned"};
    return {};
  }

  config cfg_{};
};

}  // namespace gradcomp::tagc
