#pragma once
// compressor<Partitioner, Sparsifier, Quantizer, Feedback, Transform = transform::identity>:
// the composition of the policies, run on the CPU. Types compose (fixed at compile time); values configure (the `config`
// aggregate, changeable between steps, e.g. for a density warm-up).
//
//   using C = gradcomp::compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;
//   C comp({.sparsify = {.density = 0.01}});
//   auto st = comp.make_state(n);                        // once: residual + workspace
//   std::vector<std::byte> payload(comp.max_payload_bytes<float>(n));
//   auto sent = comp.compress<float>(grad, st, payload); // frames, back to back
//   comp.accumulate<float>(received, sum);               // sum += decoded, per frame
//
// The rules (codec id, plan, frame layout and checks) live in engine/composition.hpp, the
// order of every call in engine/flow.hpp, the CPU kernels in cpu/executor.hpp; the CUDA
// backend (cuda/compressor.cuh) runs the same composition and flow with its own executor.
// Frames are validated in full before anything is written (docs/wire-format.md).

#include <cstddef>
#include <span>

#include "core/status.hpp"
#include "cpu/executor.hpp"
#include "engine/composition.hpp"
#include "engine/flow.hpp"
#include "state.hpp"

namespace gradcomp {

template <class Partitioner, class Sparsifier, class Quantizer, class Feedback, class Transform = transform::identity>
class compressor : public engine::detail::composition<Partitioner, Sparsifier, Quantizer, Feedback, Transform> {
  using base = engine::detail::composition<Partitioner, Sparsifier, Quantizer, Feedback, Transform>;

 public:
  using typename base::config;
  using base::base;

  // A state for gradients of n elements: residual and momentum (if the feedback keeps them),
  // thresholds (sparsify::threshold) and the workspace (selection, transformed chunk), sized for this config
  // (a larger density later needs a new state).
  state make_state(std::size_t n) const {
    state s;
    s.size = n;
    if constexpr (Feedback::has_state) s.residual.assign(n, 0.0f);
    if constexpr (base::has_momentum) s.momentum.assign(n, 0.0f);
    if constexpr (base::kind == selection::threshold)
      if (this->validate()) s.thresholds.assign(this->chunk_slots(n), 0.0f);
    s.workspace.resize(workspace_bytes(n));
    return s;
  }

  // Workspace bytes for gradients of n elements (part of make_state()).
  std::size_t workspace_bytes(std::size_t n) const { return cpu::detail::executor::workspace_bytes(*this, n); }

  // --- Compression. Writes one frame per chunk, back to back; returns the bytes written and
  // advances st.step. `payload` must hold max_payload_bytes<T>(grad.size()). All checks come
  // first: on error, payload and state are untouched.
  template <gradient_element T>
  result<std::size_t> compress(std::span<const T> grad, state& st, std::span<std::byte> payload) const {
    cpu::detail::executor ex;
    return engine::detail::compress<T>(*this, ex, grad, st, payload);
  }

  // One chunk's frame, for pipelining chunk i's send with chunk i + 1's compression. After
  // the last chunk of a buffer, call finish_step(st). `frame` must hold
  // max_frame_bytes(chunk<T>(n, i).count).
  template <gradient_element T>
  result<std::size_t> compress_chunk(std::size_t i, std::span<const T> grad, state& st, std::span<std::byte> frame) const {
    cpu::detail::executor ex;
    return engine::detail::compress<T>(*this, ex, grad, st, frame, &i);
  }

  void finish_step(state& st) const { ++st.step; }

  // --- Decoding. `payload` holds one or more frames back to back, for chunks of a buffer of
  // out.size() elements. Every frame is validated before anything is written; on error `out`
  // is untouched. decompress overwrites each frame's chunk (unsent elements become 0);
  // accumulate adds the decoded values to it.
  template <gradient_element T>
  status decompress(std::span<const std::byte> payload, std::span<T> out) const {
    cpu::detail::executor ex;
    return engine::detail::decode<T>(*this, ex, payload, out, false);
  }
  template <gradient_element T>
  status accumulate(std::span<const std::byte> payload, std::span<T> out) const {
    cpu::detail::executor ex;
    return engine::detail::decode<T>(*this, ex, payload, out, true);
  }
  // Every check of decompress into a buffer of n elements, without writing anything: for a
  // caller that must know several payloads good before it decodes any.
  status check(std::span<const std::byte> payload, std::size_t n) const {
    cpu::detail::executor ex;
    return engine::detail::check(*this, ex, payload, n);
  }
};

}  // namespace gradcomp
