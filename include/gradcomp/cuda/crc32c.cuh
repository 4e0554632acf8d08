#pragma once
// CRC32C on the device, computed piece by piece and joined with the algebra behind
// gradcomp::crc32c_combine (core/crc32c.hpp):
//
//   crc(A B) = crc(A) * x^(8|B|) ^ crc(B)        (mod the CRC polynomial, reflected order)
//
// so the CRC of a body cut into pieces P_i is XOR_i crc(P_i) * x^(8 * bytes after P_i).
// XOR is associative and commutative: every tile adds its term with atomicXor, in any order,
// and the result is the same bits as the CPU's sequential CRC. Per tile, each thread
// checksums a 128-byte piece (slicing-by-4 tables in shared memory), multiplies it by its
// distance to the tile end (a table), the block XORs the terms, and thread 0 moves the tile
// term to its place in the frame (crc_shift: at most four multiplications by table entries).

#include <cstdint>

#include "../core/crc32c.hpp"
#include "common.cuh"

namespace gradcomp::cuda::detail {

struct crc_tables {
  std::uint32_t slice[4][256];         // slicing-by-4 byte tables (the CPU's first four)
  std::uint32_t piece[threads];        // x^(8 * piece_bytes * i): i pieces of zeros appended
  std::uint32_t pow[4][2048];          // x^(64 * i * 2048^l): i * 2048^l units of 8 zero bytes
};

constexpr crc_tables make_crc_tables() {
  crc_tables r{};
  const auto full = gradcomp::detail::make_crc32c_tables();
  for (int s = 0; s < 4; ++s)
    for (int i = 0; i < 256; ++i) r.slice[s][i] = full[s][i];
  const std::uint32_t one_piece = gradcomp::detail::crc32c_x_pow_8n(piece_bytes);
  r.piece[0] = 0x80000000u;  // x^0
  for (unsigned i = 1; i < threads; ++i) r.piece[i] = gradcomp::detail::crc32c_mulmod(r.piece[i - 1], one_piece);
  std::uint64_t unit = 8;
  for (int l = 0; l < 4; ++l, unit *= 2048) {
    const std::uint32_t base = gradcomp::detail::crc32c_x_pow_8n(unit);
    r.pow[l][0] = 0x80000000u;
    for (int i = 1; i < 2048; ++i) r.pow[l][i] = gradcomp::detail::crc32c_mulmod(r.pow[l][i - 1], base);
  }
  return r;
}

// One copy per translation unit (internal linkage), so separable compilation links cleanly.
static __device__ const crc_tables device_crc_tables = make_crc_tables();

// Raw CRC32C register update over `words` little-endian 32-bit words (no inversions).
GRADCOMP_HD inline std::uint32_t crc_update_words(const std::uint32_t (*slice)[256], std::uint32_t crc,
                                                  const std::uint32_t* p, unsigned words) {
#if GRADCOMP_DEVICE_CODE
#pragma unroll 8
#endif
  for (unsigned i = 0; i < words; ++i) {
    crc ^= p[i];
    crc = slice[3][crc & 0xffu] ^ slice[2][(crc >> 8) & 0xffu] ^ slice[1][(crc >> 16) & 0xffu] ^ slice[0][crc >> 24];
  }
  return crc;
}

// crc * x^(8 * bytes): the CRC of a piece moved `bytes` (a multiple of 8) before the end.
GRADCOMP_HD inline std::uint32_t crc_shift(const crc_tables& tab, std::uint32_t crc, std::uint64_t bytes) {
  std::uint64_t units = bytes >> 3;
  for (int l = 0; l < 4 && units != 0; ++l, units >>= 11)
    if (const auto d = static_cast<unsigned>(units & 2047u)) crc = gradcomp::detail::crc32c_mulmod(crc, tab.pow[l][d]);
  if (units != 0) crc = gradcomp::detail::crc32c_mulmod(crc, gradcomp::detail::crc32c_x_pow_8n(units << 47));
  return crc;
}

// How a tile of r bytes (a multiple of 8, at most tile_bytes) is cut: `full` whole pieces and
// a last piece of `rem` bytes (possibly empty). Thread t < full owns piece t.
struct tile_cut {
  unsigned full, rem;
};
GRADCOMP_HD constexpr tile_cut cut_tile(std::uint32_t r) { return {r / piece_bytes, r % piece_bytes}; }

// The term of whole piece t (its CRC times x^(8 * whole pieces after it)), and the tile CRC
// from the XOR of all terms and the CRC of the last partial piece.
GRADCOMP_HD inline std::uint32_t piece_term(const crc_tables& tab, tile_cut cut, unsigned t, std::uint32_t crc) {
  return gradcomp::detail::crc32c_mulmod(crc, tab.piece[cut.full - 1 - t]);
}
GRADCOMP_HD inline std::uint32_t tile_from_terms(const crc_tables& tab, tile_cut cut, std::uint32_t terms,
                                                 std::uint32_t partial_crc) {
  return cut.rem ? gradcomp::detail::crc32c_mulmod(terms, tab.pow[0][cut.rem / 8]) ^ partial_crc : terms;
}

// Host model of tile_crc() over unpadded words, sharing every formula with it; the tests
// check it against gradcomp::crc32c for many sizes (no GPU needed).
inline std::uint32_t tile_crc_model(const crc_tables& tab, const std::uint32_t* words, std::uint32_t r) {
  const tile_cut cut = cut_tile(r);
  std::uint32_t terms = 0, partial = 0;
  for (unsigned t = 0; t <= cut.full && t < threads; ++t) {
    const unsigned n = t < cut.full ? piece_words : cut.rem / 4;
    if (n == 0) continue;
    const std::uint32_t crc = ~crc_update_words(tab.slice, ~0u, words + t * piece_words, n);
    if (t < cut.full) {
      terms ^= piece_term(tab, cut, t, crc);
    } else {
      partial = crc;
    }
  }
  return tile_from_terms(tab, cut, terms, partial);
}

#if defined(__CUDACC__)
// Copies the slicing tables into shared memory (the whole block takes part).
__device__ inline void load_slices(std::uint32_t (*slice)[256]) {
  for (unsigned i = threadIdx.x; i < 4 * 256; i += blockDim.x) slice[i / 256][i % 256] = device_crc_tables.slice[i / 256][i % 256];
  __syncthreads();
}

// CRC32C of the first r bytes of a staged tile (padded layout, see common.cuh); the result is
// valid in thread 0. Every thread of the block must call it. `scratch` holds warps + 1 words.
__device__ inline std::uint32_t tile_crc(const std::uint32_t* stage, std::uint32_t r, const std::uint32_t (*slice)[256],
                                         std::uint32_t* scratch) {
  const unsigned t = threadIdx.x;
  const tile_cut cut = cut_tile(r);
  std::uint32_t term = 0;
  const unsigned n = t < cut.full ? piece_words : (t == cut.full ? cut.rem / 4 : 0);
  if (n != 0) {
    // pad(t * 32 + i) == t * 33 + i for i < 32: a piece is contiguous in the padded stage.
    const std::uint32_t crc = ~crc_update_words(slice, ~0u, stage + t * (piece_words + 1), n);
    if (t < cut.full) {
      term = piece_term(device_crc_tables, cut, t, crc);
    } else {
      scratch[warps] = crc;
    }
  }
  for (int o = 16; o > 0; o >>= 1) term ^= __shfl_xor_sync(0xffffffffu, term, o);
  if (t % 32 == 0) scratch[t / 32] = term;
  __syncthreads();
  std::uint32_t crc = 0;
  if (t == 0) {
    for (unsigned w = 0; w < warps; ++w) crc ^= scratch[w];
    crc = tile_from_terms(device_crc_tables, cut, crc, cut.rem ? scratch[warps] : 0u);
  }
  __syncthreads();  // scratch may be reused
  return crc;
}

// CRC32C of `bytes` (a multiple of 4) at a 4-byte aligned device address, by one thread.
__device__ inline std::uint32_t crc_bytes(const std::byte* p, unsigned bytes) {
  return ~crc_update_words(device_crc_tables.slice, ~0u, reinterpret_cast<const std::uint32_t*>(p), bytes / 4);
}
#endif

}  // namespace gradcomp::cuda::detail
