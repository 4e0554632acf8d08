#pragma once
// Helpers to inspect and tamper with frames in tests.

#include <gradcomp/core/frame.hpp>

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

template <class T>
void poke(std::span<std::byte> frame_bytes, std::size_t offset, T value) {
  store_le<T>(frame_bytes.data() + offset, value);
}

}  // namespace gradcomp::test
