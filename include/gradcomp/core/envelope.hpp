#pragma once
// The envelope every checkpoint is written in (docs/wire-format.md, "Checkpoint envelope"): a
// 16-byte header, the kind's payload, and a CRC32C of everything before it. seal writes it and
// open checks it, once for every kind (state.hpp, tagc/checkpoint.hpp, sharded/checkpoint.hpp,
// localsteps/checkpoint.hpp); each kind lays out and checks only its payload.
//
//   offset  size  field
//        0     4  magic: the kind's tag (ids::tag)
//        4     2  version of the kind's payload format
//        6     2  reserved 0
//        8     8  payload bytes L
//       16     L  payload
//   16 + L     4  CRC32C of bytes [0, 16 + L)

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "byteio.hpp"
#include "crc32c.hpp"
#include "status.hpp"

namespace gradcomp::envelope {

inline constexpr std::size_t header_bytes = 16;
inline constexpr std::size_t overhead = header_bytes + 4;  // the header and the CRC

// A kind of checkpoint: its tag and the one payload version this build writes and reads.
struct kind {
  std::uint32_t magic = 0;
  std::uint16_t version = 0;
};

// A payload's fixed fields, one after another, each as wide as its type (std::uint16_t,
// std::uint32_t, std::uint64_t): the argument list is the layout. Each returns the position
// after the fields.
template <class T>
inline constexpr bool is_field_v = std::is_same_v<T, std::uint16_t> || std::is_same_v<T, std::uint32_t> || std::is_same_v<T, std::uint64_t>;

template <class... T>
std::byte* store_fields(std::byte* at, T... v) {
  static_assert((is_field_v<T> && ...), "checkpoint fields are std::uint16_t, std::uint32_t or std::uint64_t");
  ((store_le<T>(at, v), at += sizeof(T)), ...);
  return at;
}
template <class... T>
const std::byte* load_fields(const std::byte* at, T&... v) {
  static_assert((is_field_v<T> && ...), "checkpoint fields are std::uint16_t, std::uint32_t or std::uint64_t");
  ((v = load_le<T>(at), at += sizeof(T)), ...);
  return at;
}

// The payload's bytes within an image of overhead + payload bytes.
inline std::span<std::byte> payload_of(std::span<std::byte> image) {
  return image.subspan(header_bytes, image.size() - overhead);
}

// Writes the header and the CRC around the payload already in payload_of(image).
inline void seal(kind k, std::span<std::byte> image) {
  std::byte* p = image.data();
  store_fields(p, k.magic, k.version, std::uint16_t{0}, std::uint64_t{image.size() - overhead});
  store_le<std::uint32_t>(p + image.size() - 4, crc32c(image.first(image.size() - 4)));
}

// The payload of an image of kind k, checked in this order: length (truncated), magic
// (bad_magic), version (unsupported_version), reserved field (bad_header), payload length
// against the image (truncated; size_mismatch for trailing bytes), CRC32C (checksum_mismatch).
inline result<std::span<const std::byte>> open(kind k, std::span<const std::byte> in) {
  if (in.size() < overhead) return status{errc::truncated, "checkpoint shorter than its envelope"};
  const std::byte* p = in.data();
  std::uint32_t magic = 0;
  std::uint16_t version = 0, reserved = 0;
  std::uint64_t payload = 0;
  load_fields(p, magic, version, reserved, payload);
  if (magic != k.magic) return status{errc::bad_magic, "not a checkpoint of this kind (magic)"};
  if (version < k.version)
    return status{errc::unsupported_version, "checkpoint of an older format version, which this build does not read"};
  if (version > k.version) return status{errc::unsupported_version, "checkpoint of a newer format version than this build reads"};
  if (reserved != 0) return status{errc::bad_header, "reserved checkpoint envelope field is not zero"};
  if (payload > in.size() - overhead) return status{errc::truncated, "checkpoint shorter than its payload length"};
  if (payload < in.size() - overhead) return status{errc::size_mismatch, "checkpoint has trailing bytes"};
  if (crc32c(in.first(in.size() - 4)) != load_le<std::uint32_t>(p + in.size() - 4))
    return status{errc::checksum_mismatch, "checkpoint CRC32C differs"};
  return in.subspan(header_bytes, payload);
}

// f32 arrays of a payload (little-endian hosts: the bytes of the floats): each returns the
// position after the array.
inline std::byte* store_floats(std::byte* at, const std::vector<float>& v) {
  if (!v.empty()) std::memcpy(at, v.data(), 4 * v.size());
  return at + 4 * v.size();
}
inline const std::byte* load_floats(const std::byte* at, std::vector<float>& v) {
  if (!v.empty()) std::memcpy(v.data(), at, 4 * v.size());
  return at + 4 * v.size();
}

}  // namespace gradcomp::envelope
