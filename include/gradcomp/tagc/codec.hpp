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

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/bits.hpp"
#include "../feedback/residual.hpp"
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
    if (world == 0 || rank >= world) return {errc::invalid_argument, "TAGC state needs world >= 1 and rank < world"};
    if (summable::shard_size(n, world) > 0xffffffffu) return {errc::count_too_large, "TAGC shards hold at most 2^32 - 1 elements"};
    if (std::uint64_t{max_rows(cfg_, n, world)} * cfg_.block > 0xffffffffu)
      return {errc::count_too_large, "TAGC sketch cells do not fit 32-bit cell indices"};
    st = state{};
    st.size = n;
    st.world = world;
    st.rank = rank;
    st.key = cfg_.seed;
    st.residual.assign(n, 0.0f);
    st.thresholds.assign(world, 0.0f);
    st.union_bits.assign(sketch::bitmap_words(n), 0u);
    st.workspace.resize(layout_for(cfg_, n, world).total);
    return {};
  }

  result<summable::phase> describe(std::size_t k, const state& st) const {
    if (status s = check_state(st); !s) return s;
    if (k == bitmap_phase) {
      if (cfg_.bitmap == bitmap_mode::bitwise_or)
        return summable::phase{"bitmap", summable::wire_type::u32, summable::reduction::bitwise_or,
                               sketch::bitmap_words(st.size), st.world, false, 0};
      const auto l = sketch::sum_safe_layout::make(st.world);
      return summable::phase{"bitmap", summable::wire_type::u32, summable::reduction::sum, l.words(st.size), st.world, false,
                             l.width};
    }
    if (k != sketch_phase) return status{errc::invalid_argument, "TAGC has phases 0 (bitmap) and 1 (sketch)"};
    if (st.at < stage::encode_sketch)
      return status{errc::invalid_argument, "TAGC sketch size is known once the reduced bitmap is received"};
    return summable::phase{"sketch", cfg_.cells, summable::reduction::sum,
                           std::size_t{st.world} * st.rows * cfg_.block, st.world, true, 0};
  }

  status encode(std::size_t k, std::span<const float> grad, state& st, std::span<std::byte> out) const {
    const result<summable::phase> p = describe(k, st);
    if (!p) return p.error();
    if (st.at != (k == bitmap_phase ? stage::encode_bitmap : stage::encode_sketch))
      return {errc::invalid_argument, "TAGC phases out of order: encode(0), receive(0), encode(1), receive(1), finish_step"};
    if (out.size() != p->bytes()) return {errc::size_mismatch, "phase buffer differs from describe().bytes()"};
    if (status s = summable::check_alignment(*p, out.data()); !s) return s;
    if (k == bitmap_phase) {
      if (grad.size() != st.size) return {errc::size_mismatch, "gradient differs from the state's size"};
      encode_bitmap(grad, st, reinterpret_cast<std::uint32_t*>(out.data()));
      st.at = stage::receive_bitmap;
      return {};
    }
    if (cfg_.cells == summable::wire_type::f32) {
      encode_sketch(st, std::span<float>(reinterpret_cast<float*>(out.data()), p->count));
    } else {
      encode_sketch(st, std::span<bf16_t>(reinterpret_cast<bf16_t*>(out.data()), p->count));
    }
    st.at = stage::receive_sketch;
    return {};
  }

  // receive(0): `in` is the reduced bitmap (out unused). receive(1): `in` is the reduced sketch,
  // whole (out: n values) or this rank's shard (out: its shard_of() range).
  status receive(std::size_t k, state& st, std::span<const std::byte> in, std::span<float> out) const {
    const result<summable::phase> p = describe(k, st);
    if (!p) return p.error();
    if (st.at != (k == bitmap_phase ? stage::receive_bitmap : stage::receive_sketch))
      return {errc::invalid_argument, "TAGC phases out of order: encode(0), receive(0), encode(1), receive(1), finish_step"};
    const result<summable::received> got = summable::classify(*p, in.size());
    if (!got) return got.error();
    if (status s = summable::check_alignment(*p, in.data()); !s) return s;
    if (k == bitmap_phase) {
      const std::span<const std::uint32_t> words(reinterpret_cast<const std::uint32_t*>(in.data()), p->count);
      return receive_bitmap(words, st);
    }
    if (cfg_.cells == summable::wire_type::f32)
      return receive_sketch(std::span<const float>(reinterpret_cast<const float*>(in.data()), in.size() / 4), *got, st, out);
    return receive_sketch(std::span<const bf16_t>(reinterpret_cast<const bf16_t*>(in.data()), in.size() / 2), *got, st, out);
  }

  // The largest buffer any phase of a step can need (send: whole; a reduce-scatter receives
  // 1 / W of the sketch phase), for buffers allocated once.
  std::size_t max_phase_bytes(const state& st) const {
    const result<summable::phase> bits = describe(bitmap_phase, st);
    if (!bits) return 0;
    const std::size_t cells = std::size_t{st.world} * max_rows(cfg_, st.size, st.world) * cfg_.block;
    return std::max(bits->bytes(), cells * summable::wire_bytes(cfg_.cells));
  }

  void finish_step(state& st) const {
    ++st.step;
    st.at = stage::encode_bitmap;
  }

 private:
  status check_state(const state& st) const {
    if (status s = validate(); !s) return s;
    if (st.world == 0 || st.rank >= st.world) return {errc::invalid_argument, "TAGC state needs world >= 1 and rank < world"};
    if (st.residual.size() != st.size || st.thresholds.size() != st.world ||
        st.union_bits.size() != sketch::bitmap_words(st.size) || st.workspace.size() < layout_for(cfg_, st.size, st.world).total)
      return {errc::size_mismatch, "TAGC state not sized by this codec's make_state"};
    if (reinterpret_cast<std::uintptr_t>(st.workspace.data()) % 8 != 0)
      return {errc::invalid_argument, "TAGC workspace must be 8-byte aligned"};
    return {};
  }

  template <class T>
  static T* carve(state& st, std::size_t offset) {
    return reinterpret_cast<T*>(st.workspace.data() + offset);
  }

  sketch::geometry shard_geometry(const state& st, std::size_t count) const {
    return sketch::geometry{static_cast<std::uint32_t>(count), cfg_.block,
                            static_cast<std::uint32_t>((count + cfg_.block - 1) / cfg_.block), st.rows};
  }

  // Phase 0: x = g + e into the residual, each shard's threshold selection, the kept bitmap.
  void encode_bitmap(std::span<const float> grad, state& st, std::uint32_t* out) const {
    const workspace_layout l = layout_for(cfg_, st.size, st.world);
    const bool packed = cfg_.bitmap == bitmap_mode::sum_safe;
    std::uint32_t* bits = packed ? st.union_bits.data() : out;  // the union's scratch until receive(0)
    std::fill(bits, bits + sketch::bitmap_words(st.size), 0u);
    std::uint32_t* kept = carve<std::uint32_t>(st, l.kept);
    for (std::uint32_t i = 0; i < st.world; ++i) {
      const chunk_range r = summable::shard_of(st.size, st.world, i);
      if (r.count == 0) continue;
      const float* g = grad.data() + r.offset;
      float* e = st.residual.data() + r.offset;
      const auto fb = feedback::residual::config{};
      cpu::threshold_selector sel(std::span<std::byte>(st.workspace).subspan(l.selector, l.kept - l.selector), cfg_.select,
                                  r.count, st.key, st.step, i, st.thresholds[i]);
      const std::size_t n = sel.select([&](std::size_t j) { return abs_key(feedback::residual::combine(fb, g[j], e[j])); },
                                       [&](std::size_t j) { return abs_key(e[j] = feedback::residual::combine(fb, g[j], e[j])); },
                                       [&](std::size_t j) { return abs_key(e[j]); }, kept);
      st.thresholds[i] = sel.threshold();
      for (std::size_t m = 0; m < n; ++m) {
        const std::size_t j = r.offset + kept[m];
        bits[j / 32] |= 1u << (j % 32);
      }
    }
    if (packed) {
      const auto words = sketch::sum_safe_layout::make(st.world).words(st.size);
      (void)sketch::to_sum_safe(st.union_bits, st.size, st.world, std::span<std::uint32_t>(out, words));
    }
  }

  status receive_bitmap(std::span<const std::uint32_t> words, state& st) const {
    const workspace_layout l = layout_for(cfg_, st.size, st.world);
    std::uint32_t* shard_bits = carve<std::uint32_t>(st, l.shard_bits);
    const std::size_t cap = max_items(cfg_, st.size, st.world);
    // The per-shard counts, from the received words before they are kept (OR), or from the
    // union that the sum-safe decoder writes after validating every field.
    std::span<const std::uint32_t> uni = words;
    if (cfg_.bitmap == bitmap_mode::bitwise_or) {
      if (status s = sketch::check_bitmap(words, st.size); !s) return s;
    } else {
      if (status s = sketch::union_from_sum_safe(words, st.size, st.world, st.union_bits); !s) return s;
      uni = st.union_bits;
    }
    const std::span<std::uint32_t> lanes(carve<std::uint32_t>(st, l.lanes), lanes_of(cfg_, summable::shard_size(st.size, st.world)));
    std::size_t fullest = 0;
    for (std::uint32_t i = 0; i < st.world; ++i) {
      const chunk_range r = summable::shard_of(st.size, st.world, i);
      copy_bits(uni, r.offset, r.count, shard_bits);
      const std::span<const std::uint32_t> bm(shard_bits, sketch::bitmap_words(r.count));
      const std::size_t items = sketch::bitmap_popcount(bm);
      if (items > cap) return {errc::count_too_large, "union holds more kept positions in a shard than W ranks can keep"};
      fullest = std::max(fullest, cfg_.block > 1 ? sketch::bitmap_fullest_lane(bm, cfg_.block, lanes) : items);
    }
    if (cfg_.bitmap == bitmap_mode::bitwise_or) std::copy(words.begin(), words.end(), st.union_bits.begin());
    st.rows = step_rows(cfg_, st.size, st.world, fullest);
    st.at = stage::encode_sketch;
    return {};
  }

  // Phase 1: each destination shard's sketch of x, then the residual keeps x minus what this
  // rank's own cells convey.
  template <class Cell>
  void encode_sketch(state& st, std::span<Cell> cells) const {
    const workspace_layout l = layout_for(cfg_, st.size, st.world);
    std::uint32_t* shard_bits = carve<std::uint32_t>(st, l.shard_bits);
    float* conveyed = carve<float>(st, l.conveyed);
    const std::size_t per = std::size_t{st.rows} * cfg_.block;
    st.own = {};
    for (std::uint32_t i = 0; i < st.world; ++i) {
      const chunk_range r = summable::shard_of(st.size, st.world, i);
      const sketch::geometry g = shard_geometry(st, r.count);
      const std::span<const std::uint32_t> bm(shard_bits, sketch::bitmap_words(r.count));
      copy_bits(st.union_bits, r.offset, r.count, shard_bits);
      const std::span<float> x(st.residual.data() + r.offset, r.count);
      const std::span<Cell> mine = cells.subspan(i * per, per);
      (void)sketch::encode<Cell>(g, x, bm, {}, std::span<std::byte>(st.workspace).subspan(l.acc, l.peel - l.acc), mine);
      const auto own = sketch::decode<Cell>(g, bm, std::span<const Cell>(mine), std::span<std::byte>(st.workspace).subspan(l.peel, l.conveyed - l.peel),
                                            std::span<float>(conveyed, r.count), {sketch::fallback::zero, {}, cfg_.max_rounds});
      st.own.items += own->items;
      st.own.peeled += own->peeled;
      st.own.rounds = std::max(st.own.rounds, own->rounds);
      for (std::size_t w = 0; w < bm.size(); ++w)
        for (std::uint32_t word = bm[w]; word != 0; word &= word - 1) {
          const std::size_t j = 32 * w + static_cast<std::size_t>(std::countr_zero(word));
          x[j] = feedback::residual::remainder({}, x[j], conveyed[j]);
        }
    }
  }

  template <class Cell>
  status receive_sketch(std::span<const Cell> cells, summable::received got, state& st, std::span<float> out) const {
    const bool whole = got == summable::received::whole;
    if (out.size() != (whole ? st.size : summable::shard_of(st.size, st.world, st.rank).count))
      return {errc::size_mismatch, "output differs from the received range"};
    const workspace_layout l = layout_for(cfg_, st.size, st.world);
    std::uint32_t* shard_bits = carve<std::uint32_t>(st, l.shard_bits);
    const std::size_t per = std::size_t{st.rows} * cfg_.block;
    sketch::peel_stats total{};
    for (std::uint32_t i = whole ? 0 : st.rank; i < (whole ? st.world : st.rank + 1); ++i) {
      const chunk_range r = summable::shard_of(st.size, st.world, i);
      const sketch::geometry g = shard_geometry(st, r.count);
      copy_bits(st.union_bits, r.offset, r.count, shard_bits);
      const auto d = sketch::decode<Cell>(g, std::span<const std::uint32_t>(shard_bits, sketch::bitmap_words(r.count)),
                                          cells.subspan(whole ? i * per : 0, per),
                                          std::span<std::byte>(st.workspace).subspan(l.peel, l.conveyed - l.peel),
                                          out.subspan(whole ? r.offset : 0, r.count), {sketch::fallback::zero, {}, cfg_.max_rounds});
      if (!d) return d.error();  // (sizes were checked above: not reached)
      total.items += d->items;
      total.peeled += d->peeled;
      total.rounds = std::max(total.rounds, d->rounds);
    }
    st.stats = total;
    st.at = stage::done;
    return {};
  }

  config cfg_{};
};

}  // namespace gradcomp::tagc
