#pragma once
// A chunk's transform on the CPU (the executor's pass before selection and after decoding):
// the per-block functions of the transform policy inlined into each instruction-set version
// (cpu/dispatch.hpp), so their loops are vectorised for the CPU at hand. The same bits in
// every version: the per-block math is plain adds and multiplies in a fixed order.

#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../transform/policy.hpp"
#include "dispatch.hpp"

namespace gradcomp::cpu::detail {

// Chunk `chunk` of n values at x, in place: forward, or back (inverse).
template <transform_policy X>
void transform_chunk(const typename X::config& c, std::uint32_t chunk, float* x, std::size_t n, bool inverse) {
  run_best([&]() GRADCOMP_LOOP_BODY {
    alignas(64) float tmp[transform::max_block];
    const std::size_t block = X::block(c);
    for (std::size_t at = 0; at < n;) {
      const std::size_t b = transform::block_at(n, block, at);
      if (inverse) X::inverse_block(c, chunk, at, x + at, tmp, b);
      else X::forward_block(c, chunk, at, x + at, tmp, b);
      at += b;
    }
  });
}

}  // namespace gradcomp::cpu::detail
