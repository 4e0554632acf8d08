#pragma once
// State that outlives a step: the step counter, the feedback residual and momentum, the
// threshold estimates and the selection workspace. The caller owns it (compressor::make_state
// sizes it once, outside the hot path) and can checkpoint it: save_checkpoint / load_checkpoint write and read a
// self-checking byte image (docs/wire-format.md, "Checkpoint").

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/byteio.hpp"
#include "core/crc32c.hpp"
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
inline constexpr std::uint32_t magic = ids::tag::checkpoint;  // bytes "GCST"
inline constexpr std::uint16_t version = 2;
inline constexpr std::size_t header_bytes = 56;
inline constexpr std::size_t v1_header_bytes = 40;  // version 1: residual only (still read)
}  // namespace checkpoint

inline std::size_t checkpoint_bytes(const state& s) {
  return checkpoint::header_bytes + 4 * (s.residual.size() + s.momentum.size() + s.thresholds.size()) + 4;
}

// Layout (version 2): magic u32 | version u16 | 0 u16 | codec_id u32 | 0 u32 | size u64 |
// step u64 | residual count u64 | momentum count u64 | threshold count u64 | residual f32 x
// count | momentum f32 x count | thresholds f32 x count | CRC32C u32 of everything before it.
// Version 1 is the same without the momentum and threshold counts and arrays.
inline result<std::size_t> save_checkpoint(const state& s, std::uint32_t codec_id, std::span<std::byte> out) {
  const std::size_t bytes = checkpoint_bytes(s);
  if (out.size() < bytes) return status{errc::buffer_too_small, "checkpoint buffer smaller than checkpoint_bytes()"};
  std::byte* p = out.data();
  store_checkpoint_head(p, checkpoint::magic, checkpoint::version, codec_id);
  store_le<std::uint32_t>(p + 12, 0);
  store_le<std::uint64_t>(p + 16, s.size);
  store_le<std::uint64_t>(p + 24, s.step);
  std::byte* at = p + checkpoint::header_bytes;
  std::size_t field = 32;
  for (const std::vector<float>* v : {&s.residual, &s.momentum, &s.thresholds}) {
    store_le<std::uint64_t>(p + field, v->size());
    field += 8;
    if (!v->empty()) std::memcpy(at, v->data(), 4 * v->size());
    at += 4 * v->size();
  }
  store_le<std::uint32_t>(p + bytes - 4, crc32c(std::span<const std::byte>(p, bytes - 4)));
  return bytes;
}

// Restores step, residual, momentum and thresholds into `s`, which must come from
// make_state() of the same compressor and size; on any error `s` is left as it was.
inline status load_checkpoint(std::span<const std::byte> in, std::uint32_t codec_id, state& s) {
  const std::byte* p = in.data();
  if (in.size() < checkpoint::v1_header_bytes + 4) return {errc::truncated, "checkpoint shorter than its header"};
  if (load_le<std::uint32_t>(p) != checkpoint::magic) return {errc::bad_magic, "not a gradcomp checkpoint"};
  const auto format = load_le<std::uint16_t>(p + 4);
  if (format != 1 && format != 2) return {errc::unsupported_version, "checkpoint version is not 1 or 2"};
  const std::size_t header = format == 1 ? checkpoint::v1_header_bytes : checkpoint::header_bytes;
  if (in.size() < header + 4) return {errc::truncated, "checkpoint shorter than its header"};
  if (load_le<std::uint16_t>(p + 6) != 0 || load_le<std::uint32_t>(p + 12) != 0)
    return {errc::bad_header, "reserved checkpoint field is not zero"};
  std::uint64_t counts[3] = {load_le<std::uint64_t>(p + 32), 0, 0};
  if (format == 2) counts[1] = load_le<std::uint64_t>(p + 40), counts[2] = load_le<std::uint64_t>(p + 48);
  std::uint64_t left = (in.size() - header - 4) / 4;  // floats the image can hold
  for (std::uint64_t c : counts) {
    if (c > left) return {errc::truncated, "checkpoint arrays truncated"};
    left -= c;
  }
  const std::size_t bytes = header + 4 * (counts[0] + counts[1] + counts[2]) + 4;
  if (in.size() != bytes) return {errc::size_mismatch, "checkpoint has trailing bytes"};
  if (crc32c(in.first(bytes - 4)) != load_le<std::uint32_t>(p + bytes - 4))
    return {errc::checksum_mismatch, "checkpoint CRC32C differs"};
  if (load_le<std::uint32_t>(p + 8) != codec_id) return {errc::codec_mismatch, "checkpoint made by another compressor"};
  if (load_le<std::uint64_t>(p + 16) != s.size || counts[0] != s.residual.size() || counts[1] != s.momentum.size() ||
      counts[2] != s.thresholds.size())
    return {errc::size_mismatch, "checkpoint size differs from the state's"};
  s.step = load_le<std::uint64_t>(p + 24);
  const std::byte* at = p + header;
  for (std::vector<float>* v : {&s.residual, &s.momentum, &s.thresholds}) {
    if (!v->empty()) std::memcpy(v->data(), at, 4 * v->size());
    at += 4 * v->size();
  }
  return {};
}

}  // namespace gradcomp
