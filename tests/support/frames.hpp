#pragma once
// Helpers to inspect and tamper with frames in tests.

#include <gradcomp/core/frame.hpp>
#include <gradcomp/core/index_codec.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradcomp::test {

inline frame::header header_of(std::span<const std::byte> frame_bytes) { return *frame::parse(frame_bytes, false); }

// Frame boundaries within a payload of back-to-back frames.
inline std::vector<std::span<std::byte>> split_frames(std::span<std::byte> payload) {
  std::vector<std::span<std::byte>> frames;
  for (std::size_t at = 0; at < payload.size();) {
    const std::size_t size = header_of(payload.subspan(at)).frame_bytes();
    frames.push_back(payload.subspan(at, size));
    at += size;
  }
  return frames;
}

// The indices of a listed sparse frame (u32 list, delta or bitmap), ascending.
inline std::vector<std::uint32_t> frame_indices(std::span<const std::byte> frame_bytes) {
  const auto h = header_of(frame_bytes);
  std::vector<std::uint32_t> idx(h.kept_count);
  indices::reader(h.indices, frame_bytes.data() + h.index_offset(), h.index_bytes).next(idx.data(), idx.size());
  return idx;
}

// Recomputes a tampered frame's CRC, so that decoding reaches the field under test.
inline void reseal(std::span<std::byte> frame_bytes) { frame::seal(frame_bytes.first(header_of(frame_bytes).frame_bytes())); }

template <class T>
void poke(std::span<std::byte> frame_bytes, std::size_t offset, T value) {
  store_le<T>(frame_bytes.data() + offset, value);
}

}  // namespace gradcomp::test
