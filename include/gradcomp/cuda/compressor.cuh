#pragma once
// The CUDA execution of compressor<Partitioner, Sparsifier, Quantizer, Feedback>: the same
// frames, byte for byte, as compressor::compress, and the same decoded values and errors as
// compressor::decompress / accumulate (docs/cuda.md).
//
//   C comp(cfg);                                            // the CPU object: config + plan
//   auto st = cuda::make_state(comp, state_mem, n, stream); // device step + residual
//   executor ex{stream, workspace};                         // >= compress_workspace_bytes<T>(comp, n)
//   cuda::compress<float>(comp, ex, grad, *st, payload, d_report);   // async; size -> d_report
//   cuda::accumulate<float>(comp, ex2, received, sum, d_report2);    // validate all, then add
//
// Every call is stream-ordered, never synchronises the host, never allocates, and can be
// captured into a CUDA graph. Host-detectable argument errors are returned at once (and
// nothing is enqueued); everything that depends on the data is written to the report.
// Pointers in spans are device pointers. Payloads must be 8-byte aligned (frames are
// multiples of 8 bytes), workspaces 256-byte aligned.

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
#include "../state.hpp"
#include "common.cuh"
#include "crc32c.cuh"
#include "groups.cuh"
#include "topk_select.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

namespace gradcomp::cuda {

namespace detail {

template <class C>
struct traits;
template <class P, class S, class Q, class F>
struct traits<compressor<P, S, Q, F>> {
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

// --- Compression kernels, in launch order.

// Only when non-finite gradients are forbidden: the CPU rejects the call before writing.
template <class T>
__global__ void __launch_bounds__(threads) nonfinite_kernel(const T* __restrict__ g, std::uint64_t n, control* ctl) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{threads} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * threads)
    if (!is_finite_bits(float_bits(to_float(g[i])))) atomicCAS(&ctl->error, 0u, static_cast<std::uint32_t>(errc::non_finite_value));
}

// One block: the chunk plan (offsets by a block scan), per-chunk accumulators, the report,
// and the step (read for the headers, then advanced unless a check failed).
template <class C, class T>
__global__ void __launch_bounds__(threads) plan_kernel(compress_args<C, T> a) {
  using scan = cub::BlockScan<plan_sums, threads>;
  __shared__ typename scan::TempStorage tmp;
  plan_sums running{0, 0, 0, 0, 0, 0};
  for (std::uint64_t base = 0; base < a.chunks; base += threads) {
    const std::uint64_t c = base + threadIdx.x;
    plan_sums item{0, 0, 0, 0, 0, 0};
    chunk_range r{0, 0};
    frame::header h;
    if (c < a.chunks) {
      h = chunk_layout<C, T>(a.cfg, a.n, c, r);
      item = chunk_sums<C>(a.cfg, h);
    }
    plan_sums before, total;
    scan(tmp).ExclusiveScan(item, before, plan_sums{0, 0, 0, 0, 0, 0}, plan_sums_add{}, total);
    if (c < a.chunks) {
      const plan_sums at = plan_sums_add{}(running, before);
      a.ws.plan[c] = chunk_plan{r.offset, r.count, h.kept_count, at.frame, at.val, at.idx, at.sel, at.span, at.body};
      a.ws.crc[c] = 0;
      if constexpr (!traits<C>::dense) a.ws.sel[c] = initial_select(h.kept_count, r.count);
    }
    running = plan_sums_add{}(running, total);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const std::uint32_t err = a.ws.ctl->error;
    a.ws.ctl->step = *a.step;
    if (err == 0) *a.step += 1;
    *a.out = report{err == 0 ? running.frame : 0, err, 0};
  }
}

// Dense: codes of x = combine(g, e) straight into the value section, residual updated.
template <class C, class T>
__global__ void __launch_bounds__(threads) encode_dense_kernel(compress_args<C, T> a) {
  using tr = traits<C>;
  using Q = typename tr::quantizer;
  using F = typename tr::feedback;
  constexpr unsigned unroll = 8;
  __shared__ std::uint32_t stage[stage_words];
  __shared__ std::uint32_t slice[4][256];
  __shared__ std::uint32_t scratch[warps + 1];
  __shared__ std::uint64_t sh;
  if (a.ws.ctl->error != 0) return;
  load_slices(slice);
  const auto& qc = a.cfg.quantize;
  const auto& fc = a.cfg.feedback;
  for (std::uint64_t tile = blockIdx.x; tile < a.tiles.val; tile += gridDim.x) {
    const std::uint64_t c = block_find(a.chunks, tile, [&](std::uint64_t i) { return a.ws.plan[i].val_tile0; }, &sh);
    const chunk_plan p = a.ws.plan[c];
    const frame::header h = section_layout<C>(a.cfg, p.kept, p.count);
    const std::uint64_t begin = (tile - p.val_tile0) * tile_bytes;
    const auto r = static_cast<std::uint32_t>(min_u64(tile_bytes, align8(h.value_bytes) - begin));
    const auto data = static_cast<std::uint32_t>(min_u64(tile_bytes, h.value_bytes - begin));
    zero_tail(stage, data, r);
    const std::uint32_t count = data / tr::code_bytes;
    const std::uint64_t e0 = p.offset + begin / tr::code_bytes;
    const T* __restrict__ g = a.grad + e0;
    float* __restrict__ e = tr::has_state ? a.residual + e0 : nullptr;
    for (std::uint32_t base = 0; base < count; base += threads * unroll) {
      float x[unroll];
#pragma unroll
      for (unsigned k = 0; k < unroll; ++k) {  // all loads first: many bytes in flight
        const std::uint32_t i = base + k * threads + threadIdx.x;
        if (i < count) {
          x[k] = to_float(g[i]);
          if constexpr (tr::has_state) x[k] = F::combine(fc, x[k], e[i]);
        }
      }
#pragma unroll
      for (unsigned k = 0; k < unroll; ++k) {
        const std::uint32_t i = base + k * threads + threadIdx.x;
        if (i < count) {
          const auto code = Q::encode(qc, {}, x[k], 0);
          put_code(stage, i, code);
          if constexpr (tr::has_state) e[i] = F::remainder(fc, x[k], Q::decode(qc, {}, code));
        }
      }
    }
    __syncthreads();
    auto* dst = reinterpret_cast<std::uint32_t*>(a.payload + p.frame_offset + h.value_offset() + begin);
    finish_tile(stage, dst, 0, r / 4, r, align8(h.value_bytes) - begin - r, slice, scratch, &a.ws.crc[c]);
  }
}

// The key of element i (global index) once pass 0 has run: x lives in e with feedback.
template <class C, class T>
__device__ inline std::uint32_t key_at(const compress_args<C, T>& a, std::uint64_t i) {
  if constexpr (traits<C>::has_state) {
    return abs_key(a.residual[i]);
  } else {
    return abs_key(to_float(a.grad[i]));
  }
}

// Histogram pass; pass 0 also stores x = combine(g, e) into e (needed even when the chunk
// keeps everything, so it runs for inactive chunks too).
template <class C, class T, int Pass>
__global__ void __launch_bounds__(threads) hist_kernel(compress_args<C, T> a) {
  using tr = traits<C>;
  using F = typename tr::feedback;
  constexpr unsigned unroll = 8;
  __shared__ std::uint32_t bins[hist_bins];
  __shared__ std::uint64_t sh;
  if (a.ws.ctl->error != 0) return;
  for (std::uint64_t tile = blockIdx.x; tile < a.tiles.sel; tile += gridDim.x) {
    const std::uint64_t c = block_find(a.chunks, tile, [&](std::uint64_t i) { return a.ws.plan[i].sel_tile0; }, &sh);
    const chunk_plan p = a.ws.plan[c];
    const select_state s = a.ws.sel[c];
    if (Pass > 0 && !s.active) continue;  // block-uniform
    for (unsigned b = threadIdx.x; b < digit_bins(Pass); b += threads) bins[b] = 0;
    __syncthreads();
    const std::uint64_t j0 = (tile - p.sel_tile0) * select_tile;
    const auto count = static_cast<std::uint32_t>(min_u64(select_tile, p.count - j0));
    const std::uint64_t i0 = p.offset + j0;
    for (std::uint32_t base = 0; base < count; base += threads * unroll) {
      std::uint32_t key[unroll];
#pragma unroll
      for (unsigned k = 0; k < unroll; ++k) {
        const std::uint32_t i = base + k * threads + threadIdx.x;
        if (i >= count) continue;
        if constexpr (Pass == 0) {
          float x = to_float(a.grad[i0 + i]);
          if constexpr (tr::has_state) {
            x = F::combine(a.cfg.feedback, x, a.residual[i0 + i]);
            a.residual[i0 + i] = x;
          }
          key[k] = abs_key(x);
        } else {
          key[k] = key_at(a, i0 + i);
        }
      }
      if (s.active) {
#pragma unroll
        for (unsigned k = 0; k < unroll; ++k) {
          const std::uint32_t i = base + k * threads + threadIdx.x;
          const bool counted = i < count && in_prefix(key[k], Pass, s.prefix);
          if constexpr (Pass == 0) {
            // Gradient magnitudes crowd into a few exponent bins: one atomic per distinct bin
            // and warp instead of up to 32 colliding ones. (Later passes count few keys.)
            const std::uint32_t bin = counted ? digit_of(key[k], 0) : 0xffffffffu;
            const unsigned same = __match_any_sync(0xffffffffu, bin);
            if (counted && (threadIdx.x % 32) == static_cast<unsigned>(__ffs(same) - 1)) atomicAdd(&bins[bin], static_cast<std::uint32_t>(__popc(same)));
          } else if (counted) {
            atomicAdd(&bins[digit_of(key[k], Pass)], 1u);
          }
        }
      }
    }
    __syncthreads();
    if (s.active)
      for (unsigned b = threadIdx.x; b < digit_bins(Pass); b += threads)
        if (bins[b] != 0) atomicAdd(&a.ws.hist[c * hist_bins + b], bins[b]);
    __syncthreads();
  }
}

// Keys > T and == T per selection tile.
template <class C, class T>
__global__ void __launch_bounds__(threads) count_kernel(compress_args<C, T> a) {
  using reduce = cub::BlockReduce<tile_pair, threads>;
  __shared__ typename reduce::TempStorage tmp;
  __shared__ std::uint64_t sh;
  if (a.ws.ctl->error != 0) return;
  for (std::uint64_t tile = blockIdx.x; tile < a.tiles.sel; tile += gridDim.x) {
    const std::uint64_t c = block_find(a.chunks, tile, [&](std::uint64_t i) { return a.ws.plan[i].sel_tile0; }, &sh);
    const chunk_plan p = a.ws.plan[c];
    const select_state s = a.ws.sel[c];
    const std::uint64_t j0 = (tile - p.sel_tile0) * select_tile;
    const auto count = static_cast<std::uint32_t>(min_u64(select_tile, p.count - j0));
    tile_pair mine{0, 0};
    for (std::uint32_t i = threadIdx.x; i < count; i += threads) {
      const std::uint32_t key = key_at(a, p.offset + j0 + i);
      mine.gt += key > s.threshold;
      mine.eq += key == s.threshold;
    }
    const tile_pair sum = reduce(tmp).Reduce(mine, tile_pair_add{});
    if (threadIdx.x == 0) a.ws.counts[tile] = sum;
    __syncthreads();
  }
}

// Writes the selected indices, ascending, into each frame's index section.
template <class C, class T>
__global__ void __launch_bounds__(threads) write_kernel(compress_args<C, T> a) {
  constexpr unsigned per = 8;  // consecutive elements per thread per round
  using scan = cub::BlockScan<tile_pair, threads>;
  __shared__ typename scan::TempStorage tmp;
  __shared__ std::uint64_t sh;
  if (a.ws.ctl->error != 0) return;
  for (std::uint64_t tile = blockIdx.x; tile < a.tiles.sel; tile += gridDim.x) {
    const std::uint64_t c = block_find(a.chunks, tile, [&](std::uint64_t i) { return a.ws.plan[i].sel_tile0; }, &sh);
    const chunk_plan p = a.ws.plan[c];
    const select_state s = a.ws.sel[c];
    const frame::header h = section_layout<C>(a.cfg, p.kept, p.count);
    auto* out = reinterpret_cast<std::uint32_t*>(a.payload + p.frame_offset + h.index_offset());
    const std::uint64_t j0 = (tile - p.sel_tile0) * select_tile;
    const auto count = static_cast<std::uint32_t>(min_u64(select_tile, p.count - j0));
    const tile_pair first = a.ws.counts[p.sel_tile0], here = a.ws.counts[tile];
    tile_pair base{here.gt - first.gt, here.eq - first.eq};  // keys > T / == T before this tile in the chunk
    for (std::uint32_t round = 0; round < count; round += threads * per) {
      std::uint32_t key[per];
      tile_pair mine{0, 0};
      const std::uint32_t i0 = round + threadIdx.x * per;
#pragma unroll
      for (unsigned k = 0; k < per; ++k) {
        key[k] = i0 + k < count ? key_at(a, p.offset + j0 + i0 + k) : 0u;
        if (i0 + k < count) {
          mine.gt += key[k] > s.threshold;
          mine.eq += key[k] == s.threshold;
        }
      }
      tile_pair before, total;
      scan(tmp).ExclusiveScan(mine, before, tile_pair{0, 0}, tile_pair_add{}, total);
      select_cursor cur{base.gt + before.gt, base.eq + before.eq};
#pragma unroll
      for (unsigned k = 0; k < per; ++k) {
        std::uint64_t pos;
        if (i0 + k < count && select_position(key[k], s, cur, pos)) out[pos] = static_cast<std::uint32_t>(j0 + i0 + k);
      }
      base = tile_pair_add{}(base, total);
      __syncthreads();
    }
  }
}

// Sparse frames: checksums the index sections (and writes their padding), then encodes the
// values of the selected elements and updates their residual.
template <class C, class T>
__global__ void __launch_bounds__(threads) encode_sparse_kernel(compress_args<C, T> a) {
  using tr = traits<C>;
  using Q = typename tr::quantizer;
  using F = typename tr::feedback;
  __shared__ std::uint32_t stage[stage_words];
  __shared__ std::uint32_t slice[4][256];
  __shared__ std::uint32_t scratch[warps + 1];
  __shared__ std::uint64_t sh;
  if (a.ws.ctl->error != 0) return;
  load_slices(slice);
  const auto& qc = a.cfg.quantize;
  const auto& fc = a.cfg.feedback;
  for (std::uint64_t tile = blockIdx.x; tile < a.tiles.idx + a.tiles.val; tile += gridDim.x) {
    const bool is_index = tile < a.tiles.idx;
    const std::uint64_t t = is_index ? tile : tile - a.tiles.idx;
    const std::uint64_t c =
        block_find(a.chunks, t, [&](std::uint64_t i) { return is_index ? a.ws.plan[i].idx_tile0 : a.ws.plan[i].val_tile0; }, &sh);
    const chunk_plan p = a.ws.plan[c];
    const frame::header h = section_layout<C>(a.cfg, p.kept, p.count);
    std::byte* f = a.payload + p.frame_offset;
    const std::uint64_t section = is_index ? h.index_bytes : h.value_bytes;
    const std::uint64_t begin = (t - (is_index ? p.idx_tile0 : p.val_tile0)) * tile_bytes;
    const auto r = static_cast<std::uint32_t>(min_u64(tile_bytes, align8(section) - begin));
    const auto data = static_cast<std::uint32_t>(min_u64(tile_bytes, section - begin));
    const std::uint64_t after = align8(section) - begin - r + (is_index ? align8(h.value_bytes) : 0);
    zero_tail(stage, data, r);
    const auto* idx = reinterpret_cast<const std::uint32_t*>(f + h.index_offset());
    if (is_index) {
      for (std::uint32_t w = threadIdx.x; w < data / 4; w += threads) stage[pad(w)] = idx[begin / 4 + w];
    } else {
      const std::uint64_t m0 = begin / tr::code_bytes;
      for (std::uint32_t i = threadIdx.x; i < data / tr::code_bytes; i += threads) {
        const std::uint64_t j = p.offset + idx[m0 + i];
        const float x = tr::has_state ? a.residual[j] : to_float(a.grad[j]);
        const auto code = Q::encode(qc, {}, x, 0);
        put_code(stage, i, code);
        if constexpr (tr::has_state) a.residual[j] = F::remainder(fc, x, Q::decode(qc, {}, code));
      }
    }
    __syncthreads();
    // Index words are already in place: only their padding is stored.
    auto* dst = reinterpret_cast<std::uint32_t*>(f + (is_index ? h.index_offset() : h.value_offset()) + begin);
    finish_tile(stage, dst, is_index ? data / 4 : 0, r / 4, r, after, slice, scratch, &a.ws.crc[c]);
  }
}

// Grouped path: one block per span (groups.cuh): load, fit, encode, store, with a barrier
// after each phase. Writes the span's group metadata and packed codes into the frame and
// updates the residual of its values; seal_kernel checksums the frames afterwards.
template <class C, class T>
__global__ void __launch_bounds__(threads) encode_groups_kernel(compress_args<C, T> a) {
  using tr = traits<C>;
  using Q = typename tr::quantizer;
  __shared__ float xs[span_slots];
  __shared__ typename tr::code_type codes[max_span];
  __shared__ std::uint32_t metas[span_min<Q> * meta_words<Q>];  // at most span_min groups per span
  __shared__ std::uint64_t sh;
  static_assert(sizeof xs + sizeof codes + sizeof metas <= span_shared_bytes,
                "gradcomp::cuda: the quantizer's meta is too large for the grouped path's shared memory");
  if (a.ws.ctl->error != 0) return;
  const std::uint64_t step = a.ws.ctl->step;
  const std::uint64_t span = span_values<Q>(Q::group_size(a.cfg.quantize));
  for (std::uint64_t s = blockIdx.x; s < a.tiles.span; s += gridDim.x) {
    const std::uint64_t c = block_find(a.chunks, s, [&](std::uint64_t i) { return a.ws.plan[i].span0; }, &sh);
    const chunk_plan p = a.ws.plan[c];
    const frame::header h = section_layout<C>(a.cfg, p.kept, p.count);
    std::byte* f = a.payload + p.frame_offset;
    const std::uint64_t m0 = (s - p.span0) * span;
    const span_work<C, T> w{a.cfg,
                            a.grad + p.offset,
                            tr::has_state ? a.residual + p.offset : nullptr,
                            tr::dense ? nullptr : reinterpret_cast<const std::uint32_t*>(f + h.index_offset()),
                            f,
                            h.value_offset(),
                            m0,
                            static_cast<std::uint32_t>(min_u64(span, p.kept - m0)),
                            static_cast<std::uint32_t>(c),
                            step};
    span_load(w, xs, threadIdx.x, threads);
    __syncthreads();
    span_fit(w, xs, metas, threadIdx.x, threads);
    __syncthreads();
    span_encode(w, xs, metas, codes, threadIdx.x, threads);
    __syncthreads();
    span_store(w, codes, threadIdx.x, threads);
    __syncthreads();  // xs, metas and codes are reused by the next span
  }
}

// Grouped path: per tile of every frame body, zeroes the section padding (the only bytes no
// other kernel writes) and adds the tile's CRC term to the chunk's accumulator.
template <class C, class T>
__global__ void __launch_bounds__(threads) seal_kernel(compress_args<C, T> a) {
  __shared__ std::uint32_t stage[stage_words];
  __shared__ std::uint32_t slice[4][256];
  __shared__ std::uint32_t scratch[warps + 1];
  __shared__ std::uint64_t sh;
  if (a.ws.ctl->error != 0) return;
  load_slices(slice);
  for (std::uint64_t tile = blockIdx.x; tile < a.tiles.body; tile += gridDim.x) {
    const std::uint64_t c = block_find(a.chunks, tile, [&](std::uint64_t i) { return a.ws.plan[i].body_tile0; }, &sh);
    const chunk_plan p = a.ws.plan[c];
    const frame::header h = section_layout<C>(a.cfg, p.kept, p.count);
    const std::uint64_t body = h.frame_bytes() - frame::header_bytes;
    const std::uint64_t begin = (tile - p.body_tile0) * tile_bytes;
    const auto r = static_cast<std::uint32_t>(min_u64(tile_bytes, body - begin));  // a multiple of 8
    auto* words = reinterpret_cast<std::uint32_t*>(a.payload + p.frame_offset + frame::header_bytes + begin);
    for (std::uint32_t w = threadIdx.x; w < r / 4; w += threads) {
      std::uint32_t v = words[w];
      if (const std::uint32_t keep = body_keep_mask(h, begin + 4 * w); keep != 0xffffffffu) {
        v &= keep;
        words[w] = v;
      }
      stage[pad(w)] = v;
    }
    __syncthreads();
    const std::uint32_t crc = tile_crc(stage, r, slice, scratch);  // ends with a barrier
    if (threadIdx.x == 0) atomicXor(&a.ws.crc[c], crc_shift(device_crc_tables, crc, body - begin - r));
  }
}

// Headers last: the CRC joins CRC32C(header[0, 84)) with the body's accumulated terms.
template <class C, class T>
__global__ void __launch_bounds__(threads) header_kernel(compress_args<C, T> a) {
  if (a.ws.ctl->error != 0) return;
  for (std::uint64_t c = blockIdx.x * std::uint64_t{threads} + threadIdx.x; c < a.chunks;
       c += std::uint64_t{gridDim.x} * threads) {
    const chunk_plan p = a.ws.plan[c];
    frame::header h = section_layout<C>(a.cfg, p.kept, p.count);
    h.codec_id = a.codec;
    h.source_dtype = a.source_dtype;
    h.chunk_id = static_cast<std::uint32_t>(c);
    h.step = a.ws.ctl->step;
    h.element_offset = p.offset;
    std::byte* f = a.payload + p.frame_offset;
    frame::write_header(h, f);
    const std::uint32_t head = crc_bytes(f, frame::crc_offset);
    const std::uint32_t crc = crc32c_combine(head, a.ws.crc[c], h.frame_bytes() - frame::header_bytes);
    *reinterpret_cast<std::uint32_t*>(f + frame::crc_offset) = crc;
  }
}

// --- Decoding.

// One frame found by the walk, with what the checks found.
struct frame_entry {
  std::uint64_t offset, frame_bytes, tile0;
  std::uint64_t kept, dense_count, element_offset;
  std::uint64_t idx_error;             // min over failing indices of (m << 8 | errc); ~0 if none
  std::uint64_t meta_error;            // min over failing groups of (q << 8 | errc); ~0 if none
  std::uint64_t index_off, value_off;  // section offsets in the frame (frames may pass 4 GiB)
  std::uint32_t next;  // next frame of the same chunk, in payload order
  std::uint32_t crc_acc, head_crc, stored_crc;
  std::uint32_t non_finite, hdr_error;
};

struct decode_space {
  report* internal;
  control* ctl;
  frame_entry* frames;
  std::uint32_t* head;  // per chunk: first and last frame of its list
  std::uint32_t* tail;
  std::uint64_t max_frames;
  std::size_t bytes;
};

template <class C>
std::uint64_t chunk_slots(const C& comp, std::size_t n) {  // either source dtype's plan
  const std::uint64_t a = comp.template chunk_count<float>(n), b = comp.template chunk_count<bf16_t>(n);
  return a > b ? a : b;
}

template <class C>
decode_space carve_decode(std::byte* base, std::uint64_t slots, std::uint64_t max_frames) {
  carver k(base);
  decode_space s{};
  s.internal = k.take<report>(1);
  s.ctl = k.take<control>(1);
  s.head = k.take<std::uint32_t>(2 * slots);
  s.tail = s.head ? s.head + slots : nullptr;
  s.frames = k.take<frame_entry>(max_frames);
  s.max_frames = max_frames;
  s.bytes = k.used();
  return s;
}

template <class C, class T>
struct decode_args {
  typename C::config cfg;
  std::uint32_t codec;
  std::uint64_t n;
  const std::byte* payload;
  std::uint64_t size;
  T* out;
  bool add;
  report* rep;
  decode_space ws;
};

// One thread walks the frames (each header gives the next frame's offset), validates each
// header as the CPU does, and links every frame into its chunk's list.
template <class C, class T>
__global__ void walk_kernel(decode_args<C, T> a) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  std::uint64_t at = 0, f = 0, tiles = 0;
  std::uint32_t walk = 0, eb0 = 0, mixed = 0;
  while (at < a.size) {
    const result<frame::header> parsed = frame::parse_header(a.payload + at, a.size - at);
    if (!parsed) {
      walk = static_cast<std::uint32_t>(parsed.code());
      break;
    }
    if (f == a.ws.max_frames) {  // a frame the workspace has no slot for (the CPU has no limit)
      walk = static_cast<std::uint32_t>(errc::buffer_too_small);
      break;
    }
    const frame::header& h = *parsed;
    status s = C::check_frame_header(a.cfg, a.codec, h, a.n);
    if (s && h.indices != frame::index_format::none && h.indices != frame::index_format::u32_list)
      s = status{errc::codec_mismatch, "the CUDA backend decodes u32 index lists only (compact_indices = false)"};
    frame_entry e{};
    e.offset = at;
    e.frame_bytes = h.frame_bytes();
    e.tile0 = tiles;
    e.kept = h.kept_count;
    e.dense_count = h.dense_count;
    e.element_offset = h.element_offset;
    e.idx_error = ~std::uint64_t{0};
    e.meta_error = ~std::uint64_t{0};
    e.index_off = h.index_offset();
    e.value_off = h.value_offset();
    e.next = no_frame;
    e.head_crc = crc_bytes(a.payload + at, frame::crc_offset);
    e.stored_crc = h.crc;
    e.hdr_error = static_cast<std::uint32_t>(s.code());
    a.ws.frames[f] = e;
    tiles += ceil_div(e.frame_bytes - frame::header_bytes, tile_bytes);
    const std::uint32_t eb = h.source_dtype == dtype::f32 ? 4 : 2;
    if (f == 0) eb0 = eb;
    if (eb != eb0) mixed = 1;
    if (s) {
      const std::uint32_t c = h.chunk_id;
      if (a.ws.tail[c] == no_frame) {
        a.ws.head[c] = static_cast<std::uint32_t>(f);
      } else {
        a.ws.frames[a.ws.tail[c]].next = static_cast<std::uint32_t>(f);
      }
      a.ws.tail[c] = static_cast<std::uint32_t>(f);
    }
    ++f;
    at += e.frame_bytes;
    if (!s) break;  // this frame fails: later frames cannot change the outcome
  }
  a.ws.ctl->frames = f;
  a.ws.ctl->body_tiles = tiles;
  a.ws.ctl->walk_error = walk;
  a.ws.ctl->element_bytes = eb0;
  a.ws.ctl->mixed = mixed;
}

// Per body tile of every walked frame: the CRC term, and (headers permitting) the index, group
// metadata and non-finite checks of the indices, metadata and values inside the tile.
template <class C, class T>
__global__ void __launch_bounds__(threads) check_kernel(decode_args<C, T> a) {
  using tr = traits<C>;
  using Q = typename tr::quantizer;
  __shared__ std::uint32_t stage[stage_words];
  __shared__ std::uint32_t slice[4][256];
  __shared__ std::uint32_t scratch[warps + 1];
  __shared__ std::uint64_t sh;
  __shared__ unsigned long long first_bad, first_bad_meta;
  __shared__ std::uint32_t non_finite;
  load_slices(slice);
  const std::uint64_t frames = a.ws.ctl->frames, total = a.ws.ctl->body_tiles;
  for (std::uint64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const std::uint64_t f = block_find(frames, tile, [&](std::uint64_t i) { return a.ws.frames[i].tile0; }, &sh);
    const frame_entry e = a.ws.frames[f];
    const std::uint64_t body = e.frame_bytes - frame::header_bytes;
    const std::uint64_t begin = (tile - e.tile0) * tile_bytes;
    const auto r = static_cast<std::uint32_t>(min_u64(tile_bytes, body - begin));
    const auto* src = reinterpret_cast<const std::uint32_t*>(a.payload + e.offset + frame::header_bytes + begin);
#pragma unroll 8
    for (std::uint32_t w = threadIdx.x; w < r / 4; w += threads) stage[pad(w)] = src[w];
    if (threadIdx.x == 0) {
      first_bad = ~0ull;
      first_bad_meta = ~0ull;
      non_finite = 0;
    }
    __syncthreads();
    const std::uint32_t crc = tile_crc(stage, r, slice, scratch);
    if (threadIdx.x == 0) atomicXor(&a.ws.frames[f].crc_acc, crc_shift(device_crc_tables, crc, body - begin - r));
    if (e.hdr_error == 0) {  // sections match the header: check what lies in this tile
      const std::uint64_t end = begin + r;
      if constexpr (!tr::dense) {
        const std::uint64_t i0 = e.index_off - frame::header_bytes, i1 = i0 + 4 * e.kept;
        for (std::uint64_t b = max_u64(begin, i0) + 4 * threadIdx.x; b < min_u64(end, i1); b += 4 * threads) {
          const std::uint64_t m = (b - i0) / 4;
          const auto w = static_cast<std::uint32_t>((b - begin) / 4);
          const std::uint32_t j = stage[pad(w)];
          const std::uint32_t prev = m == 0 ? 0 : (w > 0 ? stage[pad(w - 1)] : src[-1]);
          if (const status s = C::check_index(j, prev, m, e.dense_count); !s)
            atomicMin(&first_bad, static_cast<unsigned long long>((m << 8) | static_cast<std::uint32_t>(s.code())));
        }
      }
      if constexpr (tr::cast) {
        if (!a.cfg.allow_non_finite) {
          const std::uint64_t v0 = e.value_off - frame::header_bytes, v1 = v0 + tr::code_bytes * e.kept;
          for (std::uint64_t b = max_u64(begin, v0) + tr::code_bytes * threadIdx.x; b < min_u64(end, v1);
               b += tr::code_bytes * threads) {
            const auto code = get_code<typename tr::code_type>(stage, static_cast<std::uint32_t>((b - begin) / tr::code_bytes));
            if (!is_finite_bits(float_bits(Q::decode(a.cfg.quantize, {}, code)))) non_finite = 1;
          }
        }
      } else {  // grouped: metadata and codes are read from the frame itself (groups.cuh)
        const std::byte* fp = a.payload + e.offset;
        const std::uint64_t bad = meta_errors<C>(a.cfg.quantize, fp, e.kept, begin, end, threadIdx.x, threads);
        if (bad != ~std::uint64_t{0}) atomicMin(&first_bad_meta, static_cast<unsigned long long>(bad));
        if (!a.cfg.allow_non_finite && non_finite_in<C>(a.cfg.quantize, fp, e.value_off, e.kept, begin, end, threadIdx.x, threads))
          non_finite = 1;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if (first_bad != ~0ull) atomicMin(reinterpret_cast<unsigned long long*>(&a.ws.frames[f].idx_error), first_bad);
      if (first_bad_meta != ~0ull) atomicMin(reinterpret_cast<unsigned long long*>(&a.ws.frames[f].meta_error), first_bad_meta);
      if (non_finite) atomicOr(&a.ws.frames[f].non_finite, 1u);
    }
    __syncthreads();
  }
}

// One thread: the first failing frame decides, with the CPU's order of checks within a frame
// (header, CRC, header vs plan, indices, group metadata, values).
template <class C, class T>
__global__ void resolve_kernel(decode_args<C, T> a) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  std::uint32_t code = 0;
  for (std::uint64_t f = 0; f < a.ws.ctl->frames && code == 0; ++f) {
    const frame_entry& e = a.ws.frames[f];
    if (crc32c_combine(e.head_crc, e.crc_acc, e.frame_bytes - frame::header_bytes) != e.stored_crc) {
      code = static_cast<std::uint32_t>(errc::checksum_mismatch);
    } else if (e.hdr_error != 0) {
      code = e.hdr_error;
    } else if (e.idx_error != ~std::uint64_t{0}) {
      code = static_cast<std::uint32_t>(e.idx_error & 0xffu);
    } else if (e.meta_error != ~std::uint64_t{0}) {
      code = static_cast<std::uint32_t>(e.meta_error & 0xffu);
    } else if (e.non_finite != 0) {
      code = static_cast<std::uint32_t>(errc::non_finite_value);
    }
  }
  if (code == 0) code = a.ws.ctl->walk_error;
  a.ws.ctl->error = code;
  *a.rep = report{code == 0 ? a.size : 0, code, 0};
}

// Applies the elements [j0, j1) of a chunk that frame e carries, as the CPU's apply_frame
// does for the whole chunk. Block-wide; ends with a barrier so the next frame sees the writes.
template <class C, class T>
__device__ void apply_range(const decode_args<C, T>& a, const frame_entry& e, std::uint64_t j0, std::uint64_t j1,
                            std::uint64_t* sh) {
  using tr = traits<C>;
  using Q = typename tr::quantizer;
  using code_type = typename tr::code_type;
  const auto& qc = a.cfg.quantize;
  const std::byte* f = a.payload + e.offset;
  [[maybe_unused]] const auto* codes = reinterpret_cast<const code_type*>(f + e.value_off);  // casts only
  T* region = a.out + e.element_offset;
  if constexpr (tr::dense && !tr::cast) {  // grouped: each value with its group's metadata
    for (std::uint64_t j = j0 + threadIdx.x; j < j1; j += threads) {
      const float v = value_at<C>(qc, f, e.value_off, j);
      region[j] = from_float<T>(a.add ? canonical_nan(to_float(region[j]) + v) : v);
    }
  } else if constexpr (tr::dense) {
    constexpr unsigned unroll = 8;  // loads first, so that many bytes are in flight
    for (std::uint64_t base = j0; base < j1; base += threads * unroll) {
      float v[unroll], o[unroll];
#pragma unroll
      for (unsigned k = 0; k < unroll; ++k) {
        const std::uint64_t j = base + k * threads + threadIdx.x;
        if (j < j1) {
          v[k] = Q::decode(qc, {}, codes[j]);
          o[k] = a.add ? to_float(region[j]) : 0.0f;
        }
      }
#pragma unroll
      for (unsigned k = 0; k < unroll; ++k) {
        const std::uint64_t j = base + k * threads + threadIdx.x;
        if (j < j1) region[j] = from_float<T>(a.add ? canonical_nan(o[k] + v[k]) : v[k]);
      }
    }
  } else {
    const auto* idx = reinterpret_cast<const std::uint32_t*>(f + e.index_off);
    if (threadIdx.x < 2) {  // lower bounds of j0 and j1 among the ascending indices
      const std::uint64_t target = threadIdx.x == 0 ? j0 : j1;
      std::uint64_t lo = 0, hi = e.kept;
      while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (idx[mid] < target) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      sh[threadIdx.x] = lo;
    }
    if (!a.add)
      for (std::uint64_t j = j0 + threadIdx.x; j < j1; j += threads) region[j] = from_float<T>(0.0f);
    __syncthreads();
    const std::uint64_t m0 = sh[0], m1 = sh[1];
    for (std::uint64_t m = m0 + threadIdx.x; m < m1; m += threads) {
      const std::uint32_t j = idx[m];
      float v;
      if constexpr (tr::cast) {
        v = Q::decode(qc, {}, codes[m]);
      } else {
        v = value_at<C>(qc, f, e.value_off, m);
      }
      region[j] = from_float<T>(a.add ? canonical_nan(to_float(region[j]) + v) : v);
    }
  }
  __syncthreads();
}

// Tiles of the output; each applies the frames of the chunks it overlaps, in payload order.
template <class C, class T>
__global__ void __launch_bounds__(threads) apply_kernel(decode_args<C, T> a, std::uint64_t tiles) {
  using P = typename traits<C>::partitioner;
  __shared__ std::uint64_t sh[2];
  if (a.ws.ctl->error != 0 || a.ws.ctl->mixed != 0 || a.ws.ctl->frames == 0) return;
  const std::uint32_t eb = a.ws.ctl->element_bytes;
  const std::uint64_t chunks = P::chunk_count(a.cfg.partition, a.n, eb);
  for (std::uint64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::uint64_t lo = tile * apply_tile, hi = min_u64(a.n, lo + apply_tile);
    std::uint64_t c = block_find(chunks, lo, [&](std::uint64_t i) { return P::chunk_at(a.cfg.partition, a.n, eb, i).offset; }, sh);
    for (; c < chunks; ++c) {
      const chunk_range r = P::chunk_at(a.cfg.partition, a.n, eb, c);
      if (r.offset >= hi) break;
      const std::uint64_t b0 = max_u64(lo, r.offset), b1 = min_u64(hi, r.offset + r.count);
      if (b0 >= b1) continue;
      for (std::uint32_t f = a.ws.head[c]; f != no_frame; f = a.ws.frames[f].next)
        apply_range(a, a.ws.frames[f], b0 - r.offset, b1 - r.offset, sh);
    }
  }
}

// Frames of both source dtypes (two chunk plans) may overlap in any way: one block applies
// every frame in payload order. Rare, slow, exact.
template <class C, class T>
__global__ void __launch_bounds__(threads) apply_mixed_kernel(decode_args<C, T> a) {
  __shared__ std::uint64_t sh[2];
  if (a.ws.ctl->error != 0 || a.ws.ctl->mixed == 0) return;
  for (std::uint64_t f = 0; f < a.ws.ctl->frames; ++f) apply_range(a, a.ws.frames[f], 0, a.ws.frames[f].dense_count, sh);
}

// What the host can see of the quantizer's config that this backend cannot run: a cast (fast
// path) configured with groups or stochastic rounding, or a group size the spans cannot hold.
template <class C>
status check_quantizer_config(const C& comp) {
  using Q = typename traits<C>::quantizer;
  const auto& qc = comp.get_config().quantize;
  if constexpr (traits<C>::cast) {
    if (Q::group_size(qc) != 0 || Q::stochastic(qc))
      return {errc::invalid_argument, "gradcomp::cuda: a cast (ungrouped_quantizer) configured with groups or stochastic rounding"};
  } else if (!span_group_ok(Q::group_size(qc))) {
    return {errc::invalid_argument, "gradcomp::cuda: quantizer group sizes must be 0 or a power of two up to 4096"};
  }
  return {};
}

template <class C, class T>
status check_state(const C& comp, std::size_t n, const device_state& st) {
  if (n != st.size) return {errc::size_mismatch, "gradient size differs from the state's"};
  if (traits<C>::has_state && st.residual == nullptr && n > 0) return {errc::size_mismatch, "state has no residual"};
  if (st.step == nullptr) return {errc::invalid_argument, "state has no step counter: use make_state()"};
  (void)comp;
  return {};
}

template <gradient_element T, class C>
status decode(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out, bool add,
              report* rep);

}  // namespace detail

// --- State.

// Device bytes of the state of a gradient of n elements (step counter, residual).
template <class C>
std::size_t state_bytes(const C&, std::size_t n) {
  return 256 + (detail::traits<C>::has_state ? detail::align_up(4 * n) : 0);
}

// A zeroed state in `memory` (device, state_bytes(n), 256-byte aligned); zeroing is enqueued
// on `stream`.
template <class C>
result<device_state> make_state(const C& comp, std::span<std::byte> memory, std::size_t n, cudaStream_t stream = nullptr) {
  const std::size_t bytes = state_bytes(comp, n);
  if (memory.size() < bytes) return status{errc::buffer_too_small, "state memory smaller than state_bytes()"};
  if (!detail::aligned(memory.data(), 256)) return status{errc::invalid_argument, "state memory not 256-byte aligned"};
  device_state s;
  s.size = n;
  s.step = reinterpret_cast<std::uint64_t*>(memory.data());
  s.residual = detail::traits<C>::has_state ? reinterpret_cast<float*>(memory.data() + 256) : nullptr;
  if (auto e = cudaMemsetAsync(memory.data(), 0, bytes, stream); e != cudaSuccess) return detail::cuda_status(e);
  return s;
}

// Copies a device state into a host state (same size, e.g. from compressor::make_state) for
// save_checkpoint, and back for load_checkpoint. Synchronous: not for the hot path.
inline status download_state(const device_state& d, state& h, cudaStream_t stream = nullptr) {
  if (h.size != d.size) return {errc::size_mismatch, "host state size differs from the device state's"};
  if ((d.residual != nullptr) != !h.residual.empty() && d.size > 0) return {errc::size_mismatch, "residuals differ"};
  cudaError_t e = cudaMemcpyAsync(&h.step, d.step, sizeof h.step, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess && d.residual && d.size)
    e = cudaMemcpyAsync(h.residual.data(), d.residual, 4 * d.size, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  return detail::cuda_status(e);
}
inline status upload_state(const state& h, const device_state& d, cudaStream_t stream = nullptr) {
  if (h.size != d.size) return {errc::size_mismatch, "host state size differs from the device state's"};
  if ((d.residual != nullptr) != !h.residual.empty() && d.size > 0) return {errc::size_mismatch, "residuals differ"};
  cudaError_t e = cudaMemcpyAsync(d.step, &h.step, sizeof h.step, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess && d.residual && d.size)
    e = cudaMemcpyAsync(d.residual, h.residual.data(), 4 * d.size, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  return detail::cuda_status(e);
}

// --- Compression.

// Workspace bytes for compress<T>(comp, ..., a gradient of n elements) with comp's current
// config (a config change, e.g. of density, may change it: query again).
template <gradient_element T, class C>
std::size_t compress_workspace_bytes(const C& comp, std::size_t n) {
  const detail::host_plan p = detail::plan_on_host<C, T>(comp, n);
  return detail::carve_compress<C>(nullptr, p.chunks, p.total.sel).bytes;
}

// Compresses grad (device, n elements) into payload (device, >= comp.max_payload_bytes<T>(n))
// as compressor::compress does: one frame per chunk, back to back; advances st.step and the
// residual. Asynchronous: *out (device) receives the payload size and errc.
template <gradient_element T, class C>
status compress(const C& comp, const executor& ex, std::span<const T> grad, const device_state& st,
                std::span<std::byte> payload, report* out) {
  using tr = detail::traits<C>;
  const std::size_t n = grad.size();
  if (auto s = comp.validate(); !s) return s;
  if (auto s = detail::check_quantizer_config(comp); !s) return s;
  if (auto s = detail::check_state<C, T>(comp, n, st); !s) return s;
  if (comp.template chunk_count<T>(n) > 0xffffffffu) return {errc::invalid_argument, "more than 2^32 chunks"};
  if (payload.size() < comp.template max_payload_bytes<T>(n))
    return {errc::buffer_too_small, "payload smaller than max_payload_bytes()"};
  const detail::host_plan p = detail::plan_on_host<C, T>(comp, n);
  if (p.sparse_chunk_too_big) return {errc::invalid_argument, "sparse chunks hold at most 2^32 - 1 elements"};
  const detail::compress_space need = detail::carve_compress<C>(nullptr, p.chunks, p.total.sel);
  if (ex.workspace.size() < need.bytes) return {errc::buffer_too_small, "workspace smaller than compress_workspace_bytes()"};
  if (!detail::aligned(ex.workspace.data(), 256)) return {errc::invalid_argument, "workspace not 256-byte aligned"};
  if (!detail::aligned(payload.data(), 8)) return {errc::invalid_argument, "payload not 8-byte aligned"};
  if (out == nullptr) return {errc::invalid_argument, "no report"};

  detail::compress_args<C, T> a{comp.get_config(), comp.codec_id(), dtype_of<T>, n, p.chunks, p.total,
                                grad.data(), st.residual, st.step, payload.data(), out,
                                detail::carve_compress<C>(ex.workspace.data(), p.chunks, p.total.sel)};
  const cudaStream_t s = ex.stream;
  constexpr unsigned B = detail::threads;
  if (auto e = cudaMemsetAsync(a.ws.ctl, 0, sizeof(detail::control), s); e != cudaSuccess) return detail::cuda_status(e);
  if (!a.cfg.allow_non_finite && n > 0)
    detail::nonfinite_kernel<T><<<detail::grid_for(detail::ceil_div(n, B)), B, 0, s>>>(grad.data(), n, a.ws.ctl);
  detail::plan_kernel<C, T><<<1, B, 0, s>>>(a);
  if constexpr (tr::dense) {
    if constexpr (tr::cast)
      if (p.total.val) detail::encode_dense_kernel<C, T><<<detail::grid_for(p.total.val), B, 0, s>>>(a);
  } else if (p.total.sel) {
    if (auto e = cudaMemsetAsync(a.ws.hist, 0, p.chunks * detail::hist_bins * 4, s); e != cudaSuccess)
      return detail::cuda_status(e);
    const unsigned gs = detail::grid_for(p.total.sel), gc = detail::grid_for(p.chunks);
    detail::hist_kernel<C, T, 0><<<gs, B, 0, s>>>(a);
    detail::find_kernel<0><<<gc, B, 0, s>>>(p.chunks, a.ws.sel, a.ws.hist, a.ws.ctl);
    detail::hist_kernel<C, T, 1><<<gs, B, 0, s>>>(a);
    detail::find_kernel<1><<<gc, B, 0, s>>>(p.chunks, a.ws.sel, a.ws.hist, a.ws.ctl);
    detail::hist_kernel<C, T, 2><<<gs, B, 0, s>>>(a);
    detail::find_kernel<2><<<gc, B, 0, s>>>(p.chunks, a.ws.sel, a.ws.hist, a.ws.ctl);
    detail::count_kernel<C, T><<<gs, B, 0, s>>>(a);
    detail::scan_tiles_kernel<><<<1, B, 0, s>>>(a.ws.counts, p.total.sel, a.ws.ctl);
    detail::write_kernel<C, T><<<gs, B, 0, s>>>(a);
    if constexpr (tr::cast)
      if (p.total.idx + p.total.val)
        detail::encode_sparse_kernel<C, T><<<detail::grid_for(p.total.idx + p.total.val), B, 0, s>>>(a);
  }
  if constexpr (!tr::cast) {  // grouped path: spans, then checksums and padding
    if (p.total.span) detail::encode_groups_kernel<C, T><<<detail::grid_for(p.total.span), B, 0, s>>>(a);
    if (p.total.body) detail::seal_kernel<C, T><<<detail::grid_for(p.total.body), B, 0, s>>>(a);
  }
  detail::header_kernel<C, T><<<detail::grid_for(detail::ceil_div(p.chunks, B)), B, 0, s>>>(a);
  return detail::cuda_status(cudaGetLastError());
}

// Convenience: the same, then waits for the stream and returns the payload size (or the
// device-reported error). The report lives in the workspace.
template <gradient_element T, class C>
result<std::size_t> compress(const C& comp, const executor& ex, std::span<const T> grad, const device_state& st,
                             std::span<std::byte> payload) {
  const detail::compress_space ws = detail::carve_compress<C>(ex.workspace.data(), 0, 0);
  if (auto s = compress<T>(comp, ex, grad, st, payload, ws.internal); !s) return s;
  report r;
  cudaError_t e = cudaMemcpyAsync(&r, ws.internal, sizeof r, cudaMemcpyDeviceToHost, ex.stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(ex.stream);
  if (e != cudaSuccess) return detail::cuda_status(e);
  if (r.error() != errc::ok) return status{r.error(), "reported by the device"};
  return static_cast<std::size_t>(r.bytes);
}

// --- Decoding.

// Frames a payload of `payload_bytes` can hold at most (a frame is at least a header).
constexpr std::size_t max_frames(std::size_t payload_bytes) { return payload_bytes / frame::header_bytes; }

// Workspace bytes to decode up to `frames` frames into a buffer of n elements. max_frames(S)
// always suffices for a payload of S bytes; a smaller count (chunk_count * senders) saves
// memory, and a payload with more frames than fit is rejected with buffer_too_small.
template <gradient_element T, class C>
std::size_t decode_workspace_bytes(const C& comp, std::size_t n, std::size_t frames) {
  return detail::carve_decode<C>(nullptr, detail::chunk_slots(comp, n), frames).bytes;
}

// As compressor::decompress / accumulate: every frame is validated before anything is
// written; on error `out` is untouched and *rep (device) holds the CPU's errc.
template <gradient_element T, class C>
status decompress(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out, report* rep) {
  return detail::decode<T>(comp, ex, payload, out, false, rep);
}
template <gradient_element T, class C>
status accumulate(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out, report* rep) {
  return detail::decode<T>(comp, ex, payload, out, true, rep);
}

// Convenience: the same, then waits for the stream and returns the outcome.
template <gradient_element T, class C>
status decompress(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out);
template <gradient_element T, class C>
status accumulate(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out);

namespace detail {

template <gradient_element T, class C>
status decode(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out, bool add,
              report* rep) {
  if (auto s = comp.validate(); !s) return s;
  if constexpr (traits<C>::cast)  // the fast decode ignores metadata
    if (traits<C>::quantizer::group_size(comp.get_config().quantize) != 0)
      return {errc::invalid_argument, "gradcomp::cuda: a cast (ungrouped_quantizer) configured with groups"};
  if (payload.empty()) return {errc::truncated, "empty payload"};
  const std::uint64_t slots = chunk_slots(comp, out.size());
  const std::size_t fixed = carve_decode<C>(nullptr, slots, 0).bytes;
  if (ex.workspace.size() < fixed + align_up(sizeof(frame_entry)))
    return {errc::buffer_too_small, "workspace smaller than decode_workspace_bytes()"};
  if (!aligned(ex.workspace.data(), 256)) return {errc::invalid_argument, "workspace not 256-byte aligned"};
  if (!aligned(payload.data(), 8)) return {errc::invalid_argument, "payload not 8-byte aligned"};
  if (rep == nullptr) return {errc::invalid_argument, "no report"};
  // As many frame slots as the workspace holds, and never more than the payload can need.
  const std::uint64_t fit = (ex.workspace.size() - fixed) / sizeof(frame_entry);
  const std::uint64_t frames = min_u64(fit, max_u64(1, max_frames(payload.size())));

  decode_args<C, T> a{comp.get_config(), comp.codec_id(), out.size(), payload.data(), payload.size(), out.data(), add, rep,
                      carve_decode<C>(ex.workspace.data(), slots, frames)};
  const cudaStream_t s = ex.stream;
  constexpr unsigned B = threads;
  cudaError_t e = cudaMemsetAsync(a.ws.ctl, 0, sizeof(control), s);
  if (e == cudaSuccess && slots) e = cudaMemsetAsync(a.ws.head, 0xff, 2 * slots * sizeof(std::uint32_t), s);
  if (e != cudaSuccess) return cuda_status(e);
  walk_kernel<C, T><<<1, 1, 0, s>>>(a);
  // Body tiles: at most one per tile_bytes of payload plus one partial tile per frame.
  check_kernel<C, T><<<grid_for(payload.size() / tile_bytes + frames + 1), B, 0, s>>>(a);
  resolve_kernel<C, T><<<1, 1, 0, s>>>(a);
  if (const std::uint64_t tiles = ceil_div(out.size(), apply_tile); tiles > 0) {
    apply_kernel<C, T><<<grid_for(tiles), B, 0, s>>>(a, tiles);
    apply_mixed_kernel<C, T><<<1, B, 0, s>>>(a);
  }
  return cuda_status(cudaGetLastError());
}

template <gradient_element T, class C>
status decode_sync(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out, bool add) {
  const decode_space ws = carve_decode<C>(ex.workspace.data(), 0, 0);
  if (auto s = decode<T>(comp, ex, payload, out, add, ws.internal); !s) return s;
  report r;
  cudaError_t e = cudaMemcpyAsync(&r, ws.internal, sizeof r, cudaMemcpyDeviceToHost, ex.stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(ex.stream);
  if (e != cudaSuccess) return cuda_status(e);
  if (r.error() != errc::ok) return {r.error(), "reported by the device"};
  return {};
}

}  // namespace detail

template <gradient_element T, class C>
status decompress(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out) {
  return detail::decode_sync<T>(comp, ex, payload, out, false);
}
template <gradient_element T, class C>
status accumulate(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out) {
  return detail::decode_sync<T>(comp, ex, payload, out, true);
}

}  // namespace gradcomp::cuda
