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
// (encode(k), receive(k)). The checks are tagc/rules.hpp's, shared with the per-thread form; the
// kernels are the CPU executor's (cpu/tagc.hpp). This header is TAGC on the CPU: the
// codec and the checkpoint calls that take it (the image: tagc/checkpoint.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "cpu/tagc.hpp"
#include "tagc/checkpoint.hpp"
#include "tagc/rules.hpp"
#include "tagc/state.hpp"

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
    const result<summable::phase> p =
        detail::open_call(*this, bitmap_phase, st, stage::encode_bitmap, out, "phase buffer differs from describe().bytes()");
    if (!p) return p.error();
    if (grad.size() != st.size) return {errc::size_mismatch, "gradient differs from the state's size"};
    cpu::detail::tagc_kernels(cfg_).encode_bitmap(grad, st, reinterpret_cast<std::uint32_t*>(out.data()));
    st.at = stage::receive_bitmap;
    return {};
  }

  // receive(0): the reduced bitmap (the whole buffer: the phase is not shardable), checked; the
  // union and r.
  status receive_bitmap(state& st, std::span<const std::byte> in) const {
    const result<summable::phase> p = detail::open_call(*this, bitmap_phase, st, stage::receive_bitmap, in,
                                                        "reduced buffer differs from the phase's size (not shardable)");
    if (!p) return p.error();
    const std::span<const std::uint32_t> words(reinterpret_cast<const std::uint32_t*>(in.data()), p->count);
    if (status s = cpu::detail::tagc_kernels(cfg_).receive_bitmap(words, st); !s) return s;
    st.at = stage::encode_sketch;
    return {};
  }

  // Phase 1: every destination shard's cells into `out` (describe(1).bytes()), then the residual
  // keeps x minus what this rank's own cells convey.
  status encode_sketch(state& st, std::span<std::byte> out) const {
    const result<summable::phase> p =
        detail::open_call(*this, sketch_phase, st, stage::encode_sketch, out, "phase buffer differs from describe().bytes()");
    if (!p) return p.error();
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
    const result<summable::phase> p = detail::open_call(*this, sketch_phase, st, stage::receive_sketch);
    if (!p) return p.error();
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
    const result<summable::phase> p = detail::open_call(*this, k, st, stage::receive_sketch);
    if (!p) return p.error();
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

// --- Checkpoints of a rank's state (tagc/checkpoint.hpp: the image), with this codec's checks.

// The checkpoint of `s` (tagc/checkpoint.hpp: its layout) into `out` (checkpoint_bytes(s)).
inline result<std::size_t> save_checkpoint(const codec& c, const state& s, std::span<std::byte> out) {
  if (status v = c.validate(); !v) return v;
  const std::size_t bytes = checkpoint_bytes(s);
  if (out.size() < bytes) return status{errc::buffer_too_small, "checkpoint buffer smaller than checkpoint_bytes()"};
  detail::write_checkpoint(s, c.codec_id(), select_fingerprint(c.get_config()), out.first(bytes));
  return bytes;
}

namespace detail {
inline status check_owner(const codec& c, const checkpoint_view& v, const state& s) {
  if (v.codec_id != c.codec_id()) return {errc::codec_mismatch, "TAGC checkpoint made with another phase format (block, cells, bitmap, sizing)"};
  if (v.fingerprint != select_fingerprint(c.get_config()))
    return {errc::codec_mismatch, "TAGC checkpoint made with another threshold selection config"};
  if (v.size != s.size) return {errc::size_mismatch, "TAGC checkpoint holds another gradient size"};
  return {};
}
}  // namespace detail

// Restores `s` (from make_state of the same codec, size, world and rank); on error `s` is left
// as it was.
inline status load_checkpoint(const codec& c, std::span<const std::byte> in, state& s) {
  if (const auto d = c.describe(codec::bitmap_phase, s); !d) return d.error();
  const result<checkpoint_view> v = parse_checkpoint(in);
  if (!v) return v.error();
  if (status e = detail::check_owner(c, *v, s); !e) return e;
  if (v->world != s.world || v->rank != s.rank)
    return {errc::size_mismatch, "TAGC checkpoint made for another world size or rank (restore_elastic re-slices it)"};
  s.step = v->step;
  s.key = v->key;
  std::memcpy(s.thresholds.data(), v->thresholds, 4 * s.thresholds.size());
  if (!s.residual.empty()) std::memcpy(s.residual.data(), v->residual, 4 * s.residual.size());
  s.at = stage::encode_bitmap;
  return {};
}

// Restores rank s.rank of s.world from the checkpoints of every rank of a run of any world
// size (in any order); see the rule at the top. On error `s` is left as it was.
inline status restore_elastic(const codec& c, std::span<const std::span<const std::byte>> saved, state& s) {
  if (const auto d = c.describe(codec::bitmap_phase, s); !d) return d.error();
  if (saved.empty()) return {errc::invalid_argument, "restore_elastic needs the checkpoints of every saved rank"};
  std::vector<checkpoint_view> by_rank(saved.size());
  std::vector<bool> seen(saved.size(), false);
  for (const std::span<const std::byte> img : saved) {
    const result<checkpoint_view> v = parse_checkpoint(img);
    if (!v) return v.error();
    if (status e = detail::check_owner(c, *v, s); !e) return e;
    if (v->world != saved.size()) return {errc::size_mismatch, "restore_elastic got a number of checkpoints other than their world size"};
    if (seen[v->rank]) return {errc::invalid_argument, "restore_elastic got two checkpoints of the same rank"};
    seen[v->rank] = true;
    by_rank[v->rank] = *v;
  }
  for (const checkpoint_view& v : by_rank)
    if (v.step != by_rank[0].step || v.key != by_rank[0].key)
      return {errc::invalid_argument, "restore_elastic checkpoints differ in step or sampling key"};
  const chunk_range mine = summable::shard_of(s.size, s.world, s.rank);
  std::fill(s.residual.begin(), s.residual.end(), 0.0f);
  for (std::size_t j = mine.offset; j < mine.offset + mine.count; ++j) {
    float sum = by_rank[0].residual_at(j);
    for (std::size_t r = 1; r < by_rank.size(); ++r) sum = sum + by_rank[r].residual_at(j);
    s.residual[j] = sum;
  }
  std::fill(s.thresholds.begin(), s.thresholds.end(), 0.0f);
  s.step = by_rank[0].step;
  s.key = by_rank[0].key;
  s.at = stage::encode_bitmap;
  return {};
}

}  // namespace gradcomp::tagc
