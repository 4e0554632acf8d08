#pragma once
// The CUDA executor of engine/flow.hpp: every chunk in one batch, each phase a few kernels
// over all chunks' tiles, in stream order. Host-visible argument errors are returned before
// anything is enqueued; data-dependent errors go to the caller's report in device memory.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "../engine/flow.hpp"
#include "compress_kernels.cuh"
#include "decode_kernels.cuh"
#include "plan.cuh"
#include "transform_kernels.cuh"

namespace gradcomp::cuda::detail {

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

// Frames a payload of `payload_bytes` can hold at most (a frame is at least a header), counting
// a truncated last one, so that a short payload is reported as the CPU reports it (truncated).
constexpr std::size_t max_frames(std::size_t payload_bytes) {
  return (payload_bytes + frame::header_bytes - 1) / frame::header_bytes;
}

class device_executor {
 public:
  using state_type = const device_state;
  using compress_result = status;

  device_executor(const executor& ex, report* out, decode_gate g = {}) : ex_(ex), out_(out), gate_(g) {}

  // --- Compression.

  template <class C>
  status check_state(const C& comp, const device_state& st, std::size_t n) const {
    if (auto s = check_quantizer_config(comp); !s) return s;
    if (n != st.size) return {errc::size_mismatch, "gradient size differs from the state's"};
    if (traits<C>::has_state && st.residual == nullptr && n > 0) return {errc::size_mismatch, "state has no residual"};
    if (C::transformed && st.transformed == nullptr && n > 0)
      return {errc::size_mismatch, "state has no transform buffers: use make_state()"};
    if (st.step == nullptr) return {errc::invalid_argument, "state has no step counter: use make_state()"};
    return {};
  }
  template <class C, class T>
  status check_memory(const C& comp, std::span<const T> grad, const engine::detail::chunk_span& chunks,
                      std::span<std::byte> payload) const {
    if (!chunks.whole_buffer) return {errc::invalid_argument, "gradcomp::cuda compresses whole buffers (no compress_chunk)"};
    if (C::transformed && !std::is_same_v<T, float>)
      return {errc::invalid_argument, "gradcomp::cuda: a composition with a transform compresses fp32 gradients"};
    const host_plan p = plan_on_host<C, T>(comp, grad.size());
    if (ex_.workspace.size() < carve_compress<C>(nullptr, p.chunks, p.total.sel).bytes)
      return {errc::buffer_too_small, "workspace smaller than compress_workspace_bytes()"};
    if (!aligned(ex_.workspace.data(), 256)) return {errc::invalid_argument, "workspace not 256-byte aligned"};
    if (!aligned(payload.data(), 8)) return {errc::invalid_argument, "payload not 8-byte aligned"};
    if (out_ == nullptr) return {errc::invalid_argument, "no report"};
    return {};
  }
  // Checked on the device, in start_compress (the control block it writes to is zeroed there).
  template <class C, class T>
  status reject_non_finite(const C&, std::span<const T>, const engine::detail::chunk_span&) {
    check_finite_ = true;
    return {};
  }

  template <class C, class T>
  compress_args<C, T> start_compress(const C& comp, std::span<const T> grad, const device_state& st,
                                     std::span<std::byte> payload, const engine::detail::chunk_span&) {
    const std::size_t n = grad.size();
    const host_plan p = plan_on_host<C, T>(comp, n);
    // With a transform the phases read the transformed gradient (fp32: check_memory).
    const T* values = grad.data();
    if constexpr (C::transformed && std::is_same_v<T, float>) values = st.transformed;
    compress_args<C, T> a{comp.get_config(), comp.codec_id(), dtype_of<T>, n, p.chunks, p.total,
                          values, st.residual, st.step, payload.data(), out_,
                          carve_compress<C>(ex_.workspace.data(), p.chunks, p.total.sel)};
    note(cudaMemsetAsync(a.ws.ctl, 0, sizeof(control), ex_.stream));
    if (check_finite_ && n > 0)
      nonfinite_kernel<T><<<grid_for(ceil_div(n, threads)), threads, 0, ex_.stream>>>(grad.data(), n, a.ws.ctl);
    if constexpr (C::transformed && std::is_same_v<T, float>)
      if (n > 0)
        transform_kernel<C><<<grid_for(p.chunks), threads, 0, ex_.stream>>>(a.cfg, grad.data(), n, st.transformed,
                                                                           st.transformed + align_up(4 * n) / 4);
    plan_kernel<C, T><<<1, threads, 0, ex_.stream>>>(a);  // reads the step, advances it unless a check failed
    return a;
  }
  template <class J>
  std::size_t chunks_per_batch(const J&) const {
    return std::numeric_limits<std::size_t>::max();
  }

  template <class C, class T>
  void select(compress_args<C, T>& a, std::size_t, std::size_t) {
    if (a.tiles.sel == 0) return;
    const cudaStream_t s = ex_.stream;
    note(cudaMemsetAsync(a.ws.hist, 0, a.chunks * hist_bins * 4, s));
    const unsigned gs = grid_for(a.tiles.sel), gc = grid_for(a.chunks);
    hist_kernel<C, T, 0><<<gs, threads, 0, s>>>(a);
    find_kernel<0><<<gc, threads, 0, s>>>(a.chunks, a.ws.sel, a.ws.hist, a.ws.ctl);
    hist_kernel<C, T, 1><<<gs, threads, 0, s>>>(a);
    find_kernel<1><<<gc, threads, 0, s>>>(a.chunks, a.ws.sel, a.ws.hist, a.ws.ctl);
    hist_kernel<C, T, 2><<<gs, threads, 0, s>>>(a);
    find_kernel<2><<<gc, threads, 0, s>>>(a.chunks, a.ws.sel, a.ws.hist, a.ws.ctl);
    count_kernel<C, T><<<gs, threads, 0, s>>>(a);
    scan_tiles_kernel<><<<1, threads, 0, s>>>(a.ws.counts, a.tiles.sel, a.ws.ctl);
    write_kernel<C, T><<<gs, threads, 0, s>>>(a);
  }

  template <class C, class T>
  void encode(compress_args<C, T>& a, std::size_t, std::size_t) {
    using tr = traits<C>;
    const cudaStream_t s = ex_.stream;
    if constexpr (tr::cast && tr::dense) {
      if (a.tiles.val) encode_dense_kernel<C, T><<<grid_for(a.tiles.val), threads, 0, s>>>(a);
    } else if constexpr (tr::cast) {
      if (a.tiles.sel && a.tiles.idx + a.tiles.val)
        encode_sparse_kernel<C, T><<<grid_for(a.tiles.idx + a.tiles.val), threads, 0, s>>>(a);
    } else if (a.tiles.span) {  // grouped path: spans (groups.cuh)
      encode_groups_kernel<C, T><<<grid_for(a.tiles.span), threads, 0, s>>>(a);
    }
  }

  template <class C, class T>
  void seal(compress_args<C, T>& a, std::size_t, std::size_t) {
    const cudaStream_t s = ex_.stream;
    if constexpr (!traits<C>::cast)  // grouped frames: padding and checksums of the bodies
      if (a.tiles.body) seal_kernel<C, T><<<grid_for(a.tiles.body), threads, 0, s>>>(a);
    header_kernel<C, T><<<grid_for(ceil_div(a.chunks, threads)), threads, 0, s>>>(a);
  }

  template <class C, class T>
  status finish_compress(compress_args<C, T>&) {
    return launched();
  }

  // --- Decoding.

  template <class C, class T>
  status check_decode_memory(const C& comp, std::span<const std::byte> payload, std::span<T> out) const {
    if constexpr (traits<C>::cast)  // the fast decode ignores metadata
      if (traits<C>::quantizer::group_size(comp.get_config().quantize) != 0)
        return {errc::invalid_argument, "gradcomp::cuda: a cast (ungrouped_quantizer) configured with groups"};
    const std::size_t fixed = carve_decode<C>(nullptr, chunk_slots(comp, out.size()), 0, out.size()).bytes;
    if (ex_.workspace.size() < fixed + align_up(sizeof(frame_entry)))
      return {errc::buffer_too_small, "workspace smaller than decode_workspace_bytes()"};
    if (!aligned(ex_.workspace.data(), 256)) return {errc::invalid_argument, "workspace not 256-byte aligned"};
    if (!aligned(payload.data(), 8)) return {errc::invalid_argument, "payload not 8-byte aligned"};
    if (out_ == nullptr) return {errc::invalid_argument, "no report"};
    return {};
  }

  template <class C, class T>
  decode_args<C, T> start_decode(const C& comp, std::span<const std::byte> payload, std::span<T> out, bool add) {
    const std::uint64_t slots = chunk_slots(comp, out.size());
    const std::size_t fixed = carve_decode<C>(nullptr, slots, 0, out.size()).bytes;
    // As many frame slots as the workspace holds, and never more than the payload can need.
    const std::uint64_t fit = (ex_.workspace.size() - fixed) / sizeof(frame_entry);
    const std::uint64_t frames = min_u64(fit, max_u64(1, max_frames(payload.size())));
    decode_args<C, T> a{comp.get_config(), comp.codec_id(), out.size(), payload.data(), payload.size(), out.data(), add, out_,
                        carve_decode<C>(ex_.workspace.data(), slots, frames, out.size()), gate_};
    note(cudaMemsetAsync(a.ws.ctl, 0, sizeof(control), ex_.stream));
    if (slots) note(cudaMemsetAsync(a.ws.head, 0xff, 2 * slots * sizeof(std::uint32_t), ex_.stream));
    return a;
  }

  // Enqueued: the verdict lands in the control block (and the report), which apply reads.
  template <class C, class T>
  status validate_frames(decode_args<C, T>& a) {
    const cudaStream_t s = ex_.stream;
    walk_kernel<C, T><<<1, 1, 0, s>>>(a);
    // Body tiles: at most one per tile_bytes of payload plus one partial tile per frame.
    check_kernel<C, T><<<grid_for(a.size / tile_bytes + a.ws.max_frames + 1), threads, 0, s>>>(a);
    resolve_kernel<C, T><<<1, 1, 0, s>>>(a);
    return launched();
  }

  template <class C, class T>
  void apply_frames(decode_args<C, T>& a) {
    if (gate_.check_only) return;
    if constexpr (C::transformed) {
      if (a.n == 0) return;
      float* const buf = a.ws.transformed;
      apply_transformed_kernel<C, T><<<grid_for(chunk_slots_of(a)), threads, 0, ex_.stream>>>(a, buf, buf + align_up(4 * a.n) / 4);
      return;
    }
    if (const std::uint64_t tiles = ceil_div(a.n, apply_tile); tiles > 0) {
      apply_kernel<C, T><<<grid_for(tiles), threads, 0, ex_.stream>>>(a, tiles);
      apply_mixed_kernel<C, T><<<1, threads, 0, ex_.stream>>>(a);
    }
  }

  template <class C, class T>
  status finish_decode(decode_args<C, T>&) {
    return launched();
  }

 private:
  template <class C, class T>
  static std::uint64_t chunk_slots_of(const decode_args<C, T>& a) {
    const std::uint64_t f = traits<C>::partitioner::chunk_count(a.cfg.partition, a.n, 4),
                        b = traits<C>::partitioner::chunk_count(a.cfg.partition, a.n, 2);
    return f > b ? f : b;
  }
  void note(cudaError_t e) {
    if (first_error_ == cudaSuccess) first_error_ = e;
  }
  status launched() {
    note(cudaGetLastError());
    return cuda_status(first_error_);
  }

  executor ex_;
  report* out_;
  decode_gate gate_;
  bool check_finite_ = false;
  cudaError_t first_error_ = cudaSuccess;
};

}  // namespace gradcomp::cuda::detail
