#pragma once
// The CUDA execution of compressor<Partitioner, Sparsifier, Quantizer, Feedback, Transform>: the same
// frames, byte for byte, as compressor::compress, and the same decoded values and errors as
// compressor::decompress / accumulate (docs/cuda.md). The composition (engine/composition.hpp)
// and the flow (engine/flow.hpp) are the CPU's; this backend supplies its executor
// (executor.cuh) and kernels.
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

#include "../compressor.hpp"
#include "../engine/flow.hpp"
#include "../state.hpp"
#include "common.cuh"
#include "executor.cuh"

namespace gradcomp::cuda {

// --- State.

// Device bytes of the state of a gradient of n elements (step counter, residual, and with a
// transform the transformed gradient and its scratch).
template <class C>
std::size_t state_bytes(const C&, std::size_t n) {
  return 256 + (detail::traits<C>::has_state ? detail::align_up(4 * n) : 0) + detail::transform_bytes<C>(n);
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
  if constexpr (C::transformed)
    s.transformed = reinterpret_cast<float*>(memory.data() + 256 + (detail::traits<C>::has_state ? detail::align_up(4 * n) : 0));
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
  detail::device_executor device(ex, out);
  return engine::detail::compress<T>(comp, device, grad, st, payload);
}

// Convenience: the same, then waits for the stream and returns the payload size (or the
// device-reported error). The report lives in the workspace.
template <gradient_element T, class C>
result<std::size_t> compress(const C& comp, const executor& ex, std::span<const T> grad, const device_state& st,
                             std::span<std::byte> payload) {
  const detail::compress_space ws = detail::carve_compress<C>(ex.workspace.data(), 0, 0);
  if (auto s = compress<T>(comp, ex, grad, st, payload, ws.internal); !s) return s;
  report r;
  if (auto s = detail::wait_for(ws.internal, ex.stream, r); !s) return s;
  return static_cast<std::size_t>(r.bytes);
}

// --- Decoding.

using detail::max_frames;

// Workspace bytes to decode up to `frames` frames into a buffer of n elements. max_frames(S)
// always suffices for a payload of S bytes; a smaller count (chunk_count * senders) saves
// memory, and a payload with more frames than fit is rejected with buffer_too_small.
template <gradient_element T, class C>
std::size_t decode_workspace_bytes(const C& comp, std::size_t n, std::size_t frames) {
  return detail::carve_decode<C>(nullptr, detail::chunk_slots(comp, n), frames, n).bytes;
}

// As compressor::decompress / accumulate: every frame is validated before anything is
// written; on error `out` is untouched and *rep (device) holds the CPU's errc.
template <gradient_element T, class C>
status decompress(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out, report* rep) {
  detail::device_executor device(ex, rep);
  return engine::detail::decode<T>(comp, device, payload, out, false);
}
template <gradient_element T, class C>
status accumulate(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out, report* rep) {
  detail::device_executor device(ex, rep);
  return engine::detail::decode<T>(comp, device, payload, out, true);
}

namespace detail {
template <gradient_element T, class C>
status decode_sync(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out, bool add) {
  const decode_space ws = carve_decode<C>(ex.workspace.data(), 0, 0);
  device_executor device(ex, ws.internal);
  if (auto s = engine::detail::decode<T>(comp, device, payload, out, add); !s) return s;
  report r;
  return wait_for(ws.internal, ex.stream, r);
}
}  // namespace detail

// Convenience: the same, then waits for the stream and returns the outcome.
template <gradient_element T, class C>
status decompress(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out) {
  return detail::decode_sync<T>(comp, ex, payload, out, false);
}
template <gradient_element T, class C>
status accumulate(const C& comp, const executor& ex, std::span<const std::byte> payload, std::span<T> out) {
  return detail::decode_sync<T>(comp, ex, payload, out, true);
}

}  // namespace gradcomp::cuda
