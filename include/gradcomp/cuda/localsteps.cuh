#pragma once
// Local steps on the GPU (docs/localsteps.md): the flow of localsteps/flow.hpp, written once,
// with this CUDA executor: the anchors, the outer momentum and the pseudo-gradients in device
// memory and the exchange on cuda::sharded's all-reduce. For the same config, compressor,
// parameters, world and rank it writes the CPU synchroniser's bytes (with sharded::codec<C> in
// mode::all_reduce) and its parameters.
//
//   cuda::localsteps::synchroniser<C> sync(cfg, comp);
//   sync.state_bytes(n, W, rank), sync.workspace_bytes(n, W)        // sizes first
//   sync.make_state(memory, params, W, rank, st, stream);             // once (synchronous)
//   after every inner step: sync.advance(st); then for each fragment f
//     if (sync.sends(st, f))   encode(ex, f, 0, params) / receive(ex, f, 0) / encode(ex, f, 1) / receive(ex, f, 1)
//     if (sync.applies(st, f)) apply(ex, f, st, params)
//
// Every call is stream-ordered and never allocates. As on cuda::sharded, a slot's checks run on
// the device: a failed receive lands in the fragment's report (read_report), and apply() then
// leaves the parameters, the anchor and the momentum as they were. A transport that keeps the
// replicas identical reads the report before apply() and skips the apply on every rank when
// one failed (a one-integer all-reduce), as the CPU caller does with receive()'s status.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../localsteps/flow.hpp"
#include "../localsteps/outer.hpp"
#include "sharded.cuh"

namespace gradcomp::cuda::localsteps {

using gradcomp::localsteps::config;
using gradcomp::localsteps::exchange;
using gradcomp::localsteps::outer_rule;

// One fragment's state: device arrays, host bookkeeping.
struct fragment_state : gradcomp::localsteps::sync_order {
  chunk_range range{0, 0};
  float* anchor = nullptr;    // the fragment's parameters after its last sync
  float* momentum = nullptr;  // the outer momentum (null when momentum = 0)
  float* values = nullptr;    // the pseudo-gradient being sent, then the received mean
  report* outcome = nullptr;  // the first failure of the exchange in flight
  cuda::sharded::device_state path;
};

struct state {
  std::size_t size = 0;
  std::uint32_t world = 1;
  std::uint32_t rank = 0;
  std::uint64_t step = 0;
  std::vector<fragment_state> fragments;
};

namespace detail {

using cuda::detail::grid_for;
using cuda::detail::threads;

template <class T>
__global__ void pseudo_gradient_kernel(const float* anchor, const T* params, float* values, std::uint64_t n, float world) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{threads} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * threads)
    values[i] = gradcomp::localsteps::pseudo_gradient(anchor[i], to_float(params[i]), world);
}

// The parameters of a fragment as its first anchor (fp32).
template <class T>
__global__ void anchor_kernel(const T* params, float* anchor, std::uint64_t n) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{threads} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * threads)
    anchor[i] = to_float(params[i]);
}

// The path's report of a receive into the fragment's (the first failure stays).
template <class = void>
__global__ void keep_failure_kernel(const report* from, report* to) {
  if (to->code == 0 && from->code != 0) *to = *from;
}

template <class T>
__global__ void outer_kernel(outer_rule rule, float mix, const float* mean, float* anchor, float* momentum, T* params, std::uint64_t n,
                             const report* outcome) {
  if (outcome->code != 0) return;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{threads} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * threads) {
    gradcomp::localsteps::outer_step(rule, mean[i], anchor[i], momentum == nullptr ? nullptr : momentum + i);
    params[i] = from_float<T>(gradcomp::localsteps::mixed(mix, to_float(params[i]), anchor[i]));
  }
}

inline unsigned grid_of(std::size_t n) { return grid_for(n / threads + 1); }
inline status launched() { return cuda::detail::cuda_status(cudaGetLastError()); }

// The CUDA executor of gradcomp::localsteps::detail::flow.
struct localsteps_executor {
  executor ex;

  static bool sized(const fragment_state& fs) { return fs.anchor != nullptr; }
  static bool has_momentum(const fragment_state& fs) { return fs.momentum != nullptr; }

  template <class T>
  status pseudo_gradient(fragment_state& fs, std::span<const T> local, float world) const {
    if (cudaError_t e = cudaMemsetAsync(fs.outcome, 0, sizeof(report), ex.stream); e != cudaSuccess) return cuda::detail::cuda_status(e);
    if (!local.empty())
      pseudo_gradient_kernel<T><<<grid_of(local.size()), threads, 0, ex.stream>>>(fs.anchor, local.data(), fs.values, local.size(), world);
    return launched();
  }

  template <class Path>
  status encode(const Path& path, std::size_t k, fragment_state& fs, std::span<std::byte> out) const {
    const std::span<const float> sent = k == 0 ? std::span<const float>(fs.values, fs.range.count) : std::span<const float>{};
    return path.template encode<float>(ex, k, sent, fs.path, out);
  }

  template <class Path>
  status receive(const Path& path, std::size_t k, fragment_state& fs, std::span<const std::byte> in, bool last) const {
    const std::span<float> out = last ? std::span<float>(fs.values, fs.range.count) : std::span<float>{};
    if (status s = path.template receive<float>(ex, k, fs.path, in, out); !s) return s;
    keep_failure_kernel<><<<1, 1, 0, ex.stream>>>(fs.path.outcome, fs.outcome);
    return launched();
  }

  template <class T>
  status outer(const outer_rule& rule, float mix, fragment_state& fs, std::span<T> local) const {
    if (!local.empty())
      outer_kernel<T><<<grid_of(local.size()), threads, 0, ex.stream>>>(rule, mix, fs.values, fs.anchor, fs.momentum, local.data(),
                                                                         local.size(), fs.outcome);
    return launched();
  }
};

}  // namespace detail

template <class C>
class synchroniser : public gradcomp::localsteps::detail::flow<cuda::sharded::codec<C>> {
  using flow = gradcomp::localsteps::detail::flow<cuda::sharded::codec<C>>;

 public:
  using state_type = localsteps::state;

  synchroniser(const config& c, const C& comp) : flow(c, cuda::sharded::codec<C>(comp, gradcomp::sharded::mode::all_reduce)) {}

  // Device bytes of a rank's state, and of the workspace every call takes.
  std::size_t state_bytes(std::size_t n, std::uint32_t world, std::uint32_t rank) const {
    std::size_t b = 0;
    for (std::size_t f = 0; f < this->get_config().fragments; ++f)
      b += fragment_bytes(gradcomp::localsteps::fragment_of(n, this->get_config().fragments, f).count, world, rank);
    return b;
  }
  std::size_t workspace_bytes(std::size_t n, std::uint32_t world) const {
    std::size_t b = 0;
    for (std::size_t f = 0; f < this->get_config().fragments; ++f)
      b = std::max(b, this->path().template workspace_bytes<float>(gradcomp::localsteps::fragment_of(n, this->get_config().fragments, f).count, world));
    return b;
  }

  // Carves `memory` (device, state_bytes, 256-byte aligned) into rank `rank`'s state, every
  // anchor copied from `params` (device, every rank the same values; float or bf16_t). Synchronous.
  status make_state(std::span<std::byte> memory, std::span<const float> params, std::uint32_t world, std::uint32_t rank, state_type& st,
                    cudaStream_t stream = nullptr) const {
    return make_state_of<float>(memory, params, world, rank, st, stream);
  }
  status make_state(std::span<std::byte> memory, std::span<const bf16_t> params, std::uint32_t world, std::uint32_t rank, state_type& st,
                    cudaStream_t stream = nullptr) const {
    return make_state_of<bf16_t>(memory, params, world, rank, st, stream);
  }

  result<exchange> describe(std::size_t f, std::size_t k, const state_type& st) const {
    return flow::describe(detail::localsteps_executor{}, f, k, st);
  }

  // Phase 0 reads the fragment of `params` (device, all st.size parameters); later phases take
  // an empty span. `out` (device) holds describe(f, k)->send_bytes.
  status encode(const executor& ex, std::size_t f, std::size_t k, std::span<const float> params, state_type& st, std::span<std::byte> out) const {
    detail::localsteps_executor d{ex};
    return flow::template encode<float>(d, f, k, params, st, out);
  }
  status encode(const executor& ex, std::size_t f, std::size_t k, std::span<const bf16_t> params, state_type& st,
                std::span<std::byte> out) const {
    detail::localsteps_executor d{ex};
    return flow::template encode<bf16_t>(d, f, k, params, st, out);
  }

  // `in` (device) holds describe(f, k)->receive_bytes as the transport delivered them; after
  // the last phase the mean waits in the state for apply().
  status receive(const executor& ex, std::size_t f, std::size_t k, state_type& st, std::span<const std::byte> in) const {
    detail::localsteps_executor d{ex};
    return flow::receive(d, f, k, st, in);
  }

  // The outer step with the received mean and the fragment of `params` (device) replaced by (or
  // mixed with) the new anchor; nothing changes where the exchange's report says it failed.
  status apply(const executor& ex, std::size_t f, state_type& st, std::span<float> params) const {
    detail::localsteps_executor d{ex};
    return flow::template apply<float>(d, f, st, params);
  }
  status apply(const executor& ex, std::size_t f, state_type& st, std::span<bf16_t> params) const {
    detail::localsteps_executor d{ex};
    return flow::template apply<bf16_t>(d, f, st, params);
  }

  // The first failure of fragment f's last exchange, copied to the host (synchronous).
  result<report> read_report(std::size_t f, const state_type& st, cudaStream_t stream = nullptr) const {
    if (status s = this->check(detail::localsteps_executor{}, f, st); !s) return s;
    report r;
    cudaError_t e = cudaMemcpyAsync(&r, st.fragments[f].outcome, sizeof r, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return cuda::detail::cuda_status(e);
    return r;
  }

 private:
  template <class T>
  status make_state_of(std::span<std::byte> memory, std::span<const T> params, std::uint32_t world, std::uint32_t rank, state_type& st,
                       cudaStream_t stream) const {
    if (status s = this->validate(); !s) return s;
    if (world == 0 || rank >= world) return {errc::invalid_argument, "local steps: world >= 1 and rank < world"};
    if (memory.size() < state_bytes(params.size(), world, rank)) return {errc::buffer_too_small, "state memory smaller than state_bytes()"};
    if (!cuda::detail::aligned(memory.data(), 256)) return {errc::invalid_argument, "state memory not 256-byte aligned"};
    const config& c = this->get_config();
    state_type next;
    next.size = params.size();
    next.world = world;
    next.rank = rank;
    std::size_t at = 0;
    for (std::size_t f = 0; f < c.fragments; ++f) {
      fragment_state fs;
      fs.range = gradcomp::localsteps::fragment_of(params.size(), c.fragments, f);
      const std::size_t count = fs.range.count;
      const std::size_t bytes = fragment_bytes(count, world, rank);
      cuda::detail::carver k(memory.data() + at);
      fs.outcome = k.take<report>(1);
      fs.anchor = k.take<float>(count);
      fs.values = k.take<float>(count);
      if (c.momentum > 0.0f) fs.momentum = k.take<float>(count);
      const std::size_t path_bytes = this->path().state_bytes(count, world, rank);
      if (status s = this->path().make_state(memory.subspan(at + k.used(), path_bytes), count, world, rank, fs.path, stream); !s) return s;
      cudaError_t e = cudaMemsetAsync(fs.outcome, 0, sizeof(report), stream);
      if (e == cudaSuccess && fs.momentum != nullptr) e = cudaMemsetAsync(fs.momentum, 0, 4 * count, stream);
      if (e != cudaSuccess) return cuda::detail::cuda_status(e);
      if (count > 0) {  // the anchor: the fragment's parameters in fp32 
        detail::anchor_kernel<T><<<detail::grid_of(count), detail::threads, 0, stream>>>(params.data() + fs.range.offset, fs.anchor, count);
        if (status s = detail::launched(); !s) return s;
      }
      at += bytes;
      next.fragments.push_back(fs);
    }
    if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return cuda::detail::cuda_status(e);
    st = std::move(next);
    return {};
  }

  std::size_t fragment_bytes(std::size_t count, std::uint32_t world, std::uint32_t rank) const {
    cuda::detail::carver k(nullptr);
    k.take<report>(1);
    k.take<float>(count);
    k.take<float>(count);
    if (this->get_config().momentum > 0.0f) k.take<float>(count);
    return k.used() + this->path().state_bytes(count, world, rank);
  }
};

}  // namespace gradcomp::cuda::localsteps
