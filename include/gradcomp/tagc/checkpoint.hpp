#pragma once
// Checkpoints of a TAGC rank's state (docs/wire-format.md, "TAGC checkpoint"): residual,
// per-shard thresholds, step and sampling key, in versioned, CRC32C-checked bytes.
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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "../core/byteio.hpp"
#include "../core/crc32c.hpp"
#include "../core/ids.hpp"
#include "codec.hpp"

namespace gradcomp::tagc {

namespace checkpoint {
inline constexpr std::uint32_t magic = ids::tag::tagc_checkpoint;  // bytes "GCTC"
inline constexpr std::uint16_t version = 1;
inline constexpr std::size_t header_bytes = 56;
}  // namespace checkpoint

inline std::size_t checkpoint_bytes(const state& s) {
  return checkpoint::header_bytes + 4 * (s.thresholds.size() + s.residual.size()) + 4;
}

// Layout: magic u32 | version u16 | 0 u16 | codec_id u32 | select_fingerprint u32 | size u64 |
// world u32 | rank u32 | step u64 | key u32 | threshold count u32 | residual count u64 |
// thresholds f32 x count | residual f32 x count | CRC32C u32 of everything before it.
inline result<std::size_t> save_checkpoint(const codec& c, const state& s, std::span<std::byte> out) {
  if (status v = c.validate(); !v) return v;
  const std::size_t bytes = checkpoint_bytes(s);
  if (out.size() < bytes) return status{errc::buffer_too_small, "checkpoint buffer smaller than checkpoint_bytes()"};
  std::byte* p = out.data();
  store_le<std::uint32_t>(p, checkpoint::magic);
  store_le<std::uint16_t>(p + 4, checkpoint::version);
  store_le<std::uint16_t>(p + 6, 0);
  store_le<std::uint32_t>(p + 8, c.codec_id());
  store_le<std::uint32_t>(p + 12, select_fingerprint(c.get_config()));
  store_le<std::uint64_t>(p + 16, s.size);
  store_le<std::uint32_t>(p + 24, s.world);
  store_le<std::uint32_t>(p + 28, s.rank);
  store_le<std::uint64_t>(p + 32, s.step);
  store_le<std::uint32_t>(p + 40, s.key);
  store_le<std::uint32_t>(p + 44, static_cast<std::uint32_t>(s.thresholds.size()));
  store_le<std::uint64_t>(p + 48, s.residual.size());
  std::byte* at = p + checkpoint::header_bytes;
  if (!s.thresholds.empty()) std::memcpy(at, s.thresholds.data(), 4 * s.thresholds.size());
  at += 4 * s.thresholds.size();
  if (!s.residual.empty()) std::memcpy(at, s.residual.data(), 4 * s.residual.size());
  store_le<std::uint32_t>(p + bytes - 4, crc32c(std::span<const std::byte>(p, bytes - 4)));
  return bytes;
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

namespace detail {
inline status check_owner(const codec& c, const checkpoint_view& v, const state& s) {
  if (v.codec_id != c.codec_id()) return {errc::codec_mismatch, "TAGC checkpoint made with another phase format (block, cells, bitmap, sizing)"};
  if (v.fingerprint != select_fingerprint(c.get_config()))
    return {errc::codec_mismatch, "TAGC checkpoint made with another threshold selection config"};
  if (v.size != s.size) return {errc::size_mismatch, "TAGC checkpoint holds another gradient size"};
  return {};
}
}  // namespace detail

// Restores `s` (from make_state of the same codec, size, world and rank); on error `s` is left
// as it was.
inline status load_checkpoint(const codec& c, std::span<const std::byte> in, state& s) {
  if (const auto d = c.describe(codec::bitmap_phase, s); !d) return d.error();
  const result<checkpoint_view> v = parse_checkpoint(in);
  if (!v) return v.error();
  if (status e = detail::check_owner(c, *v, s); !e) return e;
  if (v->world != s.world || v->rank != s.rank)
    return {errc::size_mismatch, "TAGC checkpoint made for another world size or rank (restore_elastic re-slices it)"};
  s.step = v->step;
  s.key = v->key;
  std::memcpy(s.thresholds.data(), v->thresholds, 4 * s.thresholds.size());
  if (!s.residual.empty()) std::memcpy(s.residual.data(), v->residual, 4 * s.residual.size());
  s.at = stage::encode_bitmap;
  return {};
}

// Restores rank s.rank of s.world from the checkpoints of every rank of a run of any world
// size (in any order); see the rule at the top. On error `s` is left as it was.
inline status restore_elastic(const codec& c, std::span<const std::span<const std::byte>> saved, state& s) {
  if (const auto d = c.describe(codec::bitmap_phase, s); !d) return d.error();
  if (saved.empty()) return {errc::invalid_argument, "restore_elastic needs the checkpoints of every saved rank"};
  std::vector<checkpoint_view> by_rank(saved.size());
  std::vector<bool> seen(saved.size(), false);
  for (const std::span<const std::byte> img : saved) {
    const result<checkpoint_view> v = parse_checkpoint(img);
    if (!v) return v.error();
    if (status e = detail::check_owner(c, *v, s); !e) return e;
    if (v->world != saved.size()) return {errc::size_mismatch, "restore_elastic got a number of checkpoints other than their world size"};
    if (seen[v->rank]) return {errc::invalid_argument, "restore_elastic got two checkpoints of the same rank"};
    seen[v->rank] = true;
    by_rank[v->rank] = *v;
  }
  for (const checkpoint_view& v : by_rank)
    if (v.step != by_rank[0].step || v.key != by_rank[0].key)
      return {errc::invalid_argument, "restore_elastic checkpoints differ in step or sampling key"};
  const chunk_range mine = summable::shard_of(s.size, s.world, s.rank);
  std::fill(s.residual.begin(), s.residual.end(), 0.0f);
  for (std::size_t j = mine.offset; j < mine.offset + mine.count; ++j) {
    float sum = by_rank[0].residual_at(j);
    for (std::size_t r = 1; r < by_rank.size(); ++r) sum = sum + by_rank[r].residual_at(j);
    s.residual[j] = sum;
  }
  std::fill(s.thresholds.begin(), s.thresholds.end(), 0.0f);
  s.step = by_rank[0].step;
  s.key = by_rank[0].key;
  s.at = stage::encode_bitmap;
  return {};
}

}  // namespace gradcomp::tagc
