#pragma once
// State that outlives a step: the step counter, the feedback residual and momentum, the
// threshold estimates and the selection workspace. The caller owns it (compressor::make_state
// sizes it once, outside the hot path) and can checkpoint it: save_checkpoint / load_checkpoint write and read a
// byte image in the checkpoint envelope (core/envelope.hpp; docs/wire-format.md, "Checkpoint").

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/byteio.hpp"
#include "core/envelope.hpp"
#include "core/ids.hpp"
#include "core/status.hpp"

namespace gradcomp {

struct state {
  std::size_t size = 0;              // gradient elements this state serves
  std::uint64_t step = 0;            // advanced once per compressed gradient buffer
  std::vector<float> residual;       // feedback memory, `size` floats when the feedback has state
  std::vector<float> momentum;       // momentum feedback's velocity u, `size` floats when it has one
  std::vector<float> thresholds;     // sparsify::threshold: each chunk's last threshold (0: none yet)
  std::vector<std::byte> workspace;  // backend scratch; not part of a checkpoint
};

namespace checkpoint {
inline constexpr envelope::kind kind{ids::tag::checkpoint, 3};  // "GCST", version 3
inline constexpr std::size_t fields_bytes = 44;  // the payload before its arrays
}  // namespace checkpoint

inline std::size_t checkpoint_bytes(const state& s) {
  return envelope::overhead + checkpoint::fields_bytes + 4 * (s.residual.size() + s.momentum.size() + s.thresholds.size());
}

// The payload (version 3, in core/envelope.hpp's envelope): size u64 | step u64 | residual count
// u64 | momentum count u64 | threshold count u64 | codec_id u32 | residual f32 x count |
// momentum f32 x count | thresholds f32 x count.
inline result<std::size_t> save_checkpoint(const state& s, std::uint32_t codec_id, std::span<std::byte> out) {
  const std::size_t bytes = checkpoint_bytes(s);
  if (out.size() < bytes) return status{errc::buffer_too_small, "checkpoint buffer smaller than checkpoint_bytes()"};
  const std::span<std::byte> image = out.first(bytes);
  std::byte* at = envelope::store_fields(envelope::payload_of(image).data(), std::uint64_t{s.size}, s.step,
                                         std::uint64_t{s.residual.size()}, std::uint64_t{s.momentum.size()},
                                         std::uint64_t{s.thresholds.size()}, codec_id);
  for (const std::vector<float>* v : {&s.residual, &s.momentum, &s.thresholds}) at = envelope::store_floats(at, *v);
  envelope::seal(checkpoint::kind, image);
  return bytes;
}

// Restores step, residual, momentum and thresholds into `s`, which must come from
// make_state() of the same compressor and size; on any error `s` is left as it was.
inline status load_checkpoint(std::span<const std::byte> in, std::uint32_t codec_id, state& s) {
  const result<std::span<const std::byte>> body = envelope::open(checkpoint::kind, in);
  if (!body) return body.error();
  if (body->size() < checkpoint::fields_bytes) return {errc::truncated, "checkpoint payload shorter than its fields"};
  std::uint64_t size = 0, step = 0, counts[3] = {};
  std::uint32_t id = 0;
  const std::byte* at = envelope::load_fields(body->data(), size, step, counts[0], counts[1], counts[2], id);
  std::uint64_t left = (body->size() - checkpoint::fields_bytes) / 4;  // floats the payload can hold
  for (std::uint64_t c : counts) {
    if (c > left) return {errc::truncated, "checkpoint arrays truncated"};
    left -= c;
  }
  if (left != 0 || body->size() % 4 != 0) return {errc::size_mismatch, "checkpoint payload longer than its arrays"};
  if (id != codec_id) return {errc::codec_mismatch, "checkpoint made by another compressor"};
  if (size != s.size || counts[0] != s.residual.size() || counts[1] != s.momentum.size() || counts[2] != s.thresholds.size())
    return {errc::size_mismatch, "checkpoint size differs from the state's"};
  s.step = step;
  for (std::vector<float>* v : {&s.residual, &s.momentum, &s.thresholds}) at = envelope::load_floats(at, *v);
  return {};
}

}  // namespace gradcomp
