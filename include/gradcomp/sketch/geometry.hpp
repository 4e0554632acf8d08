#pragma once
// Shape of TAGC's block-hashed count sketch of one region (docs/tagc.md, "Algorithm").
//
// The region's `count` elements form blocks of B (the last one may be partial). Block b
// (region-relative, from 0) is hashed three times, h_j = murmur3_x86_32(b as 4 little-endian
// bytes, seed j) for j = 0, 1, 2, to sketch block h_j mod r with sign -1 when bit 31 of h_j is
// set; element (b, lane t) enters cell (h_j mod r) * B + t. When two hashes give the same
// sketch block the element enters that cell once, with the sign of the lower j: a block has
// 1, 2 or 3 distinct sketch blocks, kept in j order. r = max(1, ceil(blocks / ratio)).

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/config.hpp"
#include "../core/murmur3.hpp"
#include "../core/status.hpp"

namespace gradcomp::sketch {

struct geometry {
  std::uint32_t count = 0;   // elements in the region
  std::uint32_t block = 1;   // B, elements (lanes) per block
  std::uint32_t blocks = 0;  // ceil(count / B)
  std::uint32_t rows = 1;    // r, sketch blocks
  GRADCOMP_HD constexpr std::size_t cells() const { return static_cast<std::size_t>(rows) * block; }
  friend bool operator==(const geometry&, const geometry&) = default;
};

// A geometry from outside (a config, a header) is re-checked by every function that takes one.
inline status check(const geometry& g) {
  if (g.block == 0) return {errc::invalid_argument, "sketch block size must be >= 1"};
  if (g.rows == 0) return {errc::invalid_argument, "sketch needs at least one sketch block"};
  if (g.blocks != (static_cast<std::uint64_t>(g.count) + g.block - 1) / g.block)
    return {errc::invalid_argument, "sketch blocks differ from ceil(count / block)"};
  if (g.cells() > 0xffffffffu) return {errc::count_too_large, "sketch cells do not fit 32-bit cell indices"};
  return {};
}

// The geometry with r given (the library's preset path goes through make_geometry below).
inline result<geometry> make_geometry_rows(std::size_t count, std::uint32_t block, std::uint32_t rows) {
  if (count > 0xffffffffu) return status{errc::count_too_large, "sketch region larger than 2^32 - 1 elements"};
  if (block == 0) return status{errc::invalid_argument, "sketch block size must be >= 1"};
  const geometry g{static_cast<std::uint32_t>(count), block,
                   static_cast<std::uint32_t>((static_cast<std::uint64_t>(count) + block - 1) / block), rows};
  if (status s = check(g); !s) return s;
  return g;
}

// r = max(1, ceil(blocks / ratio)) for a compression ratio >= 1 (blocks per sketch block).
inline result<geometry> make_geometry(std::size_t count, std::uint32_t block, float ratio) {
  if (!(ratio >= 1.0f) || !std::isfinite(ratio)) return status{errc::invalid_argument, "sketch ratio must be finite and >= 1"};
  if (block == 0) return status{errc::invalid_argument, "sketch block size must be >= 1"};
  const std::uint64_t blocks = (static_cast<std::uint64_t>(count) + block - 1) / block;
  const double r = std::ceil(static_cast<double>(blocks) / static_cast<double>(ratio));
  return make_geometry_rows(count, block, r < 1.0 ? 1u : static_cast<std::uint32_t>(r));
}

// The distinct sketch blocks of one block, in j order, and their signs.
struct block_cells {
  std::uint32_t row[3] = {0, 0, 0};  // distinct sketch blocks, row[k] for k < distinct
  std::uint32_t neg = 0;             // bit k set: row[k] enters with sign -1
  std::uint32_t distinct = 0;        // 1, 2 or 3
};

GRADCOMP_HD inline block_cells map_block(std::uint32_t b, std::uint32_t rows) {
  block_cells m;
  for (std::uint32_t j = 0; j < 3; ++j) {
    const std::uint32_t h = murmur3_u32(b, j);
    const std::uint32_t row = h % rows;
    bool seen = false;
    for (std::uint32_t k = 0; k < m.distinct; ++k) seen = seen || m.row[k] == row;
    if (!seen) {
      m.row[m.distinct] = row;
      m.neg |= (h >> 31) << m.distinct;
      ++m.distinct;
    }
  }
  return m;
}

// The cell of lane t in the k-th distinct sketch block.
GRADCOMP_HD constexpr std::uint32_t cell_index(const block_cells& m, std::uint32_t k, std::uint32_t lane,
                                               std::uint32_t block) {
  return m.row[k] * block + lane;
}

// --- Cell arithmetic: every backend's encode and peel go through these. ---
// sign * v with sign = -1 when neg: a flip of the sign bit (NaN included), exact everywhere.
GRADCOMP_HD inline float apply_sign(bool neg, float v) { return bits_float(float_bits(v) ^ (static_cast<std::uint32_t>(neg) << 31)); }

// A cell plus / minus one item's signed value. NaN results are canonical: the sign of a sum of
// two NaNs is that of the first operand on x86, and compilers may swap the operands of a sum
// (they commute for numbers), so without this the bytes of a cell holding two NaNs would
// depend on the optimisation level; a GPU returns its own NaN.
GRADCOMP_HD inline float add_item(float cell, bool neg, float v) { return canonical_nan(cell + apply_sign(neg, v)); }
GRADCOMP_HD inline float subtract_item(float cell, bool neg, float v) { return canonical_nan(cell - apply_sign(neg, v)); }

}  // namespace gradcomp::sketch
