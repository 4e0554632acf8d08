#pragma once
// CPU skeleton: software prefetch for loops that stream through inputs larger than the cache,
// so the loads of the next batch overlap the work on this one (the hardware prefetcher does
// not always run far enough ahead of a loop that stops to checksum and store a tile). A
// prefetch is a hint: it changes no result and never faults.

#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"

namespace gradcomp::cpu::detail {

// How far ahead, in values, the streaming loops ask for their inputs (4 KiB of fp32).
inline constexpr std::size_t prefetch_values_ahead = 1024;

// Asks for the cache lines that hold p[0 .. n); p[0 .. n) must lie in one array.
template <class T>
inline void prefetch(const T* p, std::size_t n) {
  constexpr std::uintptr_t line = 64;
  const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(p + n);
  for (std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p) & ~(line - 1); a < end; a += line)
    GRADCOMP_PREFETCH(reinterpret_cast<const void*>(a));
}

// For a loop about to work on elements [i, i + n) of [0, end): calls ahead(j, n) for the
// elements prefetch_values_ahead later, j = i + prefetch_values_ahead, when they exist.
template <class Prefetch>
inline void ask_ahead(Prefetch& ahead, std::size_t i, std::size_t n, std::size_t end) {
  if (const std::size_t j = i + prefetch_values_ahead; j + n <= end) ahead(j, n);
}

// The prefetch hook of a loop that has nothing worth prefetching.
struct no_prefetch {
  void operator()(std::size_t, std::size_t) const {}
};

}  // namespace gradcomp::cpu::detail
