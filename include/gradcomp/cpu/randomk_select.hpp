#pragma once
// Random-k's selection on the CPU: a keyed random k-subset of the chunk (core/permutation.hpp,
// keyed by seed, step and chunk), so the receiver draws the same indices and none are sent.
// With error feedback the chunk is still scanned, so that e holds x = combine(g, e) for encode.

#include <cstddef>
#include <cstdint>

#include "../core/permutation.hpp"
#include "selector.hpp"

namespace gradcomp::cpu::detail {

template <>
struct selector_for<selection::random> {
  template <class C>
  static std::size_t workspace_bytes(const C&, std::size_t) {
    return 0;
  }
  template <class In>
  static std::size_t select(const In& in, std::uint32_t* idx) {
    const std::size_t count = in.h.dense_count;
    const auto& cfg = in.comp.get_config();
    if constexpr (In::compressor::feedback::has_state)
      for (std::size_t j = 0; j < count; ++j) (void)in.fb.scan(j);
    const feistel_permutation pi(count, cfg.seed, in.h.step, in.h.chunk_id);
    for (std::size_t m = 0; m < in.h.kept_count; ++m) idx[m] = pi(static_cast<std::uint32_t>(m));
    return in.h.kept_count;
  }
};

}  // namespace gradcomp::cpu::detail
