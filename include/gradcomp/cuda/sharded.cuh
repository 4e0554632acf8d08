#pragma once
// The sharded path on the GPU (docs/sharded.md): the flow of sharded/flow.hpp, written once,
// with this CUDA executor. For the same inputs, config, seed, step and rank it writes the CPU
// codec's slot bytes and outputs.
//
//   cuda::sharded::codec<C> codec(comp, sharded::mode::all_reduce);
//   codec.state_bytes(n, W, rank), codec.workspace_bytes<T>(n, W, rank)   // sizes first
//   codec.make_state(memory, n, W, rank, st, stream);                      // once (synchronous)
//   executor ex{stream, workspace};
//   codec.encode<T>(ex, 0, grad, st, send);        all-to-all (grouped ncclSend / ncclRecv)
//   codec.receive<T>(ex, 0, st, recv, {});
//   codec.encode<T>(ex, 1, {}, st, send);          all-gather (ncclAllGather)
//   codec.receive<T>(ex, 1, st, recv, out);
//
// Every call is stream-ordered, never waits for the device and never allocates. Argument
// errors the host can see come back at once with nothing enqueued. A slot's checks run on the
// device: the first failing slot in rank order (the CPU's errc) lands in the state's report
// (st.outcome, read_report), and every later step of that call does nothing (the output is
// untouched); the step still advances, as the host cannot know it failed.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../sharded/flow.hpp"
#include "../sharded/front.hpp"
#include "compressor.cuh"

namespace gradcomp::cuda::sharded {

using gradcomp::sharded::collective;
using gradcomp::sharded::mode;
using gradcomp::sharded::phase;
using gradcomp::sharded::stage;

// One rank's state in caller-owned device memory (the handles are host values).
struct device_state {
  std::size_t size = 0;
  std::uint32_t world = 1, rank = 0;
  stage at = stage::encode_scatter;
  std::uint64_t* step = nullptr;          // the sharded step (device)
  report* outcome = nullptr;              // the last receive's report (device)
  float* sum = nullptr;                   // the reduced shard, fp32 (device)
  std::vector<cuda::device_state> send;   // W: this rank's compressor state per destination shard
  cuda::device_state owner{};             // all-reduce: the re-encoding of its reduced shard
};

// What only make_state sets (sharded::detail::front's state check).
inline bool made(const device_state& st) { return st.step != nullptr; }

namespace detail {

using cuda::detail::grid_for;
using cuda::detail::threads;

// Kernels are templates, as every kernel of this header-only backend: a plain __global__
// function in a header would be defined in every translation unit that includes it.

template <class = void>
__global__ void copy_step_kernel(const std::uint64_t* from, std::uint64_t* to) { *to = *from; }
template <class = void>
__global__ void advance_kernel(std::uint64_t* step) { ++*step; }
template <class = void>
__global__ void slot_head_kernel(std::byte* slot, std::uint32_t sender, std::uint32_t shard) {
  gradcomp::sharded::write_slot_head(slot, sender, shard);
}

// The slot's head and frame walk (sharded::walk_slot), unless an earlier slot failed.
template <class = void>
__global__ void walk_kernel(const std::byte* slot, std::uint64_t slot_bytes, std::uint32_t sender, std::uint32_t shard,
                            std::uint64_t count, const std::uint64_t* step, std::uint32_t* gate, std::uint64_t* used) {
  if (*gate != 0) return;
  const gradcomp::sharded::slot_walk w = gradcomp::sharded::walk_slot(slot, slot_bytes, sender, shard, count, *step);
  *used = w.used;
  if (w.code != errc::ok) *gate = static_cast<std::uint32_t>(w.code);
}

// The zeros after the frames (bad_header where one is not).
template <class = void>
__global__ void __launch_bounds__(threads) padding_kernel(const std::byte* body, std::uint64_t bytes, const std::uint64_t* used,
                                                         std::uint32_t* gate) {
  if (*gate != 0) return;
  bool bad = false;
  for (std::uint64_t i = *used + blockIdx.x * std::uint64_t{threads} + threadIdx.x; i < bytes; i += std::uint64_t{gridDim.x} * threads)
    bad = bad || body[i] != std::byte{0};
  if (bad) atomicCAS(gate, 0u, static_cast<std::uint32_t>(errc::bad_header));
}

// A decode's verdict into the gate (the first failure stays).
template <class = void>
__global__ void gate_from_kernel(const report* r, std::uint32_t* gate) {
  if (*gate == 0 && r->code != 0) *gate = r->code;
}

template <class T>
__global__ void __launch_bounds__(threads) store_sum_kernel(const float* sum, T* out, std::uint64_t n, const std::uint32_t* gate) {
  if (*gate != 0) return;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{threads} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * threads) {
    if constexpr (sizeof(T) == sizeof(float)) {
      out[i] = sum[i];
    } else {
      out[i] = T::from_float(sum[i]);
    }
  }
}

template <class = void>
__global__ void report_kernel(const std::uint32_t* gate, report* r) { *r = report{0, *gate, 0}; }

// The workspace of a call: the gate, the slots' frame lengths, a report per compress and per
// decode, then the compressor's scratch.
struct space {
  std::uint32_t* gate = nullptr;
  std::uint64_t* used = nullptr;   // W
  report* reports = nullptr;       // W + 1
  std::byte* scratch = nullptr;
  std::size_t scratch_bytes = 0, bytes = 0;
};
inline space carve_space(std::byte* base, std::uint32_t world, std::size_t scratch_bytes) {
  cuda::detail::carver k(base);
  space s;
  s.gate = k.take<std::uint32_t>(1);
  s.used = k.take<std::uint64_t>(world);
  s.reports = k.take<report>(std::size_t{world} + 1);
  s.scratch = k.take<std::byte>(scratch_bytes);
  s.scratch_bytes = scratch_bytes;
  s.bytes = k.used();
  return s;
}

// The CUDA executor of sharded::detail::flow.
class sharded_executor {
 public:
  sharded_executor(const executor& ex, std::size_t world) : ex_(ex), s_(carve_space(ex.workspace.data(), static_cast<std::uint32_t>(world), 0)) {
    const std::size_t fixed = s_.bytes;
    s_ = carve_space(ex.workspace.data(), static_cast<std::uint32_t>(world), ex.workspace.size() > fixed ? ex.workspace.size() - fixed : 0);
  }

  template <class T, class C>
  status check_gradient(const C& c, std::span<const T>) const {
    if (!c.get_config().allow_non_finite)
      return {errc::invalid_argument, "gradcomp::cuda::sharded: allow_non_finite = false is not supported (a shard's rejection would leave the others sent)"};
    return {};
  }

  static std::span<const float> sum(const device_state& st) {
    return {st.sum, gradcomp::summable::shard_of(st.size, st.world, st.rank).count};
  }

  template <class T, class C>
  status write_slot(const C& c, std::span<const T> values, device_state& st, std::uint32_t shard, std::span<std::byte> slot) {
    note(cudaMemsetAsync(slot.data(), 0, slot.size(), ex_.stream));
    const bool owner = shard >= st.world;
    if (!values.empty()) {
      const cuda::device_state& s = owner ? st.owner : st.send[shard];
      copy_step_kernel<><<<1, 1, 0, ex_.stream>>>(st.step, s.step);  // the frames carry the sharded step
      if (status r = cuda::compress<T>(c, scratch(), values, s, slot.subspan(gradcomp::sharded::slot_head_bytes),
                                       s_.reports + (owner ? st.world : shard));
          !r)
        return r;
    }
    slot_head_kernel<><<<1, 1, 0, ex_.stream>>>(slot.data(), st.rank, owner ? st.rank : shard);
    return launched();
  }

  void begin_sum(device_state& st) {
    note(cudaMemsetAsync(st.sum, 0, 4 * gradcomp::summable::shard_of(st.size, st.world, st.rank).count, ex_.stream));
    note(cudaMemsetAsync(s_.gate, 0, sizeof(std::uint32_t), ex_.stream));
  }

  template <class C>
  status add_slot(const C& c, std::span<const std::byte> slot, std::uint32_t sender, std::size_t count, device_state& st) {
    if (status r = check(slot, sender, st.rank, count, st); !r) return r;
    if (count > 0) return decode<float>(c, slot, sender, std::span<float>(st.sum, count), true, false);
    return launched();
  }

  template <class T>
  status finish_sum(device_state& st, std::span<T> out) {
    if (!out.empty()) store_sum_kernel<T><<<grid_for(out.size() / threads + 1), threads, 0, ex_.stream>>>(st.sum, out.data(), out.size(), s_.gate);
    report_kernel<><<<1, 1, 0, ex_.stream>>>(s_.gate, st.outcome);
    return launched();
  }

  void begin_gather(device_state&) { note(cudaMemsetAsync(s_.gate, 0, sizeof(std::uint32_t), ex_.stream)); }

  template <class C>
  status check_slot(const C& c, std::span<const std::byte> slot, std::uint32_t owner, std::size_t count, device_state& st) {
    if (status r = check(slot, owner, owner, count, st); !r) return r;
    // (check_only: the output span gives the size, nothing is written to it)
    if (count > 0) return decode<float>(c, slot, owner, std::span<float>(st.sum, count), false, true);
    return launched();
  }

  template <class T, class C>
  status decode_slot(const C& c, std::span<const std::byte> slot, std::uint32_t owner, std::size_t count, device_state&, std::span<T> out) {
    if (count > 0) return decode<T>(c, slot, owner, out, false, false);
    return launched();
  }

  status finish_gather(device_state& st) {
    report_kernel<><<<1, 1, 0, ex_.stream>>>(s_.gate, st.outcome);
    return launched();
  }

  void advance(device_state& st) { advance_kernel<><<<1, 1, 0, ex_.stream>>>(st.step); }

  // Scratch the compress and decode calls of one rank need (the largest of them).
  template <class T, class C>
  static std::size_t scratch_bytes(const C& send, const C& owner, std::size_t n, std::uint32_t world) {
    const std::size_t most = gradcomp::summable::shard_size(n, world);
    const std::size_t slot = std::max({send.template max_payload_bytes<float>(most), send.template max_payload_bytes<bf16_t>(most),
                                       owner.template max_payload_bytes<float>(most), owner.template max_payload_bytes<bf16_t>(most)});
    std::size_t b = std::max(cuda::compress_workspace_bytes<T>(send, most), cuda::compress_workspace_bytes<float>(owner, most));
    b = std::max(b, cuda::decode_workspace_bytes<float>(send, most, cuda::max_frames(slot)));
    return std::max(b, cuda::decode_workspace_bytes<T>(owner, most, cuda::max_frames(slot)));
  }
  static std::size_t fixed_bytes(std::uint32_t world) { return carve_space(nullptr, world, 0).bytes; }

 private:
  executor scratch() const { return {ex_.stream, std::span<std::byte>(s_.scratch, s_.scratch_bytes)}; }

  status check(std::span<const std::byte> slot, std::uint32_t sender, std::uint32_t shard, std::size_t count, const device_state& st) {
    walk_kernel<><<<1, 1, 0, ex_.stream>>>(slot.data(), slot.size(), sender, shard, count, st.step, s_.gate, s_.used + sender);
    const std::size_t body = slot.size() - gradcomp::sharded::slot_head_bytes;
    padding_kernel<><<<grid_for(body / threads / 16 + 1), threads, 0, ex_.stream>>>(slot.data() + gradcomp::sharded::slot_head_bytes, body,
                                                                                 s_.used + sender, s_.gate);
    return launched();
  }

  template <class T, class C>
  status decode(const C& c, std::span<const std::byte> slot, std::uint32_t r, std::span<T> out, bool add, bool check_only) {
    cuda::detail::device_executor dev(scratch(), s_.reports + r, cuda::detail::decode_gate{s_.used + r, s_.gate, check_only});
    if (status e = engine::detail::decode<T>(c, dev, slot.subspan(gradcomp::sharded::slot_head_bytes), out, add); !e) return e;
    gate_from_kernel<><<<1, 1, 0, ex_.stream>>>(s_.reports + r, s_.gate);
    return launched();
  }

  void note(cudaError_t e) {
    if (first_ == cudaSuccess) first_ = e;
  }
  status launched() {
    note(cudaGetLastError());
    return cuda::detail::cuda_status(first_);
  }

  executor ex_;
  space s_;
  cudaError_t first_ = cudaSuccess;
};

}  // namespace detail

// The sharded path on the GPU. Spans hold device pointers; `executor` is the stream and the
// caller's device workspace (workspace_bytes<T>, 256-byte aligned).
template <class C>
class codec : public gradcomp::sharded::detail::front<C> {
  using front = gradcomp::sharded::detail::front<C>;

 public:
  using state = device_state;
  explicit codec(const C& c, mode m = mode::reduce_scatter) : front(c, m) {}
  codec(const C& send, const C& owner, mode m) : front(send, owner, m) {}
  using front::get_mode;
  using front::owner;
  using front::sender;

  // Device bytes of a rank's state: the step and report, each shard's compressor state, the
  // owner's, the fp32 sum.
  std::size_t state_bytes(std::size_t n, std::uint32_t world, std::uint32_t rank) const {
    std::size_t b = 256;
    for (std::uint32_t j = 0; j < world; ++j) b += cuda::detail::align_up(cuda::state_bytes(sender(), gradcomp::summable::shard_of(n, world, j).count));
    const std::size_t mine = world > 0 && rank < world ? gradcomp::summable::shard_of(n, world, rank).count : 0;
    if (get_mode() == mode::all_reduce) b += cuda::detail::align_up(cuda::state_bytes(owner(), mine));
    return b + cuda::detail::align_up(4 * mine);
  }
  template <gradient_element T = float>
  std::size_t workspace_bytes(std::size_t n, std::uint32_t world) const {
    return detail::sharded_executor::fixed_bytes(world) +
           cuda::detail::align_up(detail::sharded_executor::scratch_bytes<T>(sender(), owner(), n, world));
  }

  // Carves `memory` (device, state_bytes, 256-byte aligned) into a zeroed state (synchronous).
  status make_state(std::span<std::byte> memory, std::size_t n, std::uint32_t world, std::uint32_t rank, state& st,
                    cudaStream_t stream = nullptr) const {
    if (status s = this->f_.check_geometry(n, world, rank); !s) return s;
    if (memory.size() < state_bytes(n, world, rank)) return {errc::buffer_too_small, "state memory smaller than state_bytes()"};
    if (!cuda::detail::aligned(memory.data(), 256)) return {errc::invalid_argument, "state memory not 256-byte aligned"};
    state s;
    s.size = n;
    s.world = world;
    s.rank = rank;
    s.step = reinterpret_cast<std::uint64_t*>(memory.data());
    s.outcome = reinterpret_cast<report*>(memory.data() + 64);
    std::size_t at = 256;
    const auto take = [&](const C& c, std::size_t count) -> result<cuda::device_state> {
      const std::size_t b = cuda::detail::align_up(cuda::state_bytes(c, count));
      const result<cuda::device_state> d = cuda::make_state(c, memory.subspan(at, b), count, stream);
      at += b;
      return d;
    };
    for (std::uint32_t j = 0; j < world; ++j) {
      const result<cuda::device_state> d = take(sender(), gradcomp::summable::shard_of(n, world, j).count);
      if (!d) return d.error();
      s.send.push_back(*d);
    }
    const std::size_t mine = gradcomp::summable::shard_of(n, world, rank).count;
    if (get_mode() == mode::all_reduce) {
      const result<cuda::device_state> d = take(owner(), mine);
      if (!d) return d.error();
      s.owner = *d;
    }
    s.sum = reinterpret_cast<float*>(memory.data() + at);
    if (cudaError_t e = cudaMemsetAsync(memory.data(), 0, 256, stream); e != cudaSuccess) return cuda::detail::cuda_status(e);
    if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return cuda::detail::cuda_status(e);
    st = std::move(s);
    return {};
  }

  template <gradient_element T>
  status encode(const executor& ex, std::size_t k, std::span<const T> grad, state& st, std::span<std::byte> out) const {
    if (status s = check_call<T>(ex, st); !s) return s;
    detail::sharded_executor d(ex, st.world);
    return this->f_.template encode<T>(d, k, grad, st, out);
  }

  template <gradient_element T>
  status receive(const executor& ex, std::size_t k, state& st, std::span<const std::byte> in, std::span<T> out) const {
    if (status s = check_call<T>(ex, st); !s) return s;
    detail::sharded_executor d(ex, st.world);
    return this->f_.template receive<T>(d, k, st, in, out);
  }

  // The last receive's report, copied to the host (synchronous).
  result<report> read_report(const state& st, cudaStream_t stream = nullptr) const {
    report r;
    cudaError_t e = cudaMemcpyAsync(&r, st.outcome, sizeof r, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return cuda::detail::cuda_status(e);
    return r;
  }

 private:
  template <class T>
  status check_call(const executor& ex, const state& st) const {
    if (status s = this->check_state(st); !s) return s;
    if (ex.workspace.size() < workspace_bytes<T>(st.size, st.world)) return {errc::buffer_too_small, "workspace smaller than workspace_bytes()"};
    if (!cuda::detail::aligned(ex.workspace.data(), 256)) return {errc::invalid_argument, "workspace not 256-byte aligned"};
    return {};
  }
};

}  // namespace gradcomp::cuda::sharded
