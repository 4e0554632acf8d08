#pragma once
// Deterministic, round-synchronous peeling of a count sketch (docs/tagc.md, "Algorithm").
//
// Items are the kept positions of the region (set bits of the union bitmap). Round k: an
// unpeeled item peels if one of its distinct cells holds exactly one unpeeled item at the
// start of the round; its value is sign * residual of the first such cell in j order. Only
// then does every cell subtract sign * value of its items peeled in round k, in ascending
// element order, and drop them from its count. A round that peels nothing ends the schedule.
// Which items peel, and when, depends on the bitmap and the geometry only, so the structural
// peel (no values) and the value peel share peel_lane() below.
//
// The arithmetic a GPU needs is in the GRADCOMP_HD functions: a kernel over items
// (singleton_cell, signed_residual) and one over cells walking their items in ascending element
// order (subtract_item) per round give the same bits as the host loop. The host visits only
// the cells whose count reached 1 (the frontier) and finds a cell's last item as the XOR of
// its unpeeled item numbers, without per-cell item lists. Lane t of a block only ever meets
// lane t of other blocks, so the B lanes peel independently (the host runs them one after
// another, each in cache; a GPU may give each lane its own thread block).

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "../core/numeric.hpp"
#include "bitmap.hpp"
#include "geometry.hpp"

namespace gradcomp::sketch {

// Per-item flags: bits 0-1 the number of distinct cells, bit 2 + k the sign of the k-th.
GRADCOMP_HD constexpr std::uint8_t item_info(const block_cells& m) {
  return static_cast<std::uint8_t>(m.distinct | (m.neg << 2));
}
GRADCOMP_HD constexpr std::uint32_t info_distinct(std::uint8_t info) { return info & 3u; }
GRADCOMP_HD constexpr bool info_neg(std::uint8_t info, std::uint32_t k) { return ((info >> (2 + k)) & 1u) != 0; }

// The first of an item's distinct cells, in j order, whose count of unpeeled items is 1 at the
// start of the round; `distinct` when there is none (the item does not peel this round).
// live: the cells' counts, as a pointer or array (live[c]) or a functor (live(c)).
template <class Live>
GRADCOMP_HD inline std::uint32_t singleton_cell(const Live& live, const std::uint32_t* cell, std::uint32_t distinct) {
  for (std::uint32_t k = 0; k < distinct; ++k) {
    std::uint32_t n = 0;
    if constexpr (std::is_pointer_v<Live> || std::is_array_v<Live>) {
      n = live[cell[k]];
    } else {
      n = live(cell[k]);
    }
    if (n == 1) return k;
  }
  return distinct;
}

// Comparisons written out so that NaN handling is the same on every backend.
GRADCOMP_HD inline float min_of(float a, float b) { return b < a ? b : a; }
GRADCOMP_HD inline float max_of(float a, float b) { return a < b ? b : a; }

// A cell's residual as the peel starts: what the transport delivered, NaN canonical.
template <class Cell>
GRADCOMP_HD inline float load_cell(Cell c) {
  return canonical_nan(to_float(c));
}

// sign_k * residual of an item's k-th distinct cell: the item's value when it peels through that
// cell, and the input of its fallback estimate when it never peels.
GRADCOMP_HD inline float signed_residual(std::uint8_t info, std::uint32_t k, float residual) {
  return apply_sign(info_neg(info, k), residual);
}

// The estimate of an item that never peels, from its signed residual cells (sign * residual):
// the median of 3, the mean of 2 computed as (a + b) * 0.5, or the single one.
GRADCOMP_HD inline float fallback_estimate(const float* signed_cells, std::uint32_t distinct) {
  const float a = signed_cells[0];
  if (distinct == 1) return a;
  const float b = signed_cells[1];
  if (distinct == 2) return canonical_nan((a + b) * 0.5f);
  const float c = signed_cells[2];
  return max_of(min_of(a, b), min_of(max_of(a, b), c));
}

struct peel_stats {
  std::uint32_t items = 0;   // kept positions of the region (popcount of the bitmap)
  std::uint32_t peeled = 0;  // items recovered by peeling (exact up to fp32 rounding)
  std::uint32_t rounds = 0;  // rounds that peeled at least one item
};

namespace detail {

constexpr std::size_t align8(std::size_t n) { return (n + 7) / 8 * 8; }

// Calls f(e, block, lane, map) for every set bit e, in ascending order, of the words
// word(0), ..., word(nwords - 1), which are the region's bitmap words from `first_word` on; the
// map of a block is computed once (skipped when hashed is false).
template <bool hashed, class Words, class F>
void for_each_item(const geometry& g, std::size_t nwords, const Words& word_at, F&& f, std::size_t first_word = 0) {
  std::uint32_t cur = 0xffffffffu;
  std::uint64_t block_end = 0;
  block_cells m;
  for (std::size_t w = 0; w < nwords; ++w) {
    for (std::uint32_t word = word_at(w); word != 0; word &= word - 1) {
      const auto e = static_cast<std::uint32_t>(32 * (first_word + w) + static_cast<std::uint32_t>(std::countr_zero(word)));
      if (cur == 0xffffffffu || e >= block_end) {
        cur = e / g.block;
        block_end = (std::uint64_t{cur} + 1) * g.block;
        if constexpr (hashed) m = map_block(cur, g.rows);
      }
      f(e, cur, e - cur * g.block, m);
    }
  }
}

template <bool hashed, class F>
void for_each_item(const geometry& g, std::span<const std::uint32_t> words, F&& f, std::size_t first_word = 0) {
  for_each_item<hashed>(g, words.size(), [words](std::size_t w) { return words[w]; }, f, first_word);
}

// Per cell: its count of unpeeled items, the XOR of their item numbers (when the count is 1,
// that is the last item: the host needs no per-cell item lists), its residual.
struct cell_state {
  std::uint32_t live;
  std::uint32_t items_xor;
  float residual;
};

// singleton_cell's view of the counts (a functor: nvcc does not let a host lambda into an HD
// template).
struct cell_count {
  const cell_state* cs;
  GRADCOMP_HD std::uint32_t operator()(std::uint32_t c) const { return cs[c].live; }
};

// The peel's workspace, carved from one caller-owned byte span. Lanes never share a cell, so
// the sketch is B independent hypergraphs: items are numbered lane by lane (ascending element
// order within a lane) and cells lane-major (lane * r + row), so that each lane's peel works on
// contiguous arrays that stay in cache. Lane t owns items [lane_start[t], lane_start[t + 1])
// and cells [t r, (t + 1) r).
struct peel_arrays {
  std::uint32_t* lane_start = nullptr;  // [B + 1]
  std::uint32_t* lane_next = nullptr;   // [B] next item of each lane while walking the bitmap
  std::uint32_t* elem = nullptr;        // [items] element of item i
  std::uint32_t* icell = nullptr;       // [3 items] lane-major distinct cells of item i, j order
  std::uint8_t* info = nullptr;         // [items] item_info()
  std::uint8_t* state = nullptr;        // [items] 0 unpeeled, 1 peeled, 2 peeled in this round
  float* value = nullptr;               // [items] peeled value
  std::uint32_t* order = nullptr;       // [items] items in peel order (ascending within a round)
  std::uint32_t* marks = nullptr;       // [items / 32 + B + 1] items chosen in the round, lane t's from word lane_start[t] / 32 + t
  cell_state* cell = nullptr;           // [cells]
  std::uint32_t* queue = nullptr;       // [cells] cells in the order their count reached 1
};

// Bytes of the layout; with a base pointer, also points `a` into it.
inline std::size_t peel_layout(const geometry& g, std::size_t items, std::byte* base, peel_arrays& a) {
  std::size_t off = 0;
  const auto take = [&](auto*& p, std::size_t n) {
    using T = std::remove_reference_t<decltype(*p)>;
    if (base != nullptr) p = reinterpret_cast<T*>(base + off);
    off += align8(n * sizeof(T));
  };
  take(a.lane_start, std::size_t{g.block} + 1);
  take(a.lane_next, g.block);
  take(a.elem, items);
  take(a.icell, 3 * items);
  take(a.info, items);
  take(a.state, items);
  take(a.value, items);
  take(a.order, items);
  take(a.marks, items / 32 + g.block + 1);
  take(a.cell, g.cells());
  take(a.queue, g.cells());
  return off;
}

// Items in lane-major order with their lane-major cells. Precondition: validated bitmap and
// geometry, workspace large enough.
inline std::uint32_t peel_prepare(const geometry& g, std::span<const std::uint32_t> bitmap, const peel_arrays& a) {
  std::fill(a.lane_start, a.lane_start + g.block + 1, 0u);
  for_each_item<false>(g, bitmap, [&](std::uint32_t, std::uint32_t, std::uint32_t lane, const block_cells&) {
    ++a.lane_start[lane + 1];
  });
  for (std::uint32_t t = 0; t < g.block; ++t) a.lane_start[t + 1] += a.lane_start[t];
  std::copy(a.lane_start, a.lane_start + g.block, a.lane_next);
  for_each_item<true>(g, bitmap, [&](std::uint32_t e, std::uint32_t, std::uint32_t lane, const block_cells& m) {
    const std::uint32_t i = a.lane_next[lane]++;
    a.elem[i] = e;
    a.info[i] = item_info(m);
    a.state[i] = 0;
    for (std::uint32_t k = 0; k < m.distinct; ++k) a.icell[3 * i + k] = lane * g.rows + m.row[k];
  });
  return a.lane_start[g.block];
}

// The schedule of lane t (independent of every other lane). With values, the cells' residuals
// hold the sketch and a.value receives the peeled items' values. At most max_rounds rounds
// (0: until a round peels nothing).
inline peel_stats peel_lane(const geometry& g, std::uint32_t t, bool values, const peel_arrays& a,
                            std::uint32_t max_rounds) {
  const std::size_t c0 = std::size_t{t} * g.rows, c1 = c0 + g.rows;
  const std::uint32_t i0 = a.lane_start[t], i1 = a.lane_start[t + 1];
  cell_state* cs = a.cell;
  for (std::size_t c = c0; c < c1; ++c) {
    cs[c].live = 0;
    cs[c].items_xor = 0;
  }
  for (std::uint32_t i = i0; i < i1; ++i)
    for (std::uint32_t k = 0; k < info_distinct(a.info[i]); ++k) {
      cell_state& c = cs[a.icell[3 * i + k]];
      ++c.live;
      c.items_xor ^= i;
    }
  // A cell enters the queue once at most (its count reaches 1 once), so the lane's queue fits
  // its own cells' slots.
  std::size_t head = c0, tail = c0, done = i0;
  for (std::size_t c = c0; c < c1; ++c)
    if (cs[c].live == 1) a.queue[tail++] = static_cast<std::uint32_t>(c);
  std::uint32_t* marks = a.marks + i0 / 32 + t;
  std::fill(marks, marks + (i1 - i0 + 31) / 32, 0u);
  const cell_count live{cs};
  peel_stats st{i1 - i0, 0, 0};
  while (head < tail && (max_rounds == 0 || st.rounds < max_rounds)) {
    // Choose: reads the counts and residuals as they were at the start of the round.
    std::uint32_t lo = 0xffffffffu, hi = 0;  // marked words
    for (const std::size_t end = tail; head < end; ++head) {
      const cell_state& c = cs[a.queue[head]];
      if (c.live != 1) continue;  // reached 1, then 0 within the same round
      const std::uint32_t i = c.items_xor;
      if (a.state[i] == 2) continue;  // already chosen through another cell this round
      a.state[i] = 2;
      const std::uint32_t m = (i - i0) / 32;
      marks[m] |= 1u << ((i - i0) % 32);
      lo = std::min(lo, m);
      hi = std::max(hi, m);
      if (values) {
        const std::uint8_t info = a.info[i];
        const std::uint32_t k = singleton_cell(live, a.icell + 3 * i, info_distinct(info));
        a.value[i] = signed_residual(info, k, cs[a.icell[3 * i + k]].residual);
      }
    }
    if (lo > hi) break;
    const std::size_t first = done;
    for (std::uint32_t m = lo; m <= hi; ++m) {  // the round's items in ascending order
      for (std::uint32_t word = marks[m]; word != 0; word &= word - 1)
        a.order[done++] = i0 + 32 * m + static_cast<std::uint32_t>(std::countr_zero(word));
      marks[m] = 0;
    }
    // Subtract: ascending items, so every cell sees its items in ascending order.
    for (std::size_t r = first; r < done; ++r) {
      const std::uint32_t i = a.order[r];
      const std::uint8_t info = a.info[i];
      for (std::uint32_t k = 0; k < info_distinct(info); ++k) {
        const std::uint32_t ci = a.icell[3 * i + k];
        cell_state& c = cs[ci];
        if (values) c.residual = subtract_item(c.residual, info_neg(info, k), a.value[i]);
        c.items_xor ^= i;
        if (--c.live == 1) a.queue[tail++] = ci;
      }
      a.state[i] = 1;
    }
    ++st.rounds;
  }
  st.peeled = static_cast<std::uint32_t>(done - i0);
  return st;
}

// All lanes; the rounds of the whole region are those of its slowest lane.
inline peel_stats peel_run(const geometry& g, bool values, const peel_arrays& a, std::uint32_t max_rounds) {
  peel_stats total;
  for (std::uint32_t t = 0; t < g.block; ++t) {
    const peel_stats st = peel_lane(g, t, values, a, max_rounds);
    total.items += st.items;
    total.peeled += st.peeled;
    total.rounds = std::max(total.rounds, st.rounds);
  }
  return total;
}

// Checks shared by the structural peel and the decode.
inline result<std::size_t> check_peel_inputs(const geometry& g, std::span<const std::uint32_t> bitmap,
                                             std::span<std::byte> workspace) {
  if (status s = check(g); !s) return s;
  if (status s = check_bitmap(bitmap, g.count); !s) return s;
  if (reinterpret_cast<std::uintptr_t>(workspace.data()) % 8 != 0)
    return status{errc::invalid_argument, "peel workspace must be 8-byte aligned"};
  const std::size_t items = bitmap_popcount(bitmap);
  peel_arrays none;
  if (workspace.size() < peel_layout(g, items, nullptr, none))
    return status{errc::buffer_too_small, "peel workspace smaller than peel_workspace_bytes(geometry, items)"};
  return items;
}

}  // namespace detail

// Workspace of structural_peel() and decode() for a bitmap with `items` set bits.
inline std::size_t peel_workspace_bytes(const geometry& g, std::size_t items) {
  detail::peel_arrays none;
  return detail::peel_layout(g, items, nullptr, none);
}

// Which kept positions peel, from the bitmap and the geometry alone: `peelable` (a bitmap of
// the region) gets the positions the value decode will recover whatever the cells hold (with
// the same max_rounds: 0 peels until a round peels nothing).
inline result<peel_stats> structural_peel(const geometry& g, std::span<const std::uint32_t> bitmap,
                                          std::span<std::byte> workspace, std::span<std::uint32_t> peelable,
                                          std::uint32_t max_rounds = 0) {
  const auto items = detail::check_peel_inputs(g, bitmap, workspace);
  if (!items) return items.error();
  if (peelable.size() != bitmap.size()) return status{errc::size_mismatch, "peelable bitmap differs from the bitmap"};
  detail::peel_arrays a;
  detail::peel_layout(g, *items, workspace.data(), a);
  const std::uint32_t n = detail::peel_prepare(g, bitmap, a);
  const peel_stats st = detail::peel_run(g, false, a, max_rounds);
  std::fill(peelable.begin(), peelable.end(), 0u);
  for (std::uint32_t i = 0; i < n; ++i)
    if (a.state[i] == 1) peelable[a.elem[i] / 32] |= 1u << (a.elem[i] % 32);
  return st;
}

}  // namespace gradcomp::sketch
