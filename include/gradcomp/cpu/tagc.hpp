#pragma once
// The CPU executor of TAGC's phases (gradcomp/tagc.hpp runs them after its checks): one shard at
// a time, on the calling thread, in the state's workspace. The threshold search is
// cpu::detail::threshold_selector's (fused with x = g + e), the sketch and its peel are sketch/'s host
// functions (a frontier peel, no per-round passes). The rules they share with the per-thread
// form (tagc/flow.hpp and its steps) are the functions of tagc/rules.hpp, sketch/ and
// sparsify/threshold_search.hpp; tests/tagc/flow_test.cpp holds the two to the same bytes.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "../feedback/residual.hpp"
#include "../sketch/count_sketch.hpp"
#include "../tagc/rules.hpp"
#include "../tagc/state.hpp"
#include "threshold_select.hpp"

namespace gradcomp::cpu::detail {

// Byte offsets of the workspace's arrays (8-byte aligned), for a buffer of n elements over
// `world` ranks.
struct tagc_layout {
  std::size_t selector = 0;    // cpu::detail::threshold_selector of one shard
  std::size_t kept = 0;        // u32 kept indices of one shard
  std::size_t shard_bits = 0;  // u32 bitmap of one shard of the union
  std::size_t lanes = 0;       // u32 union positions per lane of one shard
  std::size_t acc = 0;         // fp32 accumulator of one shard's bf16 cells
  std::size_t peel = 0;        // sketch::peel_workspace_bytes of one shard
  std::size_t conveyed = 0;    // fp32: one shard decoded from this rank's own cells
  std::size_t total = 0;

  static tagc_layout of(const tagc::config& c, std::size_t n, std::uint32_t world) {
    const std::size_t s = summable::shard_size(n, world);
    const std::uint32_t r = tagc::max_rows(c, n, world);
    const sketch::geometry g{static_cast<std::uint32_t>(s), c.block, static_cast<std::uint32_t>((s + c.block - 1) / c.block), r};
    tagc_layout l;
    std::size_t at = 0;
    const auto take = [&](std::size_t& field, std::size_t bytes) {
      field = at;
      at += align8(bytes);
    };
    take(l.selector, threshold_selector::workspace_bytes(c.select, s));
    take(l.kept, 4 * sparsify::threshold::kept(c.select, s));
    take(l.shard_bits, 4 * sketch::bitmap_words(s));
    take(l.lanes, 4 * tagc::lanes_of(c, s));
    take(l.acc, c.cells == summable::wire_type::bf16 ? 4 * g.cells() : 0);
    take(l.peel, sketch::peel_workspace_bytes(g, tagc::max_items(c, n, world)));
    take(l.conveyed, 4 * s);
    l.total = at;
    return l;
  }
};

// Copies bits [first, first + count) of `src` to `dst` (bitmap_words(count) words), the bits past
// `count` zero. Precondition: first + count <= 32 * src.size().
inline void copy_bits(std::span<const std::uint32_t> src, std::size_t first, std::size_t count, std::uint32_t* dst) {
  const std::size_t w0 = first / 32, words = sketch::bitmap_words(count);
  const unsigned shift = static_cast<unsigned>(first % 32);
  for (std::size_t w = 0; w < words; ++w) {
    const std::uint64_t lo = src[w0 + w];
    const std::uint64_t hi = shift != 0 && w0 + w + 1 < src.size() ? src[w0 + w + 1] : 0;
    dst[w] = static_cast<std::uint32_t>((lo | hi << 32) >> shift);
  }
  if (words > 0) dst[words - 1] &= sketch::bitmap_tail_mask(count);
}

// The phases' kernels. Arguments are checked by the caller (tagc::codec); data-dependent
// failures (a bad union) come back before anything is written.
class tagc_kernels {
 public:
  explicit tagc_kernels(const tagc::config& c) : cfg_(c) {}

  // Phase 0: x = g + e into the residual, each shard's threshold selection, the kept bitmap.
  void encode_bitmap(std::span<const float> grad, tagc::state& st, std::uint32_t* out) const {
    const tagc_layout l = tagc_layout::of(cfg_, st.size, st.world);
    const bool packed = cfg_.bitmap == tagc::bitmap_mode::sum_safe;
    std::uint32_t* bits = packed ? st.union_bits.data() : out;  // the union's scratch until receive(0)
    std::fill(bits, bits + sketch::bitmap_words(st.size), 0u);
    std::uint32_t* kept = carve<std::uint32_t>(st, l.kept);
    for (std::uint32_t i = 0; i < st.world; ++i) {
      const chunk_range r = summable::shard_of(st.size, st.world, i);
      if (r.count == 0) continue;
      const float* g = grad.data() + r.offset;
      float* e = st.residual.data() + r.offset;
      const auto fb = feedback::residual::config{};
      threshold_selector sel(std::span<std::byte>(st.workspace).subspan(l.selector, l.kept - l.selector), cfg_.select, r.count,
                             st.key, st.step, i, st.thresholds[i]);
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

  // receive(0): the reduced words checked, the union kept, r chosen (tagc::detail::union_rows).
  status receive_bitmap(std::span<const std::uint32_t> words, tagc::state& st) const {
    const tagc_layout l = tagc_layout::of(cfg_, st.size, st.world);
    std::uint32_t* shard_bits = carve<std::uint32_t>(st, l.shard_bits);
    // The per-shard counts, from the received words before they are kept (OR), or from the
    // union that the sum-safe decoder writes after validating every field.
    std::span<const std::uint32_t> uni = words;
    if (cfg_.bitmap == tagc::bitmap_mode::bitwise_or) {
      if (status s = sketch::check_bitmap(words, st.size); !s) return s;
    } else {
      if (status s = sketch::union_from_sum_safe(words, st.size, st.world, st.union_bits); !s) return s;
      uni = st.union_bits;
    }
    const std::span<std::uint32_t> lanes(carve<std::uint32_t>(st, l.lanes), tagc::lanes_of(cfg_, summable::shard_size(st.size, st.world)));
    std::size_t most = 0, fullest = 0;
    for (std::uint32_t i = 0; i < st.world; ++i) {
      const chunk_range r = summable::shard_of(st.size, st.world, i);
      copy_bits(uni, r.offset, r.count, shard_bits);
      const std::span<const std::uint32_t> bm(shard_bits, sketch::bitmap_words(r.count));
      most = std::max(most, sketch::bitmap_popcount(bm));
      if (cfg_.block > 1) fullest = std::max(fullest, sketch::bitmap_fullest_lane(bm, cfg_.block, lanes));
    }
    const std::uint32_t rows =
        tagc::detail::union_rows(cfg_, summable::shard_size(st.size, st.world), tagc::max_items(cfg_, st.size, st.world), most, fullest);
    if (rows == 0) return {errc::count_too_large, "union holds more kept positions in a shard than W ranks can keep"};
    if (cfg_.bitmap == tagc::bitmap_mode::bitwise_or) std::copy(words.begin(), words.end(), st.union_bits.begin());
    st.rows = rows;
    return {};
  }

  // Phase 1: each destination shard's sketch of x, then the residual keeps x minus what this
  // rank's own cells convey (the peel with fallback zero).
  template <class Cell>
  void encode_sketch(tagc::state& st, std::span<Cell> cells) const {
    const tagc_layout l = tagc_layout::of(cfg_, st.size, st.world);
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
      add(st.own, *own);
      for (std::size_t w = 0; w < bm.size(); ++w)
        for (std::uint32_t word = bm[w]; word != 0; word &= word - 1) {
          const std::size_t j = 32 * w + static_cast<std::size_t>(std::countr_zero(word));
          x[j] = feedback::residual::remainder({}, x[j], conveyed[j]);
        }
    }
  }

  // receive(1): the peel decode of the summed cells of every shard (whole) or this rank's.
  template <class Cell>
  void receive_sketch(std::span<const Cell> cells, summable::received kind, tagc::state& st, std::span<float> out) const {
    const bool whole = kind == summable::received::whole;
    const tagc_layout l = tagc_layout::of(cfg_, st.size, st.world);
    std::uint32_t* shard_bits = carve<std::uint32_t>(st, l.shard_bits);
    const std::size_t per = std::size_t{st.rows} * cfg_.block;
    st.stats = {};
    for (std::uint32_t i = whole ? 0 : st.rank; i < (whole ? st.world : st.rank + 1); ++i) {
      const chunk_range r = summable::shard_of(st.size, st.world, i);
      copy_bits(st.union_bits, r.offset, r.count, shard_bits);
      const auto d = sketch::decode<Cell>(shard_geometry(st, r.count), std::span<const std::uint32_t>(shard_bits, sketch::bitmap_words(r.count)),
                                          cells.subspan(whole ? i * per : 0, per),
                                          std::span<std::byte>(st.workspace).subspan(l.peel, l.conveyed - l.peel),
                                          out.subspan(whole ? r.offset : 0, r.count), {sketch::fallback::zero, {}, cfg_.max_rounds});
      add(st.stats, *d);  // (the sizes were checked by the caller)
    }
  }

 private:
  template <class T>
  static T* carve(tagc::state& st, std::size_t offset) {
    return reinterpret_cast<T*>(st.workspace.data() + offset);
  }
  static void add(sketch::peel_stats& total, const sketch::peel_stats& s) {
    total.items += s.items;
    total.peeled += s.peeled;
    total.rounds = std::max(total.rounds, s.rounds);
  }
  sketch::geometry shard_geometry(const tagc::state& st, std::size_t count) const {
    return sketch::geometry{static_cast<std::uint32_t>(count), cfg_.block, static_cast<std::uint32_t>((count + cfg_.block - 1) / cfg_.block),
                            st.rows};
  }

  tagc::config cfg_;
};

}  // namespace gradcomp::cpu::detail
