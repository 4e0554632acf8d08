#pragma once
// Checkpoints of a TAGC rank's state (docs/wire-format.md, "TAGC checkpoint"): residual,
// per-shard thresholds, step and sampling key, in versioned, CRC32C-checked bytes. This header
// holds the image (its size and its parse); the calls below take the CPU codec and are
// gradcomp/tagc.hpp's:
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
#include "../core/crc32c.hpp"
#include "../core/ids.hpp"
#include "state.hpp"

namespace gradcomp::tagc {

namespace checkpoint {
inline constexpr std::uint32_t magic = ids::tag::tagc_checkpoint;  // bytes "GCTC"
inline constexpr std::uint16_t version = 1;
inline constexpr std::size_t header_bytes = 56;
}  // namespace checkpoint

inline std::size_t checkpoint_bytes(const state& s) {
  return checkpoint::header_bytes + 4 * (s.thresholds.size() + s.residual.size()) + 4;
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

// Layout: magic u32 | version u16 | 0 u16 | codec_id u32 | select_fingerprint u32 | size u64 |
// world u32 | rank u32 | step u64 | key u32 | threshold count u32 | residual count u64 |
// thresholds f32 x count | residual f32 x count | CRC32C u32 of everything before it.

// Length, magic, version, reserved field, counts, CRC, and the header's own consistency.
inline result<checkpoint_view> parse_checkpoint(std::span<const std::byte> in) {
  const std::byte* p = in.data();
  if (in.size() < checkpoint::header_bytes + 4) return status{errc::truncated, "TAGC checkpoint shorter than its header"};
  if (load_le<std::uint32_t>(p) != checkpoint::magic) return status{errc::bad_magic, "not a TAGC checkpoint"};
  if (load_le<std::uint16_t>(p + 4) != checkpoint::version) return status{errc::unsupported_version, "TAGC checkpoint version is not 1"};
  if (load_le<std::uint16_t>(p + 6) != 0) return status{errc::bad_header, "reserved TAGC checkpoint field is not zero"};
  const std::uint64_t thresholds = load_le<std::uint32_t>(p + 44), residual = load_le<std::uint64_t>(p + 48);
  const std::uint64_t room = (in.size() - checkpoint::header_bytes - 4) / 4;
  if (thresholds > room || residual > room - thresholds) return status{errc::truncated, "TAGC checkpoint arrays truncated"};
  const std::size_t bytes = checkpoint::header_bytes + 4 * (thresholds + residual) + 4;
  if (in.size() != bytes) return status{errc::size_mismatch, "TAGC checkpoint has trailing bytes"};
  if (crc32c(in.first(bytes - 4)) != load_le<std::uint32_t>(p + bytes - 4))
    return status{errc::checksum_mismatch, "TAGC checkpoint CRC32C differs"};
  checkpoint_view v;
  v.codec_id = load_le<std::uint32_t>(p + 8);
  v.fingerprint = load_le<std::uint32_t>(p + 12);
  v.size = load_le<std::uint64_t>(p + 16);
  v.world = load_le<std::uint32_t>(p + 24);
  v.rank = load_le<std::uint32_t>(p + 28);
  v.step = load_le<std::uint64_t>(p + 32);
  v.key = load_le<std::uint32_t>(p + 40);
  if (v.world == 0 || v.rank >= v.world || thresholds != v.world || residual != v.size)
    return status{errc::bad_header, "TAGC checkpoint header is inconsistent (world, rank, array counts)"};
  v.thresholds = p + checkpoint::header_bytes;
  v.residual = v.thresholds + 4 * thresholds;
  return v;
}

}  // namespace gradcomp::tagc
