#pragma once
// Local steps on the GPU (docs/localsteps.md): localsteps::synchroniser's schedule, order and
// per-element math (localsteps/config.hpp, localsteps/outer.hpp), with the anchors, the outer
// momentum and the pseudo-gradients in device memory and the exchange on cuda::sharded's
// all-reduce. For the same config, compressor, parameters, world and rank it writes the CPU
// synchroniser's bytes (with sharded::codec<C> in mode::all_reduce) and its parameters.
//
//   cuda::localsteps::synchroniser<C> sync(cfg, comp);
//   sync.state_bytes(n, W, rank), sync.workspace_bytes(n, W)        // sizes first
//   sync.make_state(memory, params, W, rank, st, stream);             // once (synchronous)
//   after every inner step: sync.advance(st); then for each fragment f
//     if (sync.sends(st, f))   encode(ex, f, 0, params) / receive(ex, f, 0) / encode(ex, f, 1) / receive(ex, f, 1)
//     if (sync.applies(st, f)) apply(ex, f, params)
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

#include "../localsteps/config.hpp"
#include "../localsteps/outer.hpp"
#include "sharded.cuh"

namespace gradcomp::cuda::localsteps {

using gradcomp::localsteps::config;
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

template <class = void>
__global__ void pseudo_gradient_kernel(const float* anchor, const float* params, float* values, std::uint64_t n, float world) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{threads} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * threads)
    values[i] = gradcomp::localsteps::pseudo_gradient(anchor[i], params[i], world);
}

// The path's report of a receive into the fragment's (the first failure stays).
template <class = void>
__global__ void keep_failure_kernel(const report* from, report* to) {
  if (to->code == 0 && from->code != 0) *to = *from;
}

template <class = void>
__global__ void outer_kernel(outer_rule rule, float mix, const float* mean, float* anchor, float* momentum, float* params, std::uint64_t n,
                             const report* outcome) {
  if (outcome->code != 0) return;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{threads} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * threads) {
    gradcomp::localsteps::outer_step(rule, mean[i], anchor[i], momentum == nullptr ? nullptr : momentum + i);
    params[i] = gradcomp::localsteps::mixed(mix, params[i], anchor[i]);
  }
}

inline unsigned grid_of(std::size_t n) { return grid_for(n / threads + 1); }

}  // namespace detail

template <class C>
class synchroniser {
 public:
  using path_type = cuda::sharded::codec<C>;
  using state_type = localsteps::state;

  synchroniser(const config& c, const C& comp) : cfg_(c), path_(comp, gradcomp::sharded::mode::all_reduce) {}

  const config& get_config() const { return cfg_; }
  void set_config(const config& c) { cfg_ = c; }  // between syncs; the fragment layout must not change
  const path_type& path() const { return path_; }
  std::size_t phase_count() const { return path_.phase_count(); }
  status validate() const {
    if (status s = gradcomp::localsteps::validate(cfg_); !s) return s;
    return path_.validate();
  }

  // Device bytes of a rank's state, and of the workspace every call takes.
  std::size_t state_bytes(std::size_t n, std::uint32_t world, std::uint32_t rank) const {
    std::size_t b = 0;
    for (std::size_t f = 0; f < cfg_.fragments; ++f) b += fragment_bytes(gradcomp::localsteps::fragment_of(n, cfg_.fragments, f).count, world, rank);
    return b;
  }
  std::size_t workspace_bytes(std::size_t n, std::uint32_t world) const {
    std::size_t b = 0;
    for (std::size_t f = 0; f < cfg_.fragments; ++f)
      b = std::max(b, path_.template workspace_bytes<float>(gradcomp::localsteps::fragment_of(n, cfg_.fragments, f).count, world));
    return b;
  }

  // Carves `memory` (device, state_bytes, 256-byte aligned) into rank `rank`'s state, every
  // anchor copied from `params` (device, every rank the same values). Synchronous.
  status make_state(std::span<std::byte> memory, std::span<const float> params, std::uint32_t world, std::uint32_t rank, state_type& st,
                    cudaStream_t stream = nullptr) const {
    if (status s = validate(); !s) return s;
    if (world == 0 || rank >= world) return {errc::invalid_argument, "local steps: world >= 1 and rank < world"};
    if (memory.size() < state_bytes(params.size(), world, rank)) return {errc::buffer_too_small, "state memory smaller than state_bytes()"};
    if (!cuda::detail::aligned(memory.data(), 256)) return {errc::invalid_argument, "state memory not 256-byte aligned"};
    state_type next;
    next.size = params.size();
    next.world = world;
    next.rank = rank;
    std::size_t at = 0;
    for (std::size_t f = 0; f < cfg_.fragments; ++f) {
      fragment_state fs;
      fs.range = gradcomp::localsteps::fragment_of(params.size(), cfg_.fragments, f);
      const std::size_t count = fs.range.count;
      const std::size_t bytes = fragment_bytes(count, world, rank);
      cuda::detail::carver k(memory.data() + at);
      fs.outcome = k.take<report>(1);
      fs.anchor = k.take<float>(count);
      fs.values = k.take<float>(count);
      if (cfg_.momentum > 0.0f) fs.momentum = k.take<float>(count);
      const std::size_t path_bytes = path_.state_bytes(count, world, rank);
      if (status s = path_.make_state(memory.subspan(at + k.used(), path_bytes), count, world, rank, fs.path, stream); !s) return s;
      cudaError_t e = cudaMemsetAsync(fs.outcome, 0, sizeof(report), stream);
      if (e == cudaSuccess && count > 0) e = cudaMemcpyAsync(fs.anchor, params.data() + fs.range.offset, 4 * count, cudaMemcpyDeviceToDevice, stream);
      if (e == cudaSuccess && fs.momentum != nullptr) e = cudaMemsetAsync(fs.momentum, 0, 4 * count, stream);
      if (e != cudaSuccess) return cuda::detail::cuda_status(e);
      at += bytes;
      next.fragments.push_back(fs);
    }
    if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return cuda::detail::cuda_status(e);
    st = std::move(next);
    return {};
  }

  // --- The schedule (the CPU synchroniser's).
  void advance(state_type& st) const { ++st.step; }
  bool sends(const state_type& st, std::size_t f) const { return gradcomp::localsteps::sends_at(cfg_, f, st.step); }
  bool applies(const state_type& st, std::size_t f) const { return gradcomp::localsteps::applies_at(cfg_, f, st.step); }
  chunk_range fragment(const state_type& st, std::size_t f) const { return st.fragments.at(f).range; }

  // The path's phase k for fragment f (all-to-all, then all-gather).
  result<gradcomp::sharded::phase> describe(std::size_t f, std::size_t k, const state_type& st) const {
    if (status s = check(f, st); !s) return s;
    return path_.describe(k, st.fragments[f].path);
  }

  // Phase 0 reads the fragment of `params` (device, all st.size parameters); later phases take
  // an empty span. `out` (device) holds describe(f, k)->send_bytes().
  status encode(const executor& ex, std::size_t f, std::size_t k, std::span<const float> params, state_type& st, std::span<std::byte> out) const {
    const auto x = describe(f, k, st);
    if (!x) return x.error();
    fragment_state& fs = st.fragments[f];
    if (status s = fs.check_encode(k, !params.empty()); !s) return s;
    if (out.size() != x->send_bytes()) return {errc::size_mismatch, "local steps: send buffer differs from describe().send_bytes()"};
    std::span<const float> sent;
    if (k == 0) {
      if (params.size() != st.size) return {errc::size_mismatch, "local steps: parameters differ from the state's size"};
      const std::size_t n = fs.range.count;
      if (cudaError_t e = cudaMemsetAsync(fs.outcome, 0, sizeof(report), ex.stream); e != cudaSuccess) return cuda::detail::cuda_status(e);
      if (n > 0)
        detail::pseudo_gradient_kernel<><<<detail::grid_of(n), detail::threads, 0, ex.stream>>>(fs.anchor, params.data() + fs.range.offset,
                                                                                                 fs.values, n, static_cast<float>(st.world));
      if (status s = launched(); !s) return s;
      sent = {fs.values, n};
    }
    return path_.template encode<float>(ex, k, sent, fs.path, out);
  }

  // `in` (device) holds describe(f, k)->receive_bytes() as the transport delivered them; after
  // the last phase the mean waits in the state for apply().
  status receive(const executor& ex, std::size_t f, std::size_t k, state_type& st, std::span<const std::byte> in) const {
    const auto x = describe(f, k, st);
    if (!x) return x.error();
    fragment_state& fs = st.fragments[f];
    if (status s = fs.check_receive(k); !s) return s;
    const bool last = k + 1 == phase_count();
    const std::span<float> out = last ? std::span<float>(fs.values, fs.range.count) : std::span<float>{};
    if (status s = path_.template receive<float>(ex, k, fs.path, in, out); !s) return s;
    detail::keep_failure_kernel<><<<1, 1, 0, ex.stream>>>(fs.path.outcome, fs.outcome);
    if (status s = launched(); !s) return s;
    fs.received(k, last);
    return {};
  }

  // The outer step with the received mean and the fragment of `params` (device) replaced by (or
  // mixed with) the new anchor; nothing changes where the exchange's report says it failed.
  status apply(const executor& ex, std::size_t f, state_type& st, std::span<float> params) const {
    if (status s = check(f, st); !s) return s;
    fragment_state& fs = st.fragments[f];
    if (status s = fs.check_apply(); !s) return s;
    if (params.size() != st.size) return {errc::size_mismatch, "local steps: parameters differ from the state's size"};
    if ((fs.momentum != nullptr) != (cfg_.momentum > 0.0f)) return {errc::invalid_argument, "local steps: momentum switched on or off after make_state"};
    const std::size_t n = fs.range.count;
    if (n > 0)
      detail::outer_kernel<><<<detail::grid_of(n), detail::threads, 0, ex.stream>>>(outer_rule{cfg_.outer_lr, cfg_.momentum, cfg_.nesterov}, cfg_.mix,
                                                                                     fs.values, fs.anchor, fs.momentum,
                                                                                     params.data() + fs.range.offset, n, fs.outcome);
    if (status s = launched(); !s) return s;
    fs.applied();
    return {};
  }

  // The first failure of fragment f's last exchange, copied to the host (synchronous).
  result<report> read_report(std::size_t f, const state_type& st, cudaStream_t stream = nullptr) const {
    if (status s = check(f, st); !s) return s;
    report r;
    cudaError_t e = cudaMemcpyAsync(&r, st.fragments[f].outcome, sizeof r, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return cuda::detail::cuda_status(e);
    return r;
  }

 private:
  std::size_t fragment_bytes(std::size_t count, std::uint32_t world, std::uint32_t rank) const {
    cuda::detail::carver k(nullptr);
    k.take<report>(1);
    k.take<float>(count);
    k.take<float>(count);
    if (cfg_.momentum > 0.0f) k.take<float>(count);
    return k.used() + path_.state_bytes(count, world, rank);
  }
  status check(std::size_t f, const state_type& st) const {
    if (status s = validate(); !s) return s;
    if (st.fragments.size() != cfg_.fragments || f >= st.fragments.size())
      return {errc::invalid_argument, "local steps: no such fragment (or a state of another fragment count)"};
    if (st.fragments[f].range != gradcomp::localsteps::fragment_of(st.size, cfg_.fragments, f) || st.fragments[f].anchor == nullptr)
      return {errc::size_mismatch, "local steps: state not made by this synchroniser's make_state"};
    return {};
  }
  static status launched() { return cuda::detail::cuda_status(cudaGetLastError()); }

  config cfg_;
  path_type path_;
};

}  // namespace gradcomp::cuda::localsteps
