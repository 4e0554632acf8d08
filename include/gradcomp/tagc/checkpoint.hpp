#pragma once
// Checkpoints of a TAGC rank's state (docs/wire-format.md, "TAGC checkpoint"): residual,
// per-shard thresholds, step and sampling key, in the checkpoint envelope (core/envelope.hpp).
// This header holds the image (its size, its writing and its parse); the calls below take the
// CPU codec and are gradcomp/tagc.hpp's:
//
//   save_checkpoint / load_checkpoint   the same world size and rank: the run continues byte
//                                       for byte as if it had not stopped.
//   restore_elastic                     the W checkpoints of a run restored into rank r' of W'
//                                       ranks: the residuals' sum over ranks (what error
//                                       feedback still owes) is re-sliced by the new shards:
//                                       rank r' holds, on its shard of W', the sum of the W saved
//                                       residuals (added in saved rank order) and 0 elsewhere, so
//                                       the new residuals add up to the saved sum exactly.
//                                       Thresholds restart (0: the next step samples).

#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/byteio.hpp"
#include "../core/envelope.hpp"
#include "../core/ids.hpp"
#include "state.hpp"

namespace gradcomp::tagc {

namespace checkpoint {
inline constexpr envelope::kind kind{ids::tag::tagc_checkpoint, 2};  // "GCTC", version 2
inline constexpr std::size_t fields_bytes = 48;  // the payload before its arrays
}  // namespace checkpoint

inline std::size_t checkpoint_bytes(const state& s) {
  return envelope::overhead + checkpoint::fields_bytes + 4 * (s.thresholds.size() + s.residual.size());
}

// A checked checkpoint image (the arrays point into it).
struct checkpoint_view {
  std::uint32_t codec_id = 0, fingerprint = 0;
  std::uint64_t size = 0, step = 0;
  std::uint32_t world = 0, rank = 0, key = 0;
  const std::byte* thresholds = nullptr;  // world f32
  const std::byte* residual = nullptr;    // size f32
  float residual_at(std::size_t j) const { return load_le<float>(residual + 4 * j); }
};

// The payload (version 2, in core/envelope.hpp's envelope): codec_id u32 | select_fingerprint
// u32 | size u64 | world u32 | rank u32 | step u64 | key u32 | threshold count u32 | residual
// count u64 | thresholds f32 x count | residual f32 x count.

namespace detail {
// The image of `s` into `image` (checkpoint_bytes(s) bytes); tagc::save_checkpoint checks first.
inline void write_checkpoint(const state& s, std::uint32_t codec_id, std::uint32_t fingerprint, std::span<std::byte> image) {
  std::byte* at = envelope::store_fields(envelope::payload_of(image).data(), codec_id, fingerprint, std::uint64_t{s.size},
                                         s.world, s.rank, s.step, s.key, static_cast<std::uint32_t>(s.thresholds.size()),
                                         std::uint64_t{s.residual.size()});
  envelope::store_floats(envelope::store_floats(at, s.thresholds), s.residual);
  envelope::seal(checkpoint::kind, image);
}
}  // namespace detail

// The envelope (length, magic, version, reserved field, CRC), the counts against the payload,
// and the header's own consistency.
inline result<checkpoint_view> parse_checkpoint(std::span<const std::byte> in) {
  const result<std::span<const std::byte>> body = envelope::open(checkpoint::kind, in);
  if (!body) return body.error();
  if (body->size() < checkpoint::fields_bytes) return status{errc::truncated, "TAGC checkpoint payload shorter than its fields"};
  checkpoint_view v;
  std::uint32_t thresholds = 0;
  std::uint64_t residual = 0;
  const std::byte* at = envelope::load_fields(body->data(), v.codec_id, v.fingerprint, v.size, v.world, v.rank, v.step, v.key,
                                              thresholds, residual);
  const std::uint64_t room = (body->size() - checkpoint::fields_bytes) / 4;
  if (thresholds > room || residual > room - thresholds) return status{errc::truncated, "TAGC checkpoint arrays truncated"};
  if (body->size() != checkpoint::fields_bytes + 4 * (thresholds + residual))
    return status{errc::size_mismatch, "TAGC checkpoint payload longer than its arrays"};
  if (v.world == 0 || v.rank >= v.world || thresholds != v.world || residual != v.size)
    return status{errc::bad_header, "TAGC checkpoint header is inconsistent (world, rank, array counts)"};
  v.thresholds = at;
  v.residual = at + 4 * std::size_t{thresholds};
  return v;
}

}  // namespace gradcomp::tagc
