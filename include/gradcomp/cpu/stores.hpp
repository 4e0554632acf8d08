#pragma once
// How the CPU backend writes a call's large outputs (compressor::config::stores): decided by
// the call's own output size (automatic: non-temporal stores from streaming_store_bytes on),
// or always (streaming), or never (cached). A call sees only its own output: a trainer that
// decompresses a large buffer one chunk per call and reads it only later says streaming; one
// that reads each compressed frame at once says cached. The bytes written are the same.

#include <cstddef>
#include <cstdint>

namespace gradcomp::cpu {

// Outputs at least this large are written with non-temporal stores (smaller ones are likely
// to stay in the last-level cache, where plain stores are faster).
inline constexpr std::size_t streaming_store_bytes = std::size_t{8} << 20;

enum class stores : std::uint8_t { automatic, streaming, cached };

constexpr bool streaming_stores(stores policy, std::size_t output_bytes) {
  return policy == stores::streaming || (policy == stores::automatic && output_bytes >= streaming_store_bytes);
}

}  // namespace gradcomp::cpu
