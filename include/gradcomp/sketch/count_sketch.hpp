#pragma once
// Encode and decode of TAGC's block-hashed count sketch of one region (docs/tagc.md).
//
// encode: the kept positions of the union bitmap (optionally only those also set in an
// `enter` bitmap, e.g. the peelable set) add sign * x[e] to their distinct cells; cells are
// accumulated in fp32 in ascending element order, then stored as fp32 or rounded to bf16.
// decode: the transport's sum of the ranks' cells + the union bitmap -> the region's dense
// fp32 values (zero off the bitmap): peeled items get their peeled value, the others the
// fallback estimate (median of their signed residual cells, or zero).
//
// Every input is checked before anything is written. Cells that are not finite are not an
// error: they travel as values (a NaN in a cell reaches the items that read that cell).

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/numeric.hpp"
#include "bitmap.hpp"
#include "geometry.hpp"
#include "peel.hpp"

namespace gradcomp::sketch {

template <class Cell>
concept sketch_cell = std::same_as<Cell, float> || std::same_as<Cell, bf16_t>;

// What an item that never peels decodes to.
enum class fallback : std::uint8_t {
  median,  // the median of its signed residual cells (mean of 2, or the single one)
  zero,    // 0: for sketches whose encoders left unpeelable items out (they stay residual)
};

struct decode_options {
  fallback unpeeled = fallback::median;
  // When not empty (bitmap_words(count) words): receives the bitmap of the peeled positions.
  std::span<std::uint32_t> peeled{};
  // Rounds of peeling at most (0: until a round peels nothing). A GPU decode launches a fixed
  // number of rounds without asking the host; the same bound here gives the same bits.
  std::uint32_t max_rounds = 0;
};

// fp32 cells accumulate in place; bf16 cells need an fp32 accumulator of cells() floats.
template <sketch_cell Cell>
constexpr std::size_t encode_workspace_bytes(const geometry& g) {
  return std::same_as<Cell, float> ? 0 : g.cells() * sizeof(float);
}

template <sketch_cell Cell>
status encode(const geometry& g, std::span<const float> x, std::span<const std::uint32_t> bitmap,
              std::span<const std::uint32_t> enter, std::span<std::byte> workspace, std::span<Cell> cells) {
  if (status s = check(g); !s) return s;
  if (x.size() != g.count) return {errc::size_mismatch, "sketch input differs from the region's element count"};
  if (status s = check_bitmap(bitmap, g.count); !s) return s;
  if (!enter.empty() && enter.size() != bitmap.size()) return {errc::size_mismatch, "enter mask differs from the bitmap"};
  if (cells.size() != g.cells()) return {errc::size_mismatch, "sketch cells differ from rows * block"};
  if (workspace.size() < encode_workspace_bytes<Cell>(g))
    return {errc::buffer_too_small, "encode workspace smaller than encode_workspace_bytes"};
  float* acc = nullptr;
  if constexpr (std::same_as<Cell, float>) {
    acc = cells.data();
  } else {
    if (reinterpret_cast<std::uintptr_t>(workspace.data()) % alignof(float) != 0)
      return {errc::invalid_argument, "encode workspace must be 4-byte aligned"};
    acc = reinterpret_cast<float*>(workspace.data());
  }
  std::fill(acc, acc + g.cells(), 0.0f);
  // Items go through a small batch whose cells are prefetched first: the cells are hit at
  // random, and the adds themselves stay in ascending element order.
  struct pending {
    std::uint32_t cell[3];
    float v;
    std::uint32_t neg, distinct;
  };
  constexpr std::uint32_t batch_size = 32;
  pending batch[batch_size];
  std::uint32_t nb = 0;
  const auto flush = [&] {
    for (std::uint32_t p = 0; p < nb; ++p)
      for (std::uint32_t k = 0; k < batch[p].distinct; ++k) {
        float& cell = acc[batch[p].cell[k]];
        cell = add_item(cell, ((batch[p].neg >> k) & 1u) != 0, batch[p].v);
      }
    nb = 0;
  };
  const auto word_at = [&](std::size_t w) { return bitmap[w] & (enter.empty() ? 0xffffffffu : enter[w]); };
  detail::for_each_item<true>(g, bitmap.size(), word_at, [&](std::uint32_t e, std::uint32_t, std::uint32_t lane, const block_cells& m) {
    pending& p = batch[nb++];
    p.v = x[e];
    p.neg = m.neg;
    p.distinct = m.distinct;
    for (std::uint32_t k = 0; k < m.distinct; ++k) {
      p.cell[k] = cell_index(m, k, lane, g.block);
      GRADCOMP_PREFETCH(acc + p.cell[k]);
    }
    if (nb == batch_size) flush();
  });
  flush();
  if constexpr (!std::same_as<Cell, float>)
    for (std::size_t c = 0; c < g.cells(); ++c) cells[c] = bf16_t::from_float(acc[c]);
  return {};
}

template <sketch_cell Cell>
result<peel_stats> decode(const geometry& g, std::span<const std::uint32_t> bitmap, std::span<const Cell> cells,
                          std::span<std::byte> workspace, std::span<float> out, const decode_options& opt = {}) {
  const auto items = detail::check_peel_inputs(g, bitmap, workspace);
  if (!items) return items.error();
  if (cells.size() != g.cells()) return status{errc::size_mismatch, "sketch cells differ from rows * block"};
  if (out.size() != g.count) return status{errc::size_mismatch, "decode output differs from the region's element count"};
  if (!opt.peeled.empty() && opt.peeled.size() != bitmap.size())
    return status{errc::size_mismatch, "peeled bitmap differs from the bitmap"};
  detail::peel_arrays a;
  detail::peel_layout(g, *items, workspace.data(), a);
  detail::peel_prepare(g, bitmap, a);
  for (std::size_t row = 0; row < g.rows; ++row)  // to the lane-major order of the workspace
    for (std::size_t t = 0; t < g.block; ++t) a.cell[t * g.rows + row].residual = load_cell(cells[row * g.block + t]);
  const peel_stats st = detail::peel_run(g, true, a, opt.max_rounds);
  // The output in element order, a tile at a time: zeros, then the tile's items (item i of lane
  // t comes next in lane t's list, so lane_next walks the lanes again).
  std::copy(a.lane_start, a.lane_start + g.block, a.lane_next);
  std::fill(opt.peeled.begin(), opt.peeled.end(), 0u);
  constexpr std::size_t tile_words = 128;
  for (std::size_t w0 = 0; w0 < bitmap.size(); w0 += tile_words) {
    const std::size_t w1 = std::min(bitmap.size(), w0 + tile_words);
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(32 * w0),
              out.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(g.count, 32 * w1)), 0.0f);
    const auto item = [&](std::uint32_t e, std::uint32_t, std::uint32_t lane, const block_cells&) {
      const std::uint32_t i = a.lane_next[lane]++;
      const std::uint8_t info = a.info[i];
      if (a.state[i] == 1) {
        out[e] = a.value[i];
        if (!opt.peeled.empty()) opt.peeled[e / 32] |= 1u << (e % 32);
      } else if (opt.unpeeled == fallback::median) {
        float signed_cells[3] = {0.0f, 0.0f, 0.0f};
        for (std::uint32_t k = 0; k < info_distinct(info); ++k)
          signed_cells[k] = signed_residual(info, k, a.cell[a.icell[3 * i + k]].residual);
        out[e] = fallback_estimate(signed_cells, info_distinct(info));
      }
    };
    detail::for_each_item<false>(g, bitmap.subspan(w0, w1 - w0), item, w0);
  }
  return st;
}

}  // namespace gradcomp::sketch
