#pragma once
// TAGC-2's configuration, its published presets, and the sizes every rank derives from it
// (docs/tagc.md). The codec itself is gradcomp/tagc.hpp.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "../core/byteio.hpp"
#include "../core/crc32c.hpp"
#include "../core/ids.hpp"
#include "../core/status.hpp"
#include "../sketch/geometry.hpp"
#include "../sparsify/threshold.hpp"
#include "../summable/phases.hpp"

namespace gradcomp::tagc {

// How the kept-position bitmaps of the ranks are combined (phase 1).
enum class bitmap_mode : std::uint8_t {
  bitwise_or = 1,  // 1 bit per position, reduced by OR (MPI_BOR)
  sum_safe = 2,    // ceil(log2(W + 1)) bits per position, reduced by SUM (NCCL)
};

// How the sketch's r (sketch blocks per shard) is chosen (phase 2).
enum class sizing : std::uint8_t {
  ratio = 1,     // r = max(1, ceil(ceil(shard_size / B) / ratio)): the published rule
  adaptive = 2,  // r = max(1, ceil(cells_per_item * L)), L = the fullest lane's union positions
                 // over every shard (known to every rank after phase 1): lane t of a block
                 // maps to lane t of r sketch blocks, so each lane peels on its own r cells
};

struct config {
  // The threshold sparsifier's sampled search, run by each rank on each shard of x = g + e:
  // TAGC's log-spaced table, density = 1 - target sparsity.
  sparsify::threshold::config select{.density = 0.0125, .estimate = sparsify::threshold::rule::tagc};
  // B: lanes of a sketch block. 1 sends the fewest cells for a given peel rate (every item
  // hashes on its own); larger B groups positions by block (the published layout), which
  // costs cells wherever kept positions crowd into some lanes (docs/tagc.md).
  std::uint32_t block = 1;
  sizing rows = sizing::adaptive;
  double ratio = 10.0;           // sizing::ratio
  double cells_per_item = 1.5;   // sizing::adaptive (peeling is complete from about 1.25)
  summable::wire_type cells = summable::wire_type::bf16;  // f32 or bf16
  bitmap_mode bitmap = bitmap_mode::bitwise_or;
  // Peeling rounds at most (the CUDA decode launches this many without asking the host); items
  // that would peel later stay in the senders' residuals.
  std::uint32_t max_rounds = 100;
  std::uint32_t seed = 0;  // the sampling key; make_state copies it into the state (state::key)
};

// The published settings. TAGC-2: target sparsity 0.9875, compression ratio 10, bf16 cells.
inline config preset_tagc2() {
  config c;
  c.select.density = 0.0125;
  c.block = 64;
  c.rows = sizing::ratio;
  c.ratio = 10.0;
  c.cells = summable::wire_type::bf16;
  return c;
}
// TAGC v1: target sparsity 0.80, compression ratio 2, fp32 cells.
inline config preset_v1() {
  config c;
  c.select.density = 0.20;
  c.block = 64;
  c.rows = sizing::ratio;
  c.ratio = 2.0;
  c.cells = summable::wire_type::f32;
  return c;
}

inline status validate(const config& c) {
  if (status s = sparsify::threshold::validate(c.select); !s) return s;
  if (c.block == 0 || c.block > 65536) return {errc::invalid_argument, "TAGC block must be in [1, 65536]"};
  if (c.rows != sizing::ratio && c.rows != sizing::adaptive) return {errc::invalid_argument, "TAGC sizing is ratio or adaptive"};
  if (!(c.ratio >= 1.0 && c.ratio <= 1e9)) return {errc::invalid_argument, "TAGC ratio must be in [1, 1e9]"};
  if (!(c.cells_per_item >= 0.1 && c.cells_per_item <= 64.0))
    return {errc::invalid_argument, "TAGC cells_per_item must be in [0.1, 64]"};
  if (c.cells != summable::wire_type::f32 && c.cells != summable::wire_type::bf16)
    return {errc::invalid_argument, "TAGC cells are f32 or bf16"};
  if (c.bitmap != bitmap_mode::bitwise_or && c.bitmap != bitmap_mode::sum_safe)
    return {errc::invalid_argument, "TAGC bitmap mode is bitwise_or or sum_safe"};
  if (c.max_rounds < 1 || c.max_rounds > 4096) return {errc::invalid_argument, "TAGC max_rounds must be in [1, 4096]"};
  return {};
}

namespace detail {
inline std::uint32_t crc_of(const std::byte* p, std::size_t n) { return crc32c(std::span<const std::byte>(p, n)); }
}  // namespace detail

// Identifies what the phases look like: block, cell type, bitmap mode, the sizing rule and its
// parameter, the peel bound. Ranks (and a checkpoint) must agree on it.
inline std::uint32_t codec_id(const config& c) {
  std::byte rec[32] = {};
  store_le<std::uint32_t>(rec, ids::tag::tagc_codec);  // "TAGC"
  store_le<std::uint32_t>(rec + 4, 2);         // format version of the phases
  store_le<std::uint32_t>(rec + 8, c.block);
  rec[12] = static_cast<std::byte>(c.cells);
  rec[13] = static_cast<std::byte>(c.bitmap);
  rec[14] = static_cast<std::byte>(c.rows);
  store_le<double>(rec + 16, c.rows == sizing::ratio ? c.ratio : c.cells_per_item);
  store_le<std::uint32_t>(rec + 24, c.max_rounds);
  return detail::crc_of(rec, sizeof rec);
}

// Identifies the selection settings that a checkpoint's thresholds belong to.
inline std::uint32_t select_fingerprint(const config& c) {
  const sparsify::threshold::config& s = c.select;
  std::byte rec[72] = {};
  store_le<double>(rec, s.density);
  rec[8] = static_cast<std::byte>(s.estimate);
  store_le<double>(rec + 16, s.sample_fraction);
  store_le<double>(rec + 24, s.min_ratio);
  store_le<double>(rec + 32, s.max_ratio);
  store_le<std::uint32_t>(rec + 40, s.max_tries);
  store_le<double>(rec + 48, s.table_min);
  store_le<double>(rec + 56, s.table_max);
  store_le<std::uint32_t>(rec + 64, s.steps_per_decade);
  return detail::crc_of(rec, sizeof rec);
}

// --- Sizes (host). s = shard_size(n, W) elements per shard.

// The most positions one shard's union can hold: each of W ranks keeps at most the threshold
// sparsifier's capacity of the shard. A received union above it is refused.
inline std::size_t max_items(const config& c, std::size_t n, std::uint32_t world) {
  const std::size_t s = summable::shard_size(n, world);
  const std::size_t each = sparsify::threshold::kept(c.select, s);
  return each >= (s + world - 1) / world ? s : each * world;
}

// Lanes of a shard that can hold positions: min(B, shard size), at least 1.
inline std::size_t lanes_of(const config& c, std::size_t shard_elements) {
  return std::max<std::size_t>(1, std::min<std::size_t>(c.block, shard_elements));
}

// The most union positions one lane of a shard can hold: one per block, max_items in all.
inline std::size_t max_lane_items(const config& c, std::size_t n, std::uint32_t world) {
  const std::size_t s = summable::shard_size(n, world);
  return std::min(max_items(c, n, world), (s + c.block - 1) / c.block);
}

// r for a shard size and the fullest lane's union positions (sizing::adaptive).
// (GRADCOMP_HD: the CUDA codec computes r on the device from the union it received.)
GRADCOMP_HD inline std::uint32_t rows_for(const config& c, std::size_t shard_elements, std::size_t lane_items) {
  double r = 1.0;
  if (c.rows == sizing::ratio) {
    const double blocks = std::ceil(static_cast<double>(shard_elements) / c.block);
    r = std::ceil(blocks / c.ratio);
  } else {
    r = std::ceil(c.cells_per_item * static_cast<double>(lane_items));
  }
  return r < 1.0 ? 1u : r > 4294967295.0 ? 0xffffffffu : static_cast<std::uint32_t>(r);
}

// r of a step whose fullest lane holds `lane_items` union positions (the same on every rank).
inline std::uint32_t step_rows(const config& c, std::size_t n, std::uint32_t world, std::size_t lane_items) {
  return rows_for(c, summable::shard_size(n, world), lane_items);
}

// The largest r any step can use (workspace sizing, the padded layout).
inline std::uint32_t max_rows(const config& c, std::size_t n, std::uint32_t world) {
  return step_rows(c, n, world, max_lane_items(c, n, world));
}

}  // namespace gradcomp::tagc
