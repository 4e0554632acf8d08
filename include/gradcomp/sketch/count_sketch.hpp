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
  std::uint32_t cur = 0xffffffffu;
  std::uint64_t block_end = 0;
  block_cells m;
  for (std::size_t w = 0; w < bitmap.size(); ++w) {
    std::uint32_t word = bitmap[w] & (enter.empty() ? 0xffffffffu : enter[w]);
    for (; word != 0; word &= word - 1) {
      const auto e = static_cast<std::uint32_t>(32 * w + static_cast<std::uint32_t>(std::countr_zero(word)));
      if (cur == 0xffffffffu || e >= block_end) {
        cur = e / g.block;
        block_end = (std::uint64_t{cur} + 1) * g.block;
        m = map_block(cur, g.rows);
      }
      const std::uint32_t lane = e - cur * g.block;
      const float v = x[e];
      for (std::uint32_t k = 0; k < m.distinct; ++k) {
        float& cell = acc[cell_index(m, k, lane, g.block)];
        cell = cell + apply_sign(((m.neg >> k) & 1u) != 0, v);
      }
    }
  }
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
  detail::peel_layout(g.cells(), *items, workspace.data(), a);
  const std::uint32_t n = detail::peel_prepare(g, bitmap, a);
  for (std::size_t c = 0; c < g.cells(); ++c) a.residual[c] = to_float(cells[c]);
  const peel_stats st = detail::peel_run(g, n, true, a);
  std::fill(out.begin(), out.end(), 0.0f);
  std::fill(opt.peeled.begin(), opt.peeled.end(), 0u);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint8_t info = a.info[i];
    if (a.state[i] == 1) {
      out[a.elem[i]] = a.value[i];
      if (!opt.peeled.empty()) opt.peeled[a.elem[i] / 32] |= 1u << (a.elem[i] % 32);
    } else if (opt.unpeeled == fallback::median) {
      float signed_residual[3];
      for (std::uint32_t k = 0; k < info_distinct(info); ++k)
        signed_residual[k] = apply_sign(info_neg(info, k), a.residual[a.icell[3 * i + k]]);
      out[a.elem[i]] = fallback_estimate(signed_residual, info_distinct(info));
    }
  }
  return st;
}

}  // namespace gradcomp::sketch
