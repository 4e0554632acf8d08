#pragma once
// How the CPU executor (cpu/executor.hpp) runs a sparse selection: selector_for<kind>,
// specialised in each selector's own header (cpu/topk_select.hpp, threshold_select.hpp,
// row_topk.hpp, randomk_select.hpp), gives
//   workspace_bytes(comp, count)   the scratch for a chunk of `count` elements
//   select(chunk, idx)             the chunk's sent indices into idx; returns their count
// so that a new selection is one header with one specialisation.

#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/bits.hpp"
#include "../core/concepts.hpp"
#include "../core/frame.hpp"
#include "../state.hpp"

namespace gradcomp::cpu::detail {

template <selection K>
struct selector_for;  // a kind without a specialisation has no CPU selection

// What a selection sees of one chunk: the compressor C, the state, the chunk's frame header
// (counts, step, chunk id), the feedback view Fb of x = combine(g, e), the selection's scratch,
// and where row top-k writes the kept values.
template <class C, class Fb>
struct chunk_input {
  using compressor = C;
  const C& comp;
  state& st;
  const frame::header& h;
  const Fb& fb;
  std::span<std::byte> scratch;
  float* values;
  // |x| as a key: peeked (nothing written), scanned (x computed once and kept in e, where
  // encode reads it), read back after the scan.
  auto peek_key() const {
    return [&f = fb](std::size_t j) { return abs_key(f.peek(j)); };
  }
  auto scan_key() const {
    return [&f = fb](std::size_t j) { return abs_key(f.scan(j)); };
  }
  auto key_at() const {
    return [&f = fb](std::size_t j) { return abs_key(f.value(j)); };
  }
};

}  // namespace gradcomp::cpu::detail
