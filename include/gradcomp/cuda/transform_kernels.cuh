#pragma once
// The transform's passes on the device (a composition whose fifth policy is not the identity):
// before selection every chunk is transformed into the state's buffer, which the phases then
// read in place of the gradient; after validation each frame is decoded into a scratch
// buffer, inverted and written or added to the output, frame by frame in the CPU's order, so
// that the bits are the CPU's. Each thread takes whole blocks and runs the policy's per-block
// functions (GRADCOMP_HD), the same code as the host's.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../core/byteio.hpp"
#include "../core/numeric.hpp"
#include "../transform/policy.hpp"
#include "common.cuh"
#include "decode_kernels.cuh"
#include "plan.cuh"

namespace gradcomp::cuda::detail {

// buf = the transform of every chunk of the fp32 gradient g (n values); tmp: n floats of
// scratch. A CUDA block per chunk, a thread per transform block.
template <class C>
__global__ void __launch_bounds__(threads) transform_kernel(typename C::config cfg, const float* g, std::uint64_t n,
                                                            float* buf, float* tmp) {
  using P = typename traits<C>::partitioner;
  using X = typename C::transform;
  const std::uint64_t chunks = P::chunk_count(cfg.partition, n, 4);
  const std::size_t block = X::block(cfg.transform);
  for (std::uint64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const chunk_range r = P::chunk_at(cfg.partition, n, 4, c);
    for (std::uint64_t t = threadIdx.x, count = transform::block_count(r.count, block); t < count; t += threads) {
      const transform::block_span s = transform::block_number(r.count, block, t);
      float* x = buf + r.offset + s.offset;
      for (std::size_t j = 0; j < s.length; ++j) x[j] = g[r.offset + s.offset + j];
      X::forward_block(cfg.transform, static_cast<std::uint32_t>(c), s.offset, x, tmp + r.offset + s.offset, s.length);
    }
  }
}

// One validated frame: decoded into buf (its chunk's place), inverted there, then written or
// added to a.out. Block-wide; ends with a barrier.
template <class C, class T>
__device__ void apply_inverted(const decode_args<C, T>& a, const frame_entry& e, float* buf, float* tmp, std::uint64_t* sh) {
  using X = typename C::transform;
  const decode_args<C, float> into{a.cfg, a.codec, a.n, a.payload, a.size, buf, false, a.rep, a.ws, a.g};
  apply_range(into, e, 0, e.dense_count, sh);  // ends with a barrier
  const std::uint32_t chunk = load_le<std::uint32_t>(a.payload + e.offset + 16);
  const std::size_t block = X::block(a.cfg.transform);
  float* const v = buf + e.element_offset;
  for (std::uint64_t t = threadIdx.x, count = transform::block_count(e.dense_count, block); t < count; t += threads) {
    const transform::block_span s = transform::block_number(e.dense_count, block, t);
    X::inverse_block(a.cfg.transform, chunk, s.offset, v + s.offset, tmp + e.element_offset + s.offset, s.length);
  }
  __syncthreads();
  T* const out = a.out + e.element_offset;
  for (std::uint64_t j = threadIdx.x; j < e.dense_count; j += threads)
    out[j] = from_float<T>(a.add ? canonical_nan(to_float(out[j]) + v[j]) : v[j]);
  __syncthreads();
}

// apply_kernel's and apply_mixed_kernel's work for a transformed composition: a CUDA block per
// chunk applies that chunk's frames in payload order; frames of both source dtypes (two chunk
// plans) all go through one block in payload order.
template <class C, class T>
__global__ void __launch_bounds__(threads) apply_transformed_kernel(decode_args<C, T> a, float* buf, float* tmp) {
  using P = typename traits<C>::partitioner;
  __shared__ std::uint64_t sh[2];
  if (a.ws.ctl->error != 0 || a.ws.ctl->frames == 0) return;
  if (a.ws.ctl->mixed != 0) {
    if (blockIdx.x == 0)
      for (std::uint64_t f = 0; f < a.ws.ctl->frames; ++f) apply_inverted(a, a.ws.frames[f], buf, tmp, sh);
    return;
  }
  const std::uint64_t chunks = P::chunk_count(a.cfg.partition, a.n, a.ws.ctl->element_bytes);
  for (std::uint64_t c = blockIdx.x; c < chunks; c += gridDim.x)
    for (std::uint32_t f = a.ws.head[c]; f != no_frame; f = a.ws.frames[f].next) apply_inverted(a, a.ws.frames[f], buf, tmp, sh);
}

}  // namespace gradcomp::cuda::detail
