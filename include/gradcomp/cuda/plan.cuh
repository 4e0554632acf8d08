#pragma once
// CUDA backend: the compression plan of a composition on the device (chunk offsets and tile
// counts, scanned over chunks), the workspace layout, and the block-wide helpers every
// compression kernel shares. Sizes and layout come from engine/composition.hpp.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "../compressor.hpp"
#include "../core/bits.hpp"
#include "../core/frame.hpp"
#include "../core/numeric.hpp"
#include "../core/status.hpp"
#include "common.cuh"
#include "crc32c.cuh"
#include "groups.cuh"
#include "topk_select.cuh"

namespace gradcomp::cuda::detail {

template <class C>
struct traits;
template <class P, class S, class Q, class F, class X>
struct traits<compressor<P, S, Q, F, X>> {
  using partitioner = P;
  using sparsifier = S;
  using quantizer = Q;
  using feedback = F;
  using code_type = typename Q::code_type;
  static constexpr unsigned code_bytes = sizeof(code_type);
  static constexpr bool dense = S::is_dense;
  static constexpr bool has_state = F::has_state;
  // Casts take the fused fast path; every other quantizer the grouped path (groups.cuh),
  // which stages codes in 32-bit words.
  static constexpr bool cast = is_cast<Q>;
  static_assert(cast || (Q::bits <= 32 && sizeof(code_type) <= 4),
                "gradcomp::cuda: grouped or bit-packed quantizers need bits <= 32 and a code_type of at most 4 bytes");
  static_assert(S::kind == selection::dense || S::kind == selection::exact_topk,
                "gradcomp::cuda: the CUDA backend selects with sparsify::dense and sparsify::topk only (threshold, "
                "random-k and row top-k run on the CPU backend)");
  static_assert(!momentum_feedback<F>, "gradcomp::cuda: feedback::momentum runs on the CPU backend only");
};

// Section sizes of a frame keeping `kept` of `count` elements (compressor::frame_layout).
template <class C>
GRADCOMP_HD frame::header section_layout(const typename C::config& cfg, std::uint64_t kept, std::uint64_t count) {
  return C::frame_layout(cfg, kept, count);
}

// One chunk of the compression plan.
struct chunk_plan {
  std::uint64_t offset, count, kept;
  std::uint64_t frame_offset;                   // in the payload
  std::uint64_t val_tile0, idx_tile0, sel_tile0;  // first tile of each kind (fast path, selection)
  std::uint64_t span0, body_tile0;              // grouped path: first span, first body tile
};

// Per-chunk totals, scanned over chunks.
struct plan_sums {
  std::uint64_t frame, val, idx, sel, span, body;
};
struct plan_sums_add {
  GRADCOMP_HD plan_sums operator()(const plan_sums& a, const plan_sums& b) const {
    return {a.frame + b.frame, a.val + b.val, a.idx + b.idx, a.sel + b.sel, a.span + b.span, a.body + b.body};
  }
};

// Fast path: value and index tiles. Grouped path: spans (encode_groups_kernel) and body
// tiles (seal_kernel). Top-k: selection tiles.
template <class C>
GRADCOMP_HD plan_sums chunk_sums(const typename C::config& cfg, const frame::header& h) {
  const std::uint64_t sel = traits<C>::dense ? 0 : ceil_div(h.dense_count, select_tile);
  if constexpr (traits<C>::cast) {
    return {h.frame_bytes(), ceil_div(align8(h.value_bytes), tile_bytes), ceil_div(align8(h.index_bytes), tile_bytes), sel,
            0, 0};
  } else {
    const std::size_t gs = traits<C>::quantizer::group_size(cfg.quantize);
    return {h.frame_bytes(), 0, 0, sel, ceil_div(h.kept_count, span_values<typename traits<C>::quantizer>(gs)),
            ceil_div(h.frame_bytes() - frame::header_bytes, tile_bytes)};
  }
}

template <class C, class T>
GRADCOMP_HD frame::header chunk_layout(const typename C::config& cfg, std::uint64_t n, std::uint64_t c, chunk_range& r) {
  using tr = traits<C>;
  r = tr::partitioner::chunk_at(cfg.partition, n, sizeof(T), c);
  return section_layout<C>(cfg, tr::sparsifier::kept(cfg.sparsify, r.count), r.count);
}

// What the host needs to size grids and check buffers: the plan's totals.
struct host_plan {
  std::uint64_t chunks = 0;
  plan_sums total{};
  bool sparse_chunk_too_big = false;
};

template <class C, class T>
host_plan plan_on_host(const C& comp, std::size_t n) {
  host_plan p;
  p.chunks = comp.template chunk_count<T>(n);
  for (std::uint64_t c = 0; c < p.chunks; ++c) {
    chunk_range r;
    const frame::header h = chunk_layout<C, T>(comp.get_config(), n, c, r);
    if (!traits<C>::dense && r.count > 0xffffffffu) p.sparse_chunk_too_big = true;
    p.total = plan_sums_add{}(p.total, chunk_sums<C>(comp.get_config(), h));
  }
  return p;
}

// Workspace of a compress call.
struct compress_space {
  report* internal;  // the convenience overload's report
  control* ctl;
  chunk_plan* plan;
  std::uint32_t* crc;  // per chunk: XOR of the body's CRC terms
  select_state* sel;
  std::uint32_t* hist;
  tile_pair* counts;
  std::size_t bytes;
};

template <class C>
compress_space carve_compress(std::byte* base, std::uint64_t chunks, std::uint64_t sel_tiles) {
  carver k(base);
  compress_space s{};
  s.internal = k.take<report>(1);
  s.ctl = k.take<control>(1);
  s.plan = k.take<chunk_plan>(chunks);
  s.crc = k.take<std::uint32_t>(chunks);
  if constexpr (!traits<C>::dense) {
    s.sel = k.take<select_state>(chunks);
    s.hist = k.take<std::uint32_t>(chunks * hist_bins);
    s.counts = k.take<tile_pair>(sel_tiles);
  }
  s.bytes = k.used();
  return s;
}

template <class C, class T>
struct compress_args {
  typename C::config cfg;
  std::uint32_t codec;
  dtype source_dtype;
  std::uint64_t n, chunks;
  plan_sums tiles;
  const T* grad;
  float* residual;
  std::uint64_t* step;
  std::byte* payload;
  report* out;
  compress_space ws;
};

// Block-wide: the chunk holding tile `tile`, the last c with first(c) <= tile.
template <class First>
__device__ std::uint64_t block_find(std::uint64_t count, std::uint64_t tile, First first, std::uint64_t* sh) {
  if (threadIdx.x == 0) {
    std::uint64_t lo = 0, hi = count;
    while (hi - lo > 1) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (first(mid) <= tile) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    *sh = lo;
  }
  __syncthreads();
  const std::uint64_t c = *sh;
  __syncthreads();
  return c;
}

template <class Code>
__device__ inline void put_code(std::uint32_t* stage, std::uint32_t i, Code code) {
  const std::uint32_t byte = i * static_cast<std::uint32_t>(sizeof(Code));
  auto* p = reinterpret_cast<unsigned char*>(stage + pad(byte / 4)) + byte % 4;
  *reinterpret_cast<Code*>(p) = code;
}
template <class Code>
__device__ inline Code get_code(const std::uint32_t* stage, std::uint32_t i) {
  const std::uint32_t byte = i * static_cast<std::uint32_t>(sizeof(Code));
  const auto* p = reinterpret_cast<const unsigned char*>(stage + pad(byte / 4)) + byte % 4;
  return *reinterpret_cast<const Code*>(p);
}

// Zeroes the staged words from the one holding byte `data` up to r / 4, before the codes are
// written: the section's zero padding, and the free half of a half-filled word.
__device__ inline void zero_tail(std::uint32_t* stage, std::uint32_t data, std::uint32_t r) {
  if (threadIdx.x == 0)
    for (std::uint32_t w = data / 4; w < r / 4; ++w) stage[pad(w)] = 0;
  __syncthreads();
}

// Stores staged words [w0, w1) to dst and adds the tile's CRC term (r bytes, `after` bytes of
// the frame body behind it) to the chunk's accumulator.
__device__ inline void finish_tile(const std::uint32_t* stage, std::uint32_t* dst, std::uint32_t w0, std::uint32_t w1,
                                   std::uint32_t r, std::uint64_t after, const std::uint32_t (*slice)[256],
                                   std::uint32_t* scratch, std::uint32_t* acc) {
  for (std::uint32_t w = w0 + threadIdx.x; w < w1; w += threads) dst[w] = stage[pad(w)];
  const std::uint32_t crc = tile_crc(stage, r, slice, scratch);
  if (threadIdx.x == 0) atomicXor(acc, crc_shift(device_crc_tables, crc, after));
  __syncthreads();
}

}  // namespace gradcomp::cuda::detail
