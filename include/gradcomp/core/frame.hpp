#pragma once
// Frame format v1: one self-describing frame per compressed chunk (docs/wire-format.md).
//
//   header (88 bytes, little-endian) | meta | pad | indices | pad | values | pad
//
// Each section starts 8-byte aligned relative to the frame start, and padding bytes are zero.
// The CRC32C covers header bytes [0, 84) followed by everything after the header.
// parse() treats bytes as untrusted: every field is validated before a caller may use it.

#include <cstddef>
#include <cstdint>
#include <span>

#include "byteio.hpp"
#include "crc32c.hpp"
#include "ids.hpp"
#include "numeric.hpp"
#include "status.hpp"

namespace gradcomp::frame {

inline constexpr std::uint32_t magic = ids::tag::frame;  // bytes "GCFR"
inline constexpr std::uint16_t version = 1;
inline constexpr std::size_t header_bytes = 88;
inline constexpr std::size_t crc_offset = 84;

enum class index_format : std::uint8_t {
  none = 0,      // dense: value i belongs to element i
  u32_list = 1,  // kept_count strictly ascending u32 indices
  delta = 2,     // gaps between ascending indices, bit-packed at one width (core/index_codec.hpp)
  bitmap = 3,    // one bit per element of the chunk, set where a value is sent
  seeded = 4,    // no index section: the indices follow from (seed, step, chunk) (random-k)
};

struct header {
  std::uint32_t codec_id = 0;
  dtype source_dtype = dtype::f32;
  index_format indices = index_format::none;
  std::uint16_t flags = 0;
  std::uint32_t chunk_id = 0;
  std::uint32_t transform = 0;       // the transform's word (transform/policy.hpp); 0: identity
  std::uint64_t step = 0;
  std::uint64_t element_offset = 0;
  std::uint64_t dense_count = 0;
  std::uint64_t kept_count = 0;
  std::uint64_t meta_bytes = 0;
  std::uint64_t index_bytes = 0;
  std::uint64_t value_bytes = 0;
  std::uint32_t transform_seed = 0;  // the transform's key (randomized Hadamard); 0 otherwise
  std::uint32_t crc = 0;

  GRADCOMP_HD constexpr std::size_t meta_offset() const { return header_bytes; }
  GRADCOMP_HD constexpr std::size_t index_offset() const { return meta_offset() + align8(meta_bytes); }
  GRADCOMP_HD constexpr std::size_t value_offset() const { return index_offset() + align8(index_bytes); }
  GRADCOMP_HD constexpr std::size_t frame_bytes() const { return value_offset() + align8(value_bytes); }
};

// Writes every header field but the CRC (written by seal()).
GRADCOMP_HD inline void write_header(const header& h, std::byte* out) {
  store_le<std::uint32_t>(out + 0, magic);
  store_le<std::uint16_t>(out + 4, version);
  store_le<std::uint16_t>(out + 6, static_cast<std::uint16_t>(header_bytes));
  store_le<std::uint32_t>(out + 8, h.codec_id);
  store_le<std::uint8_t>(out + 12, static_cast<std::uint8_t>(h.source_dtype));
  store_le<std::uint8_t>(out + 13, static_cast<std::uint8_t>(h.indices));
  store_le<std::uint16_t>(out + 14, h.flags);
  store_le<std::uint32_t>(out + 16, h.chunk_id);
  store_le<std::uint32_t>(out + 20, h.transform);
  store_le<std::uint64_t>(out + 24, h.step);
  store_le<std::uint64_t>(out + 32, h.element_offset);
  store_le<std::uint64_t>(out + 40, h.dense_count);
  store_le<std::uint64_t>(out + 48, h.kept_count);
  store_le<std::uint64_t>(out + 56, h.meta_bytes);
  store_le<std::uint64_t>(out + 64, h.index_bytes);
  store_le<std::uint64_t>(out + 72, h.value_bytes);
  store_le<std::uint32_t>(out + 80, h.transform_seed);
  store_le<std::uint32_t>(out + crc_offset, 0);
}

// Zeroes the padding after each section of a frame whose header is written.
inline void zero_padding(const header& h, std::byte* frame) {
  const auto pad = [&](std::size_t offset, std::uint64_t size) {
    for (std::size_t i = offset + size; i < align8(offset + size); ++i) frame[i] = std::byte{0};
  };
  pad(h.meta_offset(), h.meta_bytes);
  pad(h.index_offset(), h.index_bytes);
  pad(h.value_offset(), h.value_bytes);
}

// A frame's CRC32C covers header bytes [0, 84) followed by the body (everything after the
// header). crc_through(frame, to): the CRC of header bytes [0, 84) and body bytes up to `to`.
inline std::uint32_t crc_through(const std::byte* frame, std::size_t to) {
  return crc32c(std::span<const std::byte>(frame + header_bytes, to - header_bytes),
                crc32c(std::span<const std::byte>(frame, crc_offset)));
}

// Stores the CRC of a complete frame (header written, sections and padding filled), given
// the CRC32C of its bytes [from, end) alone, when the writer already has it: one
// crc32c_combine, the bytes before `from` are read again.
inline void seal(std::span<std::byte> frame, std::size_t from, std::uint32_t rest_crc) {
  store_le<std::uint32_t>(frame.data() + crc_offset,
                          crc32c_combine(crc_through(frame.data(), from), rest_crc, frame.size() - from));
}
inline void seal(std::span<std::byte> frame) {
  store_le<std::uint32_t>(frame.data() + crc_offset, crc_through(frame.data(), frame.size()));
}

// Parses and validates the header of the frame at p, of which `size` bytes are readable
// (more frames may follow). Checks, in order: length, magic, version, header size, reserved
// bits (the transform word's top half; a seed without a transform) and flags, known dtype and index format, kept_count <= dense_count, section sizes
// within `size`, zero padding. Host and device; the CRC is checked by parse().
GRADCOMP_HD inline result<header> parse_header(const std::byte* p, std::uint64_t size) {
  if (size < header_bytes) return status{errc::truncated, "fewer bytes than a frame header"};
  if (load_le<std::uint32_t>(p) != magic) return status{errc::bad_magic, "frame does not start with GCFR"};
  if (load_le<std::uint16_t>(p + 4) != version) return status{errc::unsupported_version, "frame version is not 1"};
  if (load_le<std::uint16_t>(p + 6) != header_bytes) return status{errc::bad_header, "header size is not 88"};
  header h;
  h.transform = load_le<std::uint32_t>(p + 20);
  h.transform_seed = load_le<std::uint32_t>(p + 80);
  if ((h.transform >> 16) != 0 || (h.transform == 0 && h.transform_seed != 0))
    return status{errc::bad_header, "reserved header field is not zero"};
  h.codec_id = load_le<std::uint32_t>(p + 8);
  const auto dt = load_le<std::uint8_t>(p + 12);
  if (dt != static_cast<std::uint8_t>(dtype::f32) && dt != static_cast<std::uint8_t>(dtype::bf16))
    return status{errc::bad_header, "unknown source dtype"};
  h.source_dtype = static_cast<dtype>(dt);
  const auto fmt = load_le<std::uint8_t>(p + 13);
  if (fmt > static_cast<std::uint8_t>(index_format::seeded)) return status{errc::bad_header, "unknown index format"};
  h.indices = static_cast<index_format>(fmt);
  h.flags = load_le<std::uint16_t>(p + 14);
  if (h.flags != 0) return status{errc::bad_header, "unknown flags set"};
  h.chunk_id = load_le<std::uint32_t>(p + 16);
  h.step = load_le<std::uint64_t>(p + 24);
  h.element_offset = load_le<std::uint64_t>(p + 32);
  h.dense_count = load_le<std::uint64_t>(p + 40);
  h.kept_count = load_le<std::uint64_t>(p + 48);
  h.meta_bytes = load_le<std::uint64_t>(p + 56);
  h.index_bytes = load_le<std::uint64_t>(p + 64);
  h.value_bytes = load_le<std::uint64_t>(p + 72);
  h.crc = load_le<std::uint32_t>(p + crc_offset);
  if (h.kept_count > h.dense_count) return status{errc::count_too_large, "kept count exceeds dense count"};

  // Section sizes are checked one at a time against what is left, so no sum can overflow.
  const std::uint64_t sections[3] = {h.meta_bytes, h.index_bytes, h.value_bytes};
  std::uint64_t left = size - header_bytes;
  for (std::uint64_t section : sections) {
    if (section > left || align8(section) > left) return status{errc::truncated, "section extends past the end"};
    left -= align8(section);
  }
  const std::size_t ends[3] = {h.meta_offset() + h.meta_bytes, h.index_offset() + h.index_bytes,
                               h.value_offset() + h.value_bytes};
  for (std::size_t end : ends)
    for (std::size_t i = end; i < align8(end); ++i)
      if (p[i] != std::byte{0}) return status{errc::bad_header, "padding byte is not zero"};
  return h;
}

// parse_header() followed by the CRC check (when verify_crc) over the frame's bytes.
inline result<header> parse(std::span<const std::byte> bytes, bool verify_crc = true) {
  auto h = parse_header(bytes.data(), bytes.size());
  if (!h || !verify_crc) return h;
  if (crc_through(bytes.data(), h->frame_bytes()) != h->crc)
    return status{errc::checksum_mismatch, "frame CRC32C differs"};
  return h;
}

}  // namespace gradcomp::frame
