#pragma once
// TAGC's union and sketch phase as per-thread steps (see tagc/bitmap_steps.hpp): receive(0)
// (the reduced bitmap checked, the union per shard, r, the cell index), the cells of every
// destination shard from that index, the peel of the rank's own cells with the residual
// update (encode(1)), and the peel of the received cells (receive(1)). The peel is
// sketch/steps.hpp's (choose over the items, subtract over the cells, per round) on a
// scope: every shard at once, or the rank's shard alone (its items and cells are contiguous).
//
// Cell buffers: shard i's r B cells start at i * stride, stride = r B (the packed layout, the
// host codec's bytes) or R B with R = max_rows (the padded layout: the pad cells are zero, and
// a reduce-scatter needs no count from the device).

#include "bitmap_steps.hpp"

namespace gradcomp::tagc::detail {

// --- receive(0): the union checked, kept per shard, counted, r chosen, the cell index built.

struct receive_start {  // 1 thread
  context c;
  GRADCOMP_HD void operator()(std::uint64_t) const { *c.w.first_bad = ~counter{0}; }
};

// 1-bit union: no bit at or past n.
struct check_tail {  // 1 thread
  context c;
  const std::uint32_t* in;
  GRADCOMP_HD void operator()(std::uint64_t) const {
    if (!sketch::tail_is_clear(in, c.n)) fail(c.st.report, errc::index_out_of_range);
  }
};

// Sum-safe sums: every word checked, the first bad one reported (as the host does).
struct check_sums {
  context c;
  const std::uint32_t* in;
  sketch::sum_safe_layout l;
  GRADCOMP_HD void operator()(std::uint64_t w) const {
    const errc e = sketch::check_sum_safe_word(in[w], w, c.n, l);
    if (e != errc::ok) atomic_min(c.w.first_bad, 16 * counter{w} + static_cast<counter>(e));
  }
};

struct settle_sums {  // 1 thread
  context c;
  GRADCOMP_HD void operator()(std::uint64_t) const {
    if (*c.w.first_bad != ~counter{0}) fail(c.st.report, static_cast<errc>(*c.w.first_bad % 16));
  }
};

// Aligned word v from the received words (1-bit) or sums (sum-safe).
struct aligned_words {
  context c;
  const std::uint32_t* in;
  bool sum_safe;
  sketch::sum_safe_layout l;
  GRADCOMP_HD void operator()(std::uint64_t v) const {
    const auto i = static_cast<std::uint32_t>(v / c.wps);
    const std::uint64_t lw = v - i * c.wps, count = c.st.plan[i].select.count, first = 32 * lw;
    std::uint32_t word = 0;
    if (first < count) {
      const std::uint64_t n = count - first < 32 ? count - first : 32, at = c.st.plan[i].offset + first;
      if (sum_safe) {
        for (std::uint32_t t = 0; t < n; ++t) word |= (l.field(in, at + t) != 0 ? 1u : 0u) << t;
      } else {
        const std::uint64_t w0 = at / 32, words = sketch::bitmap_words(c.n);
        const auto shift = static_cast<unsigned>(at % 32);
        const std::uint64_t hi = shift != 0 && w0 + 1 < words ? in[w0 + 1] : 0;
        word = static_cast<std::uint32_t>((std::uint64_t{in[w0]} | hi << 32) >> shift);
        if (n < 32) word &= (1u << n) - 1u;
      }
    }
    c.w.aligned[v] = word;
  }
};

struct word_popcounts {
  context c;
  GRADCOMP_HD void operator()(std::uint64_t v) const { c.w.word_items[v] = v < c.aligned ? sketch::popcount32(c.w.aligned[v]) : 0u; }
};

// Union positions per lane of each shard (block > 1): a thread per aligned bit.
struct lane_tally {
  context c;
  GRADCOMP_HD tally operator()(std::uint64_t p) const {
    const std::uint64_t v = p / 32;
    if (((c.w.aligned[v] >> (p % 32)) & 1u) == 0) return {no_segment, 0};
    const auto i = static_cast<std::uint32_t>(v / c.wps);
    const std::uint64_t local = p - std::uint64_t{i} * c.wps * 32;
    return {static_cast<std::uint32_t>(i * c.lanes + local % c.block), 1};
  }
};

struct fullest_lane {  // a thread per lane counter
  context c;
  GRADCOMP_HD void operator()(std::uint64_t k) const {
    atomic_max(c.w.lane_items + std::uint64_t{c.world} * c.lanes, c.w.lane_items[k]);
  }
};

// 1 thread, after the exclusive scan of the popcounts (and the lane counts when block > 1):
// r from the union (union_rows: each shard within its capacity, the fullest lane).
struct settle_union {
  context c;
  GRADCOMP_HD void operator()(std::uint64_t) const {
    std::uint64_t most = 0, total = 0;
    for (std::uint32_t i = 0; i < c.world; ++i) {
      const std::uint64_t items = c.w.word_items[(i + 1) * c.wps] - c.w.word_items[i * c.wps];
      most = items > most ? items : most;
      total += items;
    }
    const std::uint32_t rows = tagc::detail::union_rows(c.cfg, c.n == 0 ? 0 : c.shard_size, c.max_items, most,
                                                        c.block > 1 ? c.w.lane_items[std::uint64_t{c.world} * c.lanes] : 0);
    if (rows == 0) {
      fail(c.st.report, errc::count_too_large);
      return;
    }
    step_report& r = *c.st.report;
    r.rows = rows;
    r.sketch_cells = std::uint64_t{c.world} * r.rows * c.block;
    r.union_items = total;
  }
};

// Sort slots: the sentinel `cells` everywhere, then each item's distinct cells (write_items).
struct fill_slots {
  context c;
  GRADCOMP_HD void operator()(std::uint64_t p) const {
    c.w.keys_in[p] = static_cast<std::uint32_t>(c.cells());
    c.w.vals_in[p] = 0;
  }
};

struct write_items {
  context c;
  GRADCOMP_HD void operator()(std::uint64_t v) const {
    const auto i = static_cast<std::uint32_t>(v / c.wps);
    const auto first = static_cast<std::uint32_t>(32 * (v - i * c.wps));
    const std::uint32_t rows = c.st.report->rows, base = i * rows * c.block, sentinel = static_cast<std::uint32_t>(c.cells());
    std::uint32_t item = c.w.word_items[v], block = 0xffffffffu;
    sketch::block_cells m;
    for (std::uint32_t word = c.w.aligned[v]; word != 0; word &= word - 1, ++item) {
      const std::uint32_t e = first + sketch::detail::lowest_bit(word), b = e / c.block, lane = e - b * c.block;
      if (b != block) {
        m = sketch::map_block(b, rows);
        block = b;
      }
      c.w.elem[item] = e;
      c.w.info[item] = sketch::item_info(m);
      for (std::uint32_t k = 0; k < 3; ++k) {
        c.w.keys_in[3 * item + k] = k < m.distinct ? base + sketch::cell_index(m, k, lane, c.block) : sentinel;
        c.w.vals_in[3 * item + k] = 4 * item + k;
      }
    }
  }
};

struct bounds {
  context c;
  GRADCOMP_HD void operator()(std::uint64_t p) const {
    sketch::detail::cell_bounds(p, 3 * c.items, c.w.keys_out, static_cast<std::uint32_t>(c.cells()), c.w.start);
  }
};

// --- Phase 1 and receive(1).

// Which cells and items a peel covers: every shard, or shard `shard` alone.
struct scope {
  bool all = true;
  std::uint32_t shard = 0;
  GRADCOMP_HD std::uint64_t first_item(const context& c) const { return all ? 0 : c.w.word_items[shard * c.wps]; }
  GRADCOMP_HD std::uint64_t end_item(const context& c) const {
    return c.w.word_items[all ? c.aligned : (shard + 1) * c.wps];
  }
  GRADCOMP_HD std::uint64_t first_cell(const context& c) const {
    return all ? 0 : std::uint64_t{shard} * c.st.report->rows * c.block;
  }
  GRADCOMP_HD std::uint64_t end_cell(const context& c) const {
    return all ? c.cells() : (std::uint64_t{shard} + 1) * c.st.report->rows * c.block;
  }
};

// Cell buffer layout: where cell c (numbered i r B + local) sits in a buffer.
struct cell_layout {
  bool padded = false;
  bool shard_only = false;  // the buffer holds one shard (a reduce-scatter's result)
  GRADCOMP_HD std::uint64_t stride(const context& c) const {
    return std::uint64_t{padded ? c.max_rows : c.st.report->rows} * c.block;
  }
  GRADCOMP_HD std::uint64_t at(const context& c, std::uint64_t cell) const {
    const std::uint64_t per = std::uint64_t{c.st.report->rows} * c.block, i = cell / per;
    return (shard_only ? 0 : i * stride(c)) + (cell - i * per);
  }
  // Cells a buffer must hold (the whole buffer, or one shard).
  GRADCOMP_HD std::uint64_t needed(const context& c) const { return shard_only ? stride(c) : c.world * stride(c); }
};

// 1 thread: the caller's buffer holds the step's cells (packed: known on the device only).
struct check_capacity {
  context c;
  cell_layout l;
  std::uint64_t capacity;  // cells the buffer holds
  errc error;
  GRADCOMP_HD void operator()(std::uint64_t) const {
    if (capacity < l.needed(c)) fail(c.st.report, error);
  }
};

// Buffer position p of the sketch phase: its cell of x (the residual holds x), or a pad zero.
template <class Cell>
struct encode_cells {
  context c;
  Cell* out;
  cell_layout l;
  GRADCOMP_HD void operator()(std::uint64_t p) const {
    const std::uint64_t stride = l.stride(c), per = std::uint64_t{c.st.report->rows} * c.block;
    if (p >= c.world * stride) return;
    const std::uint64_t i = p / stride, local = p - i * stride;
    float v = 0.0f;
    if (local < per)
      v = sketch::detail::encode_cell(static_cast<std::uint32_t>(i * per + local), c.w.start, c.w.vals_out, c.w.elem, c.w.info,
                          c.st.residual + c.st.plan[i].offset);
    if constexpr (sizeof(Cell) == sizeof(float)) {
      out[p] = v;
    } else {
      out[p] = Cell::from_float(v);
    }
  }
};

// --- The peel of a scope.

struct peel_reset {  // max(items, max_rounds) threads
  context c;
  GRADCOMP_HD void operator()(std::uint64_t i) const {
    if (i < c.items) c.w.peeled_in[i] = 0;
    if (i < c.max_rounds) c.w.progress[i] = 0;
    if (i == 0) *c.w.tally = 0;
  }
};

template <class Cell>
struct peel_init {  // a thread per cell (up to the most cells)
  context c;
  scope s;
  const Cell* cells;
  cell_layout l;
  GRADCOMP_HD void operator()(std::uint64_t cell) const {
    if (cell < s.first_cell(c) || cell >= s.end_cell(c)) return;
    c.w.live[cell] = c.w.start[cell + 1] - c.w.start[cell];
    c.w.cell_residual[cell] = sketch::load_cell(cells[l.at(c, cell)]);
  }
};

// Round `round`, item i (guarded: a round after one that peeled nothing does not run).
struct choose {
  context c;
  scope s;
  std::uint32_t round;
  GRADCOMP_HD void operator()(std::uint64_t i) const {
    if (i < s.first_item(c) || i >= s.end_item(c)) return;
    if (sketch::detail::choose_item(static_cast<std::uint32_t>(i), round, c.w.keys_in, c.w.info, c.w.live, c.w.cell_residual, c.w.peeled_in,
                        c.w.value) &&
        c.w.progress[round] == 0)
      c.w.progress[round] = 1;  // (every writer stores the same value)
  }
};

// (Guarded: runs only when the round's choose peeled something.)
struct subtract {
  context c;
  scope s;
  std::uint32_t round;
  GRADCOMP_HD void operator()(std::uint64_t cell) const {
    if (cell < s.first_cell(c) || cell >= s.end_cell(c)) return;
    sketch::detail::subtract_cell(static_cast<std::uint32_t>(cell), round, c.w.start, c.w.vals_out, c.w.info, c.w.peeled_in, c.w.value,
                      c.w.live, c.w.cell_residual);
  }
};

// Aligned word v: each union position's residual keeps x minus what the rank's own cells
// convey (the peeled value, or 0: the decode's fallback zero). Counts the peeled items.
struct update_residual {
  context c;
  GRADCOMP_HD tally operator()(std::uint64_t v) const {
    const auto i = static_cast<std::uint32_t>(v / c.wps);
    const auto first = static_cast<std::uint32_t>(32 * (v - i * c.wps));
    float* x = c.st.residual + c.st.plan[i].offset;
    std::uint32_t item = c.w.word_items[v], peeled = 0;
    for (std::uint32_t word = c.w.aligned[v]; word != 0; word &= word - 1, ++item) {
      const std::uint32_t e = first + sketch::detail::lowest_bit(word);
      const bool got = c.w.peeled_in[item] != 0;
      x[e] = feedback::residual::remainder({}, x[e], got ? c.w.value[item] : 0.0f);
      peeled += got ? 1u : 0u;
    }
    return {peeled != 0 ? 0u : no_segment, peeled};
  }
};

// Aligned word u of the scope: the decoded values of its positions (0 off the union and where
// nothing peeled) into out (the whole buffer, or the scope's shard). Counts the peeled items.
struct output_words {
  context c;
  scope s;
  float* out;
  GRADCOMP_HD tally operator()(std::uint64_t u) const {
    const std::uint64_t v = s.all ? u : s.shard * c.wps + u;
    const auto i = static_cast<std::uint32_t>(v / c.wps);
    const std::uint64_t first = 32 * (v - i * c.wps), count = c.st.plan[i].select.count;
    if (first >= count) return {no_segment, 0};
    float* o = out + (s.all ? c.st.plan[i].offset : 0) + first;
    const std::uint64_t n = count - first < 32 ? count - first : 32;
    for (std::uint64_t t = 0; t < n; ++t) o[t] = 0.0f;
    std::uint32_t item = c.w.word_items[v], peeled = 0;
    for (std::uint32_t word = c.w.aligned[v]; word != 0; word &= word - 1, ++item)
      if (c.w.peeled_in[item] != 0) {
        o[sketch::detail::lowest_bit(word)] = c.w.value[item];
        ++peeled;
      }
    return {peeled != 0 ? 0u : no_segment, peeled};
  }
};

// 1 thread: the peel's statistics into the report (own: encode(1), else receive(1)).
struct settle_peel {
  context c;
  scope s;
  bool own;
  GRADCOMP_HD void operator()(std::uint64_t) const {
    sketch::peel_stats st;
    st.items = static_cast<std::uint32_t>(s.end_item(c) - s.first_item(c));
    st.peeled = static_cast<std::uint32_t>(*c.w.tally);
    while (st.rounds < c.max_rounds && c.w.progress[st.rounds] != 0) ++st.rounds;
    (own ? c.st.report->own : c.st.report->stats) = st;
  }
};

struct advance_step {  // 1 thread
  context c;
  GRADCOMP_HD void operator()(std::uint64_t) const { ++*c.st.step; }
};

}  // namespace gradcomp::tagc::detail
