#pragma once
// The flow of a compress and a decode call, written once for every backend. A backend is an
// executor: it supplies memory checks, the element kernels (selection, fit/encode/feedback,
// decode), checksums and its way of reporting; this file decides what is checked, in which
// order, and which phases run. CUB's split is the model: the public call (compressor<>,
// cuda::compress) -> this flow -> the executor's kernels.
//
// Executor contract (cpu::detail::executor, cuda::detail::device_executor):
//   state_type                                  what outlives a step (host or device memory)
//   check_state(comp, st, n) -> status          st serves a gradient of n elements
//   check_memory(comp, grad, chunks, payload) -> status   workspace, alignment, report
//   reject_non_finite(comp, grad, chunks) -> status    only when allow_non_finite is false
//   start_compress(comp, grad, st, payload, chunks) -> job
//   chunks_per_batch(job) -> size_t             chunks that go through the phases together
//   select(job, first, count)                   sparse: each chunk's kept indices
//   encode(job, first, count)                   metadata, codes and feedback of each chunk
//   seal(job, first, count)                     headers, padding and checksums
//   finish_compress(job) -> compress_result     bytes written; the step advances per buffer
//   check_decode_memory(comp, payload, out) -> status
//   start_decode(comp, payload, out, add) -> job
//   validate_frames(job) -> status              every frame checked before anything is written
//   apply_frames(job)                           decode (add) into the output
//   finish_decode(job) -> status
// An asynchronous executor (CUDA) returns only what the host can see from its check calls
// and reports data-dependent errors through device memory, in the same order and with the
// same errc as the CPU.

#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/concepts.hpp"
#include "../core/numeric.hpp"
#include "../core/status.hpp"

namespace gradcomp::engine::detail {

// The chunks a compress call writes: [first, first + count) of the plan; the whole buffer's
// plan (compress) advances the step, one chunk (compress_chunk) does not.
struct chunk_span {
  std::size_t first = 0;
  std::size_t count = 0;
  bool whole_buffer = true;
  std::size_t payload_bytes = 0;  // the most the frames can take (max_frame_bytes summed)
};

// Checks the plan of a gradient of n elements of type T: the chunk count, each chunk's
// size, and the payload room the chunks need. `only` selects one chunk (compress_chunk).
template <gradient_element T, class C>
result<chunk_span> plan_chunks(const C& comp, std::size_t n, std::size_t payload_size, const std::size_t* only) {
  const std::size_t chunks = comp.template chunk_count<T>(n);
  if (chunks > 0xffffffffu) return status{errc::invalid_argument, "more than 2^32 chunks"};
  chunk_span span{0, chunks, true, 0};
  if (only) {
    if (*only >= chunks) return status{errc::invalid_argument, "chunk index beyond the plan"};
    span = {*only, 1, false, 0};
  }
  for (std::size_t i = span.first; i < span.first + span.count; ++i) {
    const chunk_range r = comp.template chunk<T>(n, i);
    if (!C::dense && r.count > 0xffffffffu) return status{errc::invalid_argument, "sparse chunks hold at most 2^32 - 1 elements"};
    span.payload_bytes += comp.max_frame_bytes(r.count);
  }
  if (payload_size < span.payload_bytes)
    return status{errc::buffer_too_small,
                  only ? "frame buffer smaller than max_frame_bytes()" : "payload smaller than max_payload_bytes()"};
  return span;
}

// Compresses the chunks of `grad` that `only` names (all when null) into `payload`, frames
// back to back. Every check runs before anything is written: on error, payload and state
// are untouched.
template <gradient_element T, class C, class Exec>
auto compress(const C& comp, Exec& ex, std::span<const T> grad, typename Exec::state_type& st,
              std::span<std::byte> payload, const std::size_t* only = nullptr) -> typename Exec::compress_result {
  if (auto s = comp.validate(); !s) return s;
  if (auto s = ex.check_state(comp, st, grad.size()); !s) return s;
  const result<chunk_span> chunks = plan_chunks<T>(comp, grad.size(), payload.size(), only);
  if (!chunks) return chunks.error();
  if (auto s = ex.check_memory(comp, grad, *chunks, payload); !s) return s;
  if (!comp.get_config().allow_non_finite)
    if (auto s = ex.reject_non_finite(comp, grad, *chunks); !s) return s;
  auto job = ex.start_compress(comp, grad, st, payload, *chunks);
  const std::size_t batch = ex.chunks_per_batch(job);
  for (std::size_t first = chunks->first, end = chunks->first + chunks->count; first < end; first += batch) {
    const std::size_t count = end - first < batch ? end - first : batch;
    if constexpr (!C::dense) ex.select(job, first, count);
    ex.encode(job, first, count);
    ex.seal(job, first, count);
  }
  return ex.finish_compress(job);
}

// Decodes the frames of `payload` (chunks of a buffer of out.size() elements) into `out`,
// overwriting (add = false) or adding to it. Every frame is validated before anything is
// written: on error `out` is untouched.
template <gradient_element T, class C, class Exec>
status decode(const C& comp, Exec& ex, std::span<const std::byte> payload, std::span<T> out, bool add) {
  if (auto s = comp.validate(); !s) return s;
  if (payload.empty()) return {errc::truncated, "empty payload"};
  if (auto s = ex.check_decode_memory(comp, payload, out); !s) return s;
  auto job = ex.start_decode(comp, payload, out, add);
  if (auto s = ex.validate_frames(job); !s) return s;
  ex.apply_frames(job);
  return ex.finish_decode(job);
}

// decode's checks of `payload` for a buffer of n elements, nothing written (a host executor's
// check_frames).
template <class C, class Exec>
status check(const C& comp, Exec& ex, std::span<const std::byte> payload, std::size_t n) {
  if (auto s = comp.validate(); !s) return s;
  if (payload.empty()) return {errc::truncated, "empty payload"};
  const result<std::size_t> covered = ex.check_frames(comp, payload, n);
  return covered ? status{} : covered.error();
}

}  // namespace gradcomp::engine::detail
