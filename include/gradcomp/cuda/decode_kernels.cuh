#pragma once
// CUDA backend: the decoding kernels, in launch order: one thread walks the frames and checks
// each header, the body tiles are checksummed and their indices, metadata and values checked
// in parallel, one thread resolves the first error in the CPU's order (engine/frame_checks.hpp),
// and only then are the frames applied to the output, a tile of it per block.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "plan.cuh"

namespace gradcomp::cuda::detail {


// One frame found by the walk, with what the checks found.
struct frame_entry {
  std::uint64_t offset, frame_bytes, tile0;
  std::uint64_t kept, dense_count, element_offset;
  std::uint64_t idx_error;             // a descent (errc), else an out-of-range last index (1 << 8 | errc); ~0 if none
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
  float* transformed;   // with a transform: a decoded chunk's place before its inverse, then scratch
  std::uint64_t max_frames;
  std::size_t bytes;
};

template <class C>
std::uint64_t chunk_slots(const C& comp, std::size_t n) {  // either source dtype's plan
  const std::uint64_t a = comp.template chunk_count<float>(n), b = comp.template chunk_count<bf16_t>(n);
  return a > b ? a : b;
}

// n: the output's elements (the transform's buffers; 0 without a transform).
template <class C>
decode_space carve_decode(std::byte* base, std::uint64_t slots, std::uint64_t max_frames, std::uint64_t n = 0) {
  carver k(base);
  decode_space s{};
  s.internal = k.take<report>(1);
  s.ctl = k.take<control>(1);
  s.head = k.take<std::uint32_t>(2 * slots);
  s.tail = s.head ? s.head + slots : nullptr;
  s.transformed = k.take<float>(transform_bytes<C>(n) / 4);
  s.frames = k.take<frame_entry>(max_frames);
  s.max_frames = max_frames;
  s.bytes = k.used();
  return s;
}

// A decode whose payload length or go-ahead is known only on the device (a slot of the sharded
// path): `size` bounds the payload, *device_size gives it; a nonzero *gate (an earlier step's
// errc) makes the decode report that error and write nothing.
struct decode_gate {
  const std::uint64_t* device_size = nullptr;
  const std::uint32_t* gate = nullptr;
  bool check_only = false;  // validate, never apply
};

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
  decode_gate g{};
};

// One thread walks the frames (each header gives the next frame's offset), validates each
// header as the CPU does, and links every frame into its chunk's list.
template <class C, class T>
__global__ void walk_kernel(decode_args<C, T> a) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  std::uint64_t at = 0, f = 0, tiles = 0;
  std::uint32_t walk = 0, eb0 = 0, mixed = 0;
  const std::uint64_t size = a.g.device_size != nullptr ? min_u64(*a.g.device_size, a.size) : a.size;
  if (a.g.gate != nullptr && *a.g.gate != 0) {
    walk = *a.g.gate;
    at = size;  // (nothing walked)
  } else if (size == 0) {
    walk = static_cast<std::uint32_t>(errc::truncated);  // as the CPU refuses an empty payload
  }
  while (at < size) {
    const result<frame::header> parsed = frame::parse_header(a.payload + at, size - at);
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
          // The CPU's rule for u32 lists (indices::check): a descent anywhere is
          // index_not_ascending, else the list is out of range iff its last index is.
          if (m > 0 && j <= prev)
            atomicMin(&first_bad, static_cast<unsigned long long>(errc::index_not_ascending));
          else if (m + 1 == e.kept && j >= e.dense_count)
            atomicMin(&first_bad, (1ull << 8) | static_cast<std::uint32_t>(errc::index_out_of_range));
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

}  // namespace gradcomp::cuda::detail
