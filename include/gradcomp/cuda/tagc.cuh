#pragma once
// TAGC-2 on the GPU: tagc::codec's phases with device buffers, the same bytes (docs/tagc.md,
// "CUDA"). The flow is tagc/flow.hpp's, written once; this header supplies its
// executor: a grid-stride kernel per `map` step, a warp-aggregated counting kernel per `count`
// step, CUB's radix sorts and scan.
//
//   cuda::tagc::codec tagc(cfg);                                 // host object: config, checks
//   tagc.state_bytes(n, W), tagc.workspace_bytes(n, W)          // sizes first; caller allocates
//   tagc.make_state(state_mem, n, W, rank, st, stream)          // once (synchronous)
//   executor ex{stream, workspace};                             // the same workspace all step
//   tagc.encode_bitmap(ex, st, grad, send0);   all-reduce (OR, or SUM for sum-safe)
//   tagc.receive_bitmap(ex, st, recv0);
//   tagc.encode_sketch(ex, st, send1);         reduce-scatter (or all-reduce) with SUM
//   tagc.receive_sketch(ex, st, recv1, summable::received::shard, out);
//   tagc.finish_step(stream, st);
//
// Every step call is stream-ordered, never waits for the device, never allocates, and can be
// captured in a CUDA graph (the step counter lives on the device). Argument errors the host can
// see come back at once with nothing enqueued; what depends on the data lands in the state's
// report (st.report(), device memory), and the rest of that step then does nothing.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "../tagc/flow.hpp"
#include "common.cuh"

#if defined(__CUDACC__)
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#endif

namespace gradcomp::cuda::tagc {

using gradcomp::tagc::device_state;
using gradcomp::tagc::sketch_layout;
using gradcomp::tagc::step_report;

namespace detail {

namespace steps = gradcomp::tagc::detail;  // the per-thread flow this executor runs

using cuda::detail::threads;

template <class F>
__global__ void __launch_bounds__(threads) map_kernel(std::uint64_t n, F f, steps::guard g) {
  if (g.skip()) return;
  for (std::uint64_t i = blockIdx.x * std::uint64_t{threads} + threadIdx.x; i < n; i += std::uint64_t{gridDim.x} * threads) f(i);
}

// counters[f(i).segment] += f(i).value: the lanes of a warp with the same segment add up in
// shared memory and one of them adds the sum (integer atomics: the counts do not depend on
// the order).
template <class F>
__global__ void __launch_bounds__(threads) count_kernel(std::uint64_t n, F f, steps::counter* counters, steps::guard g) {
  __shared__ std::uint32_t value[threads];
  if (g.skip()) return;
  const unsigned lane = threadIdx.x % 32, warp0 = threadIdx.x - lane;
  for (std::uint64_t base = blockIdx.x * std::uint64_t{threads}; base < n; base += std::uint64_t{gridDim.x} * threads) {
    steps::tally t{steps::no_segment, 0};
    if (base + threadIdx.x < n) t = f(base + threadIdx.x);
    if (t.value == 0) t.segment = steps::no_segment;
    const unsigned peers = __match_any_sync(0xffffffffu, t.segment);
    value[threadIdx.x] = t.value;
    __syncwarp();
    if (t.segment != steps::no_segment && lane == static_cast<unsigned>(__ffs(peers) - 1)) {
      steps::counter sum = 0;
      for (unsigned m = peers; m != 0; m &= m - 1) sum += value[warp0 + static_cast<unsigned>(__ffs(m) - 1)];
      atomicAdd(counters + t.segment, sum);
    }
    __syncwarp();
  }
}

inline unsigned blocks_for(std::uint64_t n) { return cuda::detail::grid_for((n + threads - 1) / threads); }

// The executor of tagc/flow.hpp on one stream; remembers the first CUDA failure.
class executor {
 public:
  explicit executor(cudaStream_t s) : s_(s) {}

  template <class F>
  void map(std::uint64_t n, const F& f, steps::guard g) {
    if (n == 0 || e_ != cudaSuccess) return;
    map_kernel<F><<<blocks_for(n), threads, 0, s_>>>(n, f, g);
    note(cudaGetLastError());
  }
  template <class F>
  void count(std::uint64_t n, const F& f, steps::counter* counters, steps::guard g) {
    if (n == 0 || e_ != cudaSuccess) return;
    count_kernel<F><<<blocks_for(n), threads, 0, s_>>>(n, f, counters, g);
    note(cudaGetLastError());
  }
  void sort_keys(std::byte* temp, std::size_t bytes, const std::uint64_t* in, std::uint64_t* out, std::uint64_t n, int bits) {
    if (n == 0 || e_ != cudaSuccess) return;
    note(cub::DeviceRadixSort::SortKeys(temp, bytes, in, out, static_cast<int>(n), 0, bits, s_));
  }
  void sort_pairs(std::byte* temp, std::size_t bytes, const std::uint32_t* kin, std::uint32_t* kout, const std::uint32_t* vin,
                  std::uint32_t* vout, std::uint64_t n, int bits) {
    if (n == 0 || e_ != cudaSuccess) return;
    note(cub::DeviceRadixSort::SortPairs(temp, bytes, kin, kout, vin, vout, static_cast<int>(n), 0, bits, s_));
  }
  void exclusive_sum(std::byte* temp, std::size_t bytes, std::uint32_t* data, std::uint64_t n) {
    if (n == 0 || e_ != cudaSuccess) return;
    note(cub::DeviceScan::ExclusiveSum(temp, bytes, data, data, static_cast<int>(n), s_));
  }
  void zero(void* p, std::size_t bytes) {
    if (bytes > 0 && e_ == cudaSuccess) note(cudaMemsetAsync(p, 0, bytes, s_));
  }
  // Synchronous copies (setup and checkpoints only).
  void upload(void* dst, const void* src, std::size_t bytes) { copy(dst, src, bytes, cudaMemcpyHostToDevice); }
  void download(void* dst, const void* src, std::size_t bytes) { copy(dst, src, bytes, cudaMemcpyDeviceToHost); }
  status outcome() const { return cuda::detail::cuda_status(e_); }

  // Scratch of the sorts and the scan for these sizes (CUB's queries).
  static result<std::size_t> temp_bytes(const steps::sizes& z) {
    std::size_t a = 0, b = 0, c = 0;
    cudaError_t e = cub::DeviceRadixSort::SortKeys(nullptr, a, static_cast<const std::uint64_t*>(nullptr),
                                                   static_cast<std::uint64_t*>(nullptr), static_cast<int>(z.sample), 0, z.sample_bits);
    if (e == cudaSuccess)
      e = cub::DeviceRadixSort::SortPairs(nullptr, b, static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
                                          static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
                                          static_cast<int>(3 * z.items), 0, z.slot_bits);
    if (e == cudaSuccess)
      e = cub::DeviceScan::ExclusiveSum(nullptr, c, static_cast<std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
                                        static_cast<int>(z.aligned + 1));
    if (e != cudaSuccess) return cuda::detail::cuda_status(e);
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
  }

 private:
  void note(cudaError_t e) {
    if (e_ == cudaSuccess) e_ = e;
  }
  void copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0 || e_ != cudaSuccess) return;
    note(cudaMemcpyAsync(dst, src, bytes, kind, s_));
    if (e_ == cudaSuccess) note(cudaStreamSynchronize(s_));
  }

  cudaStream_t s_;
  cudaError_t e_ = cudaSuccess;
};

}  // namespace detail

// One rank's TAGC codec on the GPU. Spans hold device pointers; `executor` is the stream and the
// caller's device workspace (workspace_bytes, 256-byte aligned), the same one for every call of
// a step (receive(0) builds the cell index that encode(1) and receive(1) use).
class codec {
 public:
  static constexpr std::size_t bitmap_phase = 0, sketch_phase = 1;

  explicit codec(const gradcomp::tagc::config& c = {}, sketch_layout layout = sketch_layout::packed) : r_(c, layout) {}
  const gradcomp::tagc::config& get_config() const { return r_.get_config(); }
  sketch_layout layout() const { return r_.layout(); }
  status validate() const { return r_.validate(); }
  std::uint32_t codec_id() const { return gradcomp::tagc::codec_id(get_config()); }

  result<std::size_t> state_bytes(std::size_t n, std::uint32_t world) const { return r_.state_bytes(n, world); }
  result<std::size_t> workspace_bytes(std::size_t n, std::uint32_t world) const {
    return r_.workspace_bytes<detail::executor>(n, world);
  }
  status make_state(std::span<std::byte> memory, std::size_t n, std::uint32_t world, std::uint32_t rank, device_state& st,
                    cudaStream_t stream = nullptr) const {
    detail::executor ex(stream);
    return r_.make_state(ex, memory, n, world, rank, st);
  }

  // Phase 0 exactly as tagc::codec::describe; phase 1 the largest sketch (R = max_rows): the
  // buffers to allocate, and in the padded layout the buffer to reduce.
  result<summable::phase> describe(std::size_t k, const device_state& st) const { return r_.describe(k, st); }
  std::size_t max_phase_bytes(const device_state& st) const { return r_.max_phase_bytes(st); }

  status encode_bitmap(const executor& ex, device_state& st, std::span<const float> grad, std::span<std::byte> out) const {
    detail::executor d(ex.stream);
    return r_.encode_bitmap(d, ex.workspace, st, grad, out);
  }
  status receive_bitmap(const executor& ex, device_state& st, std::span<const std::byte> in) const {
    detail::executor d(ex.stream);
    return r_.receive_bitmap(d, ex.workspace, st, in);
  }
  status encode_sketch(const executor& ex, device_state& st, std::span<std::byte> out) const {
    detail::executor d(ex.stream);
    return r_.encode_sketch(d, ex.workspace, st, out);
  }
  status receive_sketch(const executor& ex, device_state& st, std::span<const std::byte> in, summable::received kind,
                        std::span<float> out) const {
    detail::executor d(ex.stream);
    return r_.receive_sketch(d, ex.workspace, st, in, kind, out);
  }
  status finish_step(cudaStream_t stream, device_state& st) const {
    detail::executor d(stream);
    return r_.finish_step(d, st);
  }

  // Synchronous: the step's report; the state to and from a host tagc::state (checkpoints).
  result<step_report> read_report(const device_state& st, cudaStream_t stream = nullptr) const {
    detail::executor d(stream);
    return r_.read_report(d, st);
  }
  status download_state(const device_state& st, gradcomp::tagc::state& h, cudaStream_t stream = nullptr) const {
    detail::executor d(stream);
    return r_.download_state(d, st, h);
  }
  status upload_state(const gradcomp::tagc::state& h, device_state& st, cudaStream_t stream = nullptr) const {
    detail::executor d(stream);
    return r_.upload_state(d, h, st);
  }

 private:
  gradcomp::tagc::detail::flow r_;
};

}  // namespace gradcomp::cuda::tagc
