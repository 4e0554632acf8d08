#pragma once
// CRC-fixes each frame whose header parses, so that a fuzzer's mutations reach the checks
// behind the checksum.

#include <gradcomp/core/frame.hpp>

#include <cstddef>
#include <span>
#include <vector>

inline void reseal(std::vector<std::byte>& payload) {
  for (std::size_t at = 0; at < payload.size();) {
    const auto h = gradcomp::frame::parse_header(payload.data() + at, payload.size() - at);
    if (!h) return;
    gradcomp::frame::seal(std::span(payload).subspan(at, h->frame_bytes()));
    at += h->frame_bytes();
  }
}
