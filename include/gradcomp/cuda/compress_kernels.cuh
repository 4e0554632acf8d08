#pragma once
// CUDA backend: the compression kernels other than selection, in launch order: the plan,
// the codes of dense casts, of sparse casts, of grouped quantizers (groups.cuh), then the
// grouped frames' checksums and every frame's header.

#include <cub/block/block_scan.cuh>

#include "plan.cuh"
#include "select_kernels.cuh"

namespace gradcomp::cuda::detail {

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

}  // namespace gradcomp::cuda::detail
