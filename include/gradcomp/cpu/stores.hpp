#pragma once
// The CPU backend's reading of the stores option (core/stores.hpp): automatic means
// non-temporal stores from streaming_store_bytes of output on.

#include <cstddef>

#include "../core/stores.hpp"

namespace gradcomp::cpu {

// Outputs at least this large are written with non-temporal stores (smaller ones are likely
// to stay in the last-level cache, where plain stores are faster).
inline constexpr std::size_t streaming_store_bytes = std::size_t{8} << 20;

constexpr bool streaming_stores(stores policy, std::size_t output_bytes) {
  return policy == stores::streaming || (policy == stores::automatic && output_bytes >= streaming_store_bytes);
}

}  // namespace gradcomp::cpu
