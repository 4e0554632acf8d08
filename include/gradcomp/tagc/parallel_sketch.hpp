#pragma once
// TAGC's sketch phase as data-parallel steps (see tagc/parallel.hpp): the cells of every
// destination shard from the cell index receive(0) built, the peel of the rank's own cells with
// the residual update (encode(1)), and the peel of the received cells (receive(1)). The peel is
// sketch/parallel.hpp's (choose over the items, subtract over the cells, per round) on a scope:
// every shard at once, or the rank's shard alone (its items and cells are contiguous ranges).
//
// Cell buffers: shard i's r B cells start at i * stride, stride = r B (the packed layout, the
// host codec's bytes) or R B with R = max_rows (the padded layout: the pad cells are zero, and
// a reduce-scatter needs no count from the device).

#include "parallel.hpp"

namespace gradcomp::tagc::parallel {

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
      v = gp::encode_cell(static_cast<std::uint32_t>(i * per + local), c.w.start, c.w.vals_out, c.w.elem, c.w.info,
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
    c.w.cell_residual[cell] = to_float(cells[l.at(c, cell)]);
  }
};

// Round `round`, item i (guarded: a round after one that peeled nothing does not run).
struct choose {
  context c;
  scope s;
  std::uint32_t round;
  GRADCOMP_HD void operator()(std::uint64_t i) const {
    if (i < s.first_item(c) || i >= s.end_item(c)) return;
    if (gp::choose_item(static_cast<std::uint32_t>(i), round, c.w.keys_in, c.w.info, c.w.live, c.w.cell_residual, c.w.peeled_in,
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
    gp::subtract_cell(static_cast<std::uint32_t>(cell), round, c.w.start, c.w.vals_out, c.w.info, c.w.peeled_in, c.w.value,
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
      const std::uint32_t e = first + gp::lowest_bit(word);
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
        o[gp::lowest_bit(word)] = c.w.value[item];
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

}  // namespace gradcomp::tagc::parallel
