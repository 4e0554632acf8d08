#pragma once
// CUDA backend: exact top-k selection of every chunk at once (a radix select in three
// histogram passes over the keys |x|, then a scan that writes each frame's ascending
// indices), and the fused x = combine(g, e) of the first pass (topk_select.cuh holds the
// per-chunk search state).

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "plan.cuh"

namespace gradcomp::cuda::detail {

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

}  // namespace gradcomp::cuda::detail
