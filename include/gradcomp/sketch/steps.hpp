#pragma once
// The count sketch's encode and peel as per-thread steps: each function below is the work
// of one GPU thread (one bitmap word, one sort slot, one cell or one item), and running the
// steps in order gives the same bits as the host functions encode(), decode() and
// structural_peel() (count_sketch.hpp, peel.hpp). cuda/tagc.cuh launches them as kernels;
// tests/sketch/steps_test.cpp runs them as plain loops and compares with the host.
//
// A region of `count` elements, its bitmap of `items` set bits, a geometry of cells = r B
// numbered row * B + lane (the wire order). Arrays:
//   word_items[w]          items before word w (exclusive scan of the words' popcounts), w <= words
//   elem[i], info[i]       element and item_info() of item i; items in ascending element order
//   slot_key[3 i + k]      the k-th distinct cell of item i, or `cells` (a sentinel) for k >= distinct
//                          and for the unused slots up to the capacity
//   slot_val[3 i + k]      4 i + k
//   sorted_val[p]          slot_val sorted by slot_key, stably (a radix sort): the entries of cell
//                          c are sorted_val[start[c] .. start[c + 1]), in ascending item order
//   start[c], c <= cells   from the sorted keys (cell_bounds), no atomics
//   live[c], residual[c]   unpeeled items and residual of cell c during the peel
//   value[i], peeled_in[i] peeled value of item i; 0 while unpeeled, k + 1 once peeled in round k
// Round k of the peel: choose_item over the items (reads live and residual as the previous
// round left them), then subtract_cell over the cells (walks the cell's items in ascending
// order): the round-synchronous schedule of peel.hpp.

#include <bit>
#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/numeric.hpp"
#include "bitmap.hpp"
#include "geometry.hpp"
#include "peel.hpp"

namespace gradcomp::sketch::detail {

GRADCOMP_HD inline std::uint32_t lowest_bit(std::uint32_t word) {
#if GRADCOMP_DEVICE_CODE
  return static_cast<std::uint32_t>(__ffs(static_cast<int>(word)) - 1);
#else
  return static_cast<std::uint32_t>(std::countr_zero(word));
#endif
}

// keep(j) = |x[j]| >= t, compared as 31-bit magnitude keys (as the threshold sparsifier does):
// bitmap_word(abs_at_least{x, key}, w, count) is one thread's word of a kept-position bitmap.
struct abs_at_least {
  const float* x;
  std::uint32_t key;  // abs_key of the threshold
  GRADCOMP_HD bool operator()(std::size_t j) const { return (float_bits(x[j]) & 0x7fffffffu) >= key; }
};

// Word w's items: element, info and three sort slots each.
GRADCOMP_HD inline void write_items(std::size_t w, const geometry& g, const std::uint32_t* bitmap,
                                    const std::uint32_t* word_items, std::uint32_t* elem, std::uint8_t* info,
                                    std::uint32_t* slot_key, std::uint32_t* slot_val) {
  const auto cells = static_cast<std::uint32_t>(g.cells());
  std::uint32_t i = word_items[w], block = 0xffffffffu;
  block_cells m;
  for (std::uint32_t word = bitmap[w]; word != 0; word &= word - 1, ++i) {
    const auto e = static_cast<std::uint32_t>(32 * w + lowest_bit(word));
    const std::uint32_t b = e / g.block, lane = e - b * g.block;
    if (b != block) {
      m = map_block(b, g.rows);
      block = b;
    }
    elem[i] = e;
    info[i] = item_info(m);
    for (std::uint32_t k = 0; k < 3; ++k) {
      slot_key[3 * i + k] = k < m.distinct ? cell_index(m, k, lane, g.block) : cells;
      slot_val[3 * i + k] = 4 * i + k;
    }
  }
}

// Slot p of `slots` sorted keys (p <= slots): the cells whose entries start at p.
GRADCOMP_HD inline void cell_bounds(std::size_t p, std::size_t slots, const std::uint32_t* sorted_key, std::uint32_t cells,
                                    std::uint32_t* start) {
  const std::uint64_t first = p == 0 ? 0 : std::uint64_t{sorted_key[p - 1]} + 1;
  const std::uint64_t last = p < slots ? sorted_key[p] : cells;
  for (std::uint64_t c = first; c <= last && c <= cells; ++c) start[c] = static_cast<std::uint32_t>(p);
}

// Cell c of the sketch of x (fp32; the caller stores it as the cell type).
GRADCOMP_HD inline float encode_cell(std::uint32_t c, const std::uint32_t* start, const std::uint32_t* sorted_val,
                                     const std::uint32_t* elem, const std::uint8_t* info, const float* x) {
  float acc = 0.0f;
  for (std::uint32_t p = start[c]; p < start[c + 1]; ++p) {
    const std::uint32_t i = sorted_val[p] >> 2, k = sorted_val[p] & 3u;
    acc = add_item(acc, info_neg(info[i], k), x[elem[i]]);
  }
  return acc;
}

// Round `round` (from 0), item i: peels if one of its cells holds only it. residual and value
// may be null (the structural peel). Returns whether it peeled.
GRADCOMP_HD inline bool choose_item(std::uint32_t i, std::uint32_t round, const std::uint32_t* slot_key,
                                    const std::uint8_t* info, const std::uint32_t* live, const float* residual,
                                    std::uint32_t* peeled_in, float* value) {
  if (peeled_in[i] != 0) return false;
  const std::uint8_t inf = info[i];
  const std::uint32_t d = info_distinct(inf);
  const std::uint32_t k = singleton_cell(live, slot_key + 3 * i, d);
  if (k == d) return false;
  if (value != nullptr) value[i] = signed_residual(inf, k, residual[slot_key[3 * i + k]]);
  peeled_in[i] = round + 1;
  return true;
}

// Round `round`, cell c: drops the items peeled in this round, subtracting them in ascending
// order (residual null: the structural peel).
GRADCOMP_HD inline void subtract_cell(std::uint32_t c, std::uint32_t round, const std::uint32_t* start,
                                      const std::uint32_t* sorted_val, const std::uint8_t* info,
                                      const std::uint32_t* peeled_in, const float* value, std::uint32_t* live,
                                      float* residual) {
  std::uint32_t n = live[c];
  float r = residual != nullptr ? residual[c] : 0.0f;
  for (std::uint32_t p = start[c]; p < start[c + 1]; ++p) {
    const std::uint32_t i = sorted_val[p] >> 2, k = sorted_val[p] & 3u;
    if (peeled_in[i] != round + 1) continue;
    if (residual != nullptr) r = subtract_item(r, info_neg(info[i], k), value[i]);
    --n;
  }
  live[c] = n;
  if (residual != nullptr) residual[c] = r;
}

// Word w of the output: the dense values of its 32 elements (out may be null: the structural
// peel) and its word of the peeled bitmap (returned).
GRADCOMP_HD inline std::uint32_t output_word(std::size_t w, std::size_t count, const std::uint32_t* bitmap,
                                             const std::uint32_t* word_items, const std::uint32_t* slot_key,
                                             const std::uint8_t* info, const std::uint32_t* peeled_in,
                                             const float* value, const float* residual, bool median, float* out) {
  const std::size_t first = 32 * w, end = count - first < 32 ? count : first + 32;
  if (out != nullptr)
    for (std::size_t j = first; j < end; ++j) out[j] = 0.0f;
  std::uint32_t i = word_items[w], peeled = 0;
  for (std::uint32_t word = bitmap[w]; word != 0; word &= word - 1, ++i) {
    const std::uint32_t bit = lowest_bit(word);
    if (peeled_in[i] != 0) {
      peeled |= 1u << bit;
      if (out != nullptr) out[first + bit] = value[i];
    } else if (out != nullptr && median) {
      float signed_cells[3] = {0.0f, 0.0f, 0.0f};
      for (std::uint32_t k = 0; k < info_distinct(info[i]); ++k)
        signed_cells[k] = signed_residual(info[i], k, residual[slot_key[3 * i + k]]);
      out[first + bit] = fallback_estimate(signed_cells, info_distinct(info[i]));
    }
  }
  return peeled;
}

}  // namespace gradcomp::sketch::detail
