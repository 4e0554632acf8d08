#pragma once
// TAGC's kept-position bitmaps and count sketch on the GPU (docs/tagc.md). Each thread does the
// work of one GRADCOMP_HD function of sketch/bitmap.hpp or sketch/parallel.hpp, so the bytes
// equal the host functions' (bitmap.hpp, count_sketch.hpp, peel.hpp): tests/cuda/sketch_test.cu.
//
// Every call is asynchronous on its stream, uses caller-owned device memory (the workspace's
// size is queried first) and never waits for the device: what depends on the data (a bitmap
// bit past the region, more items than the capacity, the peel's statistics) is written to a
// device `sketch_report`. The peel launches max_rounds rounds of two kernels (choose over the
// items, subtract over the cells); a round whose predecessor peeled nothing returns at once,
// so the decode has no host round trip and can be captured in a CUDA graph. With the same
// max_rounds (decode_options::max_rounds, structural_peel's bound) the host gives the same bits.
//
// The cell index: the items' three (cell, 4 item + k) slots sorted by cell with a stable radix
// sort (CUB), so each cell walks its items in ascending element order without atomics.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "../sketch/count_sketch.hpp"
#include "../sketch/parallel.hpp"
#include "common.cuh"

#if defined(__CUDACC__)
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#endif

namespace gradcomp::cuda::sketch {

namespace gs = gradcomp::sketch;
namespace gp = gradcomp::sketch::parallel;

// Written by every call that takes one (device memory, zeroed by the call).
struct sketch_report {
  std::uint32_t code = 0;    // errc::ok, index_out_of_range (bitmap bit past the region),
                             // count_too_large (more items than max_items), or a sum-safe error
  std::uint32_t items = 0;   // kept positions of the region
  std::uint32_t peeled = 0;  // decode and structural peel: items peeled
  std::uint32_t rounds = 0;  // rounds that peeled at least one item
  unsigned long long first_bad = 0;  // sum-safe check: 16 * word + errc of the first bad word
  GRADCOMP_HD constexpr errc error() const { return static_cast<errc>(code); }
};

namespace detail {

using cuda::detail::carver;
using cuda::detail::grid_for;
using cuda::detail::threads;

struct arrays {
  std::uint32_t *word_items, *elem, *keys_in, *vals_in, *keys_out, *vals_out, *start, *live, *peeled_in, *progress;
  std::uint8_t* info;
  float *residual, *value;
  void* temp;
  std::size_t temp_bytes;
};

inline int end_bit(std::size_t cells) {
  int bits = 1;
  while (bits < 32 && (std::uint64_t{1} << bits) <= cells) ++bits;
  return bits;  // the sentinel key `cells` fits
}

// The layout for a region of geometry g and at most max_items items; base null: sizes only.
inline result<std::size_t> layout(const gs::geometry& g, std::size_t max_items, std::uint32_t max_rounds, std::byte* base,
                                  arrays& a) {
  if (3 * max_items > 0x7fffffffu) return status{errc::count_too_large, "GPU sketch holds at most 715827882 items"};
  const std::size_t words = gs::bitmap_words(g.count), slots = 3 * max_items, cells = g.cells();
  carver c(base);
  a.word_items = c.take<std::uint32_t>(words + 1);
  a.elem = c.take<std::uint32_t>(max_items);
  a.info = c.take<std::uint8_t>(max_items);
  a.keys_in = c.take<std::uint32_t>(slots);
  a.vals_in = c.take<std::uint32_t>(slots);
  a.keys_out = c.take<std::uint32_t>(slots);
  a.vals_out = c.take<std::uint32_t>(slots);
  a.start = c.take<std::uint32_t>(cells + 1);
  a.live = c.take<std::uint32_t>(cells);
  a.residual = c.take<float>(cells);
  a.value = c.take<float>(max_items);
  a.peeled_in = c.take<std::uint32_t>(max_items);
  a.progress = c.take<std::uint32_t>(max_rounds);
  std::size_t scan = 0, sort = 0;
  cudaError_t e = cub::DeviceScan::ExclusiveSum(nullptr, scan, a.word_items, a.word_items, static_cast<int>(words + 1));
  if (e == cudaSuccess)
    e = cub::DeviceRadixSort::SortPairs(nullptr, sort, a.keys_in, a.keys_out, a.vals_in, a.vals_out, static_cast<int>(slots), 0,
                                        end_bit(cells));
  if (e != cudaSuccess) return cuda::detail::cuda_status(e);
  a.temp_bytes = scan > sort ? scan : sort;
  a.temp = c.take<std::byte>(a.temp_bytes);
  return c.used();
}

#define GRADCOMP_GRID_STRIDE(i, n) \
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < (n); i += std::size_t{gridDim.x} * blockDim.x)

template <int = 0>  // a template: defined in a header, included by many units
__global__ void bitmap_kernel(const float* x, std::size_t count, std::uint32_t key, std::uint32_t* out) {
  GRADCOMP_GRID_STRIDE(w, gs::bitmap_words(count)) out[w] = gs::bitmap_word(gp::abs_at_least{x, key}, w, count);
}

template <int = 0>
__global__ void to_sum_safe_kernel(const std::uint32_t* bm, std::size_t count, gs::sum_safe_layout l, std::uint32_t* out) {
  GRADCOMP_GRID_STRIDE(w, l.words(count)) out[w] = gs::sum_safe_word(bm, w, count, l);
}

template <int = 0>
__global__ void check_sum_safe_kernel(const std::uint32_t* sums, std::size_t count, gs::sum_safe_layout l, sketch_report* rep) {
  GRADCOMP_GRID_STRIDE(w, l.words(count)) {
    const errc e = gs::check_sum_safe_word(sums[w], w, count, l);
    if (e != errc::ok) atomicMin(&rep->first_bad, 16ull * w + static_cast<unsigned long long>(e));
  }
}

template <int = 0>
__global__ void union_kernel(const std::uint32_t* sums, std::size_t count, gs::sum_safe_layout l, std::uint32_t* bm,
                             sketch_report* rep) {
  if (rep->first_bad != ~0ull) {
    if (blockIdx.x == 0 && threadIdx.x == 0) rep->code = static_cast<std::uint32_t>(rep->first_bad % 16);
    return;
  }
  GRADCOMP_GRID_STRIDE(w, gs::bitmap_words(count)) bm[w] = gs::union_word_from_sum_safe(sums, w, count, l);
}

template <int = 0>
__global__ void fill_kernel(std::uint32_t* p, std::size_t n, std::uint32_t v) { GRADCOMP_GRID_STRIDE(i, n) p[i] = v; }

// Popcounts (scanned next) and the bitmap's tail check.
template <int = 0>
__global__ void popcount_kernel(const std::uint32_t* bm, std::size_t count, std::uint32_t* word_items, sketch_report* rep) {
  const std::size_t words = gs::bitmap_words(count);
  GRADCOMP_GRID_STRIDE(w, words + 1) {
    word_items[w] = w < words ? gs::popcount32(bm[w]) : 0u;
    if (w + 1 == words && (bm[w] & ~gs::bitmap_tail_mask(count)) != 0)
      atomicCAS(&rep->code, 0u, static_cast<std::uint32_t>(errc::index_out_of_range));
  }
}

template <int = 0>
__global__ void items_kernel(gs::geometry g, const std::uint32_t* bm, std::size_t max_items, arrays a, sketch_report* rep) {
  const std::size_t words = gs::bitmap_words(g.count);
  if (a.word_items[words] > max_items) {
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicCAS(&rep->code, 0u, static_cast<std::uint32_t>(errc::count_too_large));
    return;
  }
  GRADCOMP_GRID_STRIDE(w, words) gp::write_items(w, g, bm, a.word_items, a.elem, a.info, a.keys_in, a.vals_in);
}

template <int = 0>
__global__ void bounds_kernel(std::size_t slots, std::uint32_t cells, arrays a) {
  GRADCOMP_GRID_STRIDE(p, slots + 1) gp::cell_bounds(p, slots, a.keys_out, cells, a.start);
}

template <class Cell>
__global__ void encode_kernel(std::uint32_t cells, const float* x, arrays a, Cell* out, const sketch_report* rep) {
  if (rep->code != 0) return;
  GRADCOMP_GRID_STRIDE(c, cells) {
    const float v = gp::encode_cell(static_cast<std::uint32_t>(c), a.start, a.vals_out, a.elem, a.info, x);
    if constexpr (std::is_same_v<Cell, float>) {
      out[c] = v;
    } else {
      out[c] = bf16_t::from_float(v);
    }
  }
}

template <class Cell>
__global__ void peel_init_kernel(std::uint32_t cells, const Cell* in, arrays a) {
  GRADCOMP_GRID_STRIDE(c, cells) {
    a.live[c] = a.start[c + 1] - a.start[c];
    if (in != nullptr) a.residual[c] = to_float(in[c]);
  }
}

template <int = 0>
__global__ void choose_kernel(std::uint32_t round, std::size_t words, arrays a, bool values, const sketch_report* rep) {
  if (rep->code != 0 || (round > 0 && a.progress[round - 1] == 0)) return;
  const std::uint32_t items = a.word_items[words];
  bool any = false;
  GRADCOMP_GRID_STRIDE(i, items)
    any = gp::choose_item(static_cast<std::uint32_t>(i), round, a.keys_in, a.info, a.live, values ? a.residual : nullptr,
                          a.peeled_in, values ? a.value : nullptr) || any;
  if (any) atomicOr(&a.progress[round], 1u);
}

template <int = 0>
__global__ void subtract_kernel(std::uint32_t round, std::uint32_t cells, arrays a, bool values, const sketch_report* rep) {
  if (rep->code != 0 || a.progress[round] == 0) return;
  GRADCOMP_GRID_STRIDE(c, cells)
    gp::subtract_cell(static_cast<std::uint32_t>(c), round, a.start, a.vals_out, a.info, a.peeled_in, a.value, a.live,
                      values ? a.residual : nullptr);
}

template <int = 0>
__global__ void output_kernel(std::size_t count, const std::uint32_t* bm, arrays a, bool values, bool median, float* out,
                              std::uint32_t* peeled, sketch_report* rep) {
  if (rep->code != 0) return;
  GRADCOMP_GRID_STRIDE(w, gs::bitmap_words(count)) {
    const std::uint32_t pw = gp::output_word(w, count, bm, a.word_items, a.keys_in, a.info, a.peeled_in, a.value,
                                             values ? a.residual : nullptr, median, values ? out : nullptr);
    if (peeled != nullptr) peeled[w] = pw;
    if (pw != 0) atomicAdd(&rep->peeled, gs::popcount32(pw));
  }
}

template <int = 0>
__global__ void finish_kernel(std::size_t words, std::uint32_t max_rounds, arrays a, sketch_report* rep) {
  if (blockIdx.x != 0 || threadIdx.x != 0 || rep->code != 0) return;
  rep->items = a.word_items[words];
  std::uint32_t rounds = 0;
  while (rounds < max_rounds && a.progress[rounds] != 0) ++rounds;
  rep->rounds = rounds;
}

#undef GRADCOMP_GRID_STRIDE

inline unsigned blocks_for(std::size_t n) { return grid_for((n + threads - 1) / threads); }

// Host checks shared by encode, decode and the structural peel.
inline status check_common(const gs::geometry& g, std::span<const std::uint32_t> bitmap, std::size_t max_items,
                           std::uint32_t max_rounds, std::span<std::byte> workspace, arrays& a) {
  if (status s = gs::check(g); !s) return s;
  if (bitmap.size() != gs::bitmap_words(g.count)) return {errc::size_mismatch, "bitmap words differ from ceil(count / 32)"};
  if (max_rounds == 0) return {errc::invalid_argument, "the GPU peel needs max_rounds >= 1"};
  if (!cuda::detail::aligned(workspace.data(), 256)) return {errc::invalid_argument, "sketch workspace must be 256-byte aligned"};
  const result<std::size_t> need = layout(g, max_items, max_rounds, nullptr, a);
  if (!need) return need.error();
  if (workspace.size() < *need) return {errc::buffer_too_small, "sketch workspace smaller than workspace_bytes()"};
  return layout(g, max_items, max_rounds, workspace.data(), a).error();
}

// The items and the sorted cell index (every call starts with it).
inline status prepare(const gs::geometry& g, const std::uint32_t* bm, std::size_t max_items, const arrays& a,
                      sketch_report* rep, cudaStream_t s) {
  const std::size_t words = gs::bitmap_words(g.count), slots = 3 * max_items;
  if (auto e = cudaMemsetAsync(rep, 0, sizeof(sketch_report), s); e != cudaSuccess) return cuda::detail::cuda_status(e);
  fill_kernel<><<<blocks_for(slots), threads, 0, s>>>(a.keys_in, slots, static_cast<std::uint32_t>(g.cells()));
  popcount_kernel<><<<blocks_for(words + 1), threads, 0, s>>>(bm, g.count, a.word_items, rep);
  std::size_t temp = a.temp_bytes;
  cudaError_t e = cub::DeviceScan::ExclusiveSum(a.temp, temp, a.word_items, a.word_items, static_cast<int>(words + 1), s);
  if (e != cudaSuccess) return cuda::detail::cuda_status(e);
  items_kernel<><<<blocks_for(words), threads, 0, s>>>(g, bm, max_items, a, rep);
  temp = a.temp_bytes;
  e = cub::DeviceRadixSort::SortPairs(a.temp, temp, a.keys_in, a.keys_out, a.vals_in, a.vals_out, static_cast<int>(slots), 0,
                                      end_bit(g.cells()), s);
  if (e != cudaSuccess) return cuda::detail::cuda_status(e);
  bounds_kernel<><<<blocks_for(slots + 1), threads, 0, s>>>(slots, static_cast<std::uint32_t>(g.cells()), a);
  return cuda::detail::cuda_status(cudaGetLastError());
}

// The rounds and the output (decode: cells not null; structural peel: null).
template <class Cell>
status peel(const gs::geometry& g, const std::uint32_t* bm, const Cell* cells, std::size_t max_items, std::uint32_t max_rounds,
            bool median, float* out, std::uint32_t* peeled, const arrays& a, sketch_report* rep, cudaStream_t s) {
  const std::size_t words = gs::bitmap_words(g.count);
  const auto ncells = static_cast<std::uint32_t>(g.cells());
  const bool values = cells != nullptr;
  if (auto e = cudaMemsetAsync(a.peeled_in, 0, 4 * max_items, s); e != cudaSuccess) return cuda::detail::cuda_status(e);
  if (auto e = cudaMemsetAsync(a.progress, 0, 4 * std::size_t{max_rounds}, s); e != cudaSuccess) return cuda::detail::cuda_status(e);
  peel_init_kernel<Cell><<<blocks_for(ncells), threads, 0, s>>>(ncells, cells, a);
  for (std::uint32_t round = 0; round < max_rounds; ++round) {
    choose_kernel<><<<blocks_for(max_items), threads, 0, s>>>(round, words, a, values, rep);
    subtract_kernel<><<<blocks_for(ncells), threads, 0, s>>>(round, ncells, a, values, rep);
  }
  output_kernel<><<<blocks_for(words), threads, 0, s>>>(g.count, bm, a, values, median, out, peeled, rep);
  finish_kernel<><<<1, 32, 0, s>>>(words, max_rounds, a, rep);
  return cuda::detail::cuda_status(cudaGetLastError());
}

}  // namespace detail

// Device workspace of encode, decode and structural_peel for a region of geometry g with at
// most max_items kept positions (a call with more reports count_too_large).
inline result<std::size_t> workspace_bytes(const gs::geometry& g, std::size_t max_items, std::uint32_t max_rounds) {
  detail::arrays a{};
  return detail::layout(g, max_items, max_rounds, nullptr, a);
}

// bitmap[w] of |x[j]| >= threshold over j < count (as 31-bit magnitude keys).
inline status build_bitmap(const float* x, std::size_t count, float threshold, std::span<std::uint32_t> bitmap, cudaStream_t s) {
  if (bitmap.size() != gs::bitmap_words(count)) return {errc::size_mismatch, "bitmap words differ from ceil(count / 32)"};
  detail::bitmap_kernel<><<<detail::blocks_for(bitmap.size()), detail::threads, 0, s>>>(x, count, abs_key(threshold), bitmap.data());
  return cuda::detail::cuda_status(cudaGetLastError());
}

// One rank's sum-safe words of its (own, well-formed) 1-bit bitmap.
inline status to_sum_safe(std::span<const std::uint32_t> bitmap, std::size_t count, std::uint32_t world,
                          std::span<std::uint32_t> out, cudaStream_t s) {
  if (world == 0) return {errc::invalid_argument, "sum-safe bitmap needs a world size >= 1"};
  const auto l = gs::sum_safe_layout::make(world);
  if (bitmap.size() != gs::bitmap_words(count) || out.size() != l.words(count))
    return {errc::size_mismatch, "sum-safe sizes differ from the region's"};
  detail::to_sum_safe_kernel<><<<detail::blocks_for(out.size()), detail::threads, 0, s>>>(bitmap.data(), count, l, out.data());
  return cuda::detail::cuda_status(cudaGetLastError());
}

// The union from summed sum-safe words; a bad word (the first, as on the host) is reported in
// rep->code and the bitmap is left untouched.
inline status union_from_sum_safe(std::span<const std::uint32_t> sums, std::size_t count, std::uint32_t world,
                                  std::span<std::uint32_t> bitmap, sketch_report* rep, cudaStream_t s) {
  if (world == 0) return {errc::invalid_argument, "sum-safe bitmap needs a world size >= 1"};
  const auto l = gs::sum_safe_layout::make(world);
  if (sums.size() != l.words(count) || bitmap.size() != gs::bitmap_words(count))
    return {errc::size_mismatch, "sum-safe sizes differ from the region's"};
  const sketch_report init{0, 0, 0, 0, ~0ull};
  if (auto e = cudaMemcpyAsync(rep, &init, sizeof init, cudaMemcpyHostToDevice, s); e != cudaSuccess)
    return cuda::detail::cuda_status(e);
  detail::check_sum_safe_kernel<><<<detail::blocks_for(sums.size()), detail::threads, 0, s>>>(sums.data(), count, l, rep);
  detail::union_kernel<><<<detail::blocks_for(bitmap.size()), detail::threads, 0, s>>>(sums.data(), count, l, bitmap.data(), rep);
  return cuda::detail::cuda_status(cudaGetLastError());
}

// The sketch of x at the bitmap's positions (sketch::encode with no `enter` mask).
template <gs::sketch_cell Cell>
status encode(const gs::geometry& g, const float* x, std::span<const std::uint32_t> bitmap, std::size_t max_items,
              std::span<Cell> cells, std::span<std::byte> workspace, sketch_report* rep, cudaStream_t s) {
  detail::arrays a{};
  if (status st = detail::check_common(g, bitmap, max_items, 1, workspace, a); !st) return st;
  if (cells.size() != g.cells()) return {errc::size_mismatch, "sketch cells differ from rows * block"};
  if (status st = detail::prepare(g, bitmap.data(), max_items, a, rep, s); !st) return st;
  detail::encode_kernel<Cell><<<detail::blocks_for(cells.size()), detail::threads, 0, s>>>(
      static_cast<std::uint32_t>(g.cells()), x, a, cells.data(), rep);
  detail::finish_kernel<><<<1, 32, 0, s>>>(bitmap.size(), 0, a, rep);
  return cuda::detail::cuda_status(cudaGetLastError());
}

// sketch::decode with {unpeeled, peeled, max_rounds}: out (count floats) and, when not empty,
// the peeled bitmap; the statistics in *rep.
template <gs::sketch_cell Cell>
status decode(const gs::geometry& g, std::span<const std::uint32_t> bitmap, std::span<const Cell> cells, std::size_t max_items,
              std::span<float> out, std::span<std::uint32_t> peeled, gs::fallback unpeeled, std::uint32_t max_rounds,
              std::span<std::byte> workspace, sketch_report* rep, cudaStream_t s) {
  detail::arrays a{};
  if (status st = detail::check_common(g, bitmap, max_items, max_rounds, workspace, a); !st) return st;
  if (cells.size() != g.cells()) return {errc::size_mismatch, "sketch cells differ from rows * block"};
  if (out.size() != g.count) return {errc::size_mismatch, "decode output differs from the region's element count"};
  if (!peeled.empty() && peeled.size() != bitmap.size()) return {errc::size_mismatch, "peeled bitmap differs from the bitmap"};
  if (status st = detail::prepare(g, bitmap.data(), max_items, a, rep, s); !st) return st;
  return detail::peel<Cell>(g, bitmap.data(), cells.data(), max_items, max_rounds, unpeeled == gs::fallback::median, out.data(),
                            peeled.empty() ? nullptr : peeled.data(), a, rep, s);
}

// sketch::structural_peel with the bound max_rounds.
inline status structural_peel(const gs::geometry& g, std::span<const std::uint32_t> bitmap, std::size_t max_items,
                              std::span<std::uint32_t> peelable, std::uint32_t max_rounds, std::span<std::byte> workspace,
                              sketch_report* rep, cudaStream_t s) {
  detail::arrays a{};
  if (status st = detail::check_common(g, bitmap, max_items, max_rounds, workspace, a); !st) return st;
  if (peelable.size() != bitmap.size()) return {errc::size_mismatch, "peelable bitmap differs from the bitmap"};
  if (status st = detail::prepare(g, bitmap.data(), max_items, a, rep, s); !st) return st;
  return detail::peel<float>(g, bitmap.data(), nullptr, max_items, max_rounds, false, nullptr, peelable.data(), a, rep, s);
}

}  // namespace gradcomp::cuda::sketch
