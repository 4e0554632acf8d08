#pragma once
// CPU skeleton: decode one validated frame into (or onto) its chunk of the output, for any
// quantizer. A batch of whole groups (or ungrouped_block values) at a time: byte codes are
// read where they lie in the frame, narrower or wider ones unpacked into a local buffer, and
// each code becomes a value by the quantizer's decode(), in a loop the compilers vectorise
// (compiled once per instruction set: run_best). A table of every code's decoded value,
// looked up per code, measured slower for every quantizer (docs/design.md): a lookup is a
// gather, which the compilers emit as one scalar load per value.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../core/byteio.hpp"
#include "../core/concepts.hpp"
#include "../core/frame.hpp"
#include "../core/index_codec.hpp"
#include "../core/numeric.hpp"
#include "../core/permutation.hpp"
#include "dispatch.hpp"
#include "encode.hpp"
#include "stream.hpp"

namespace gradcomp::cpu::detail {

// The indices of a validated sparse frame, a block at a time, in value order: where[i] =
// index of value m0 + i, i < n. Listed frames read their index section; random-k frames
// evaluate the permutation their (seed, step, chunk) name.
struct listed_indices {
  indices::reader list;
  void next(std::size_t, std::size_t n, std::uint32_t* where) { list.next(where, n); }
};
struct seeded_indices {
  feistel_permutation pi;
  void next(std::size_t m0, std::size_t n, std::uint32_t* where) const {
    for (std::size_t i = 0; i < n; ++i) where[i] = pi(static_cast<std::uint32_t>(m0 + i));
  }
};

template <class C>
auto indices_of(const typename C::config& cfg, const frame::header& h, const std::byte* f) {
  if constexpr (C::kind == selection::random) {
    return seeded_indices{feistel_permutation(h.dense_count, cfg.seed, h.step, h.chunk_id)};
  } else {
    return listed_indices{indices::reader(h.indices, f + h.index_offset(), h.index_bytes)};
  }
}

// Decodes frame f (header h, validated) of composition C into out, the receiver's whole
// buffer: overwrites the frame's chunk (unsent elements become 0) or, with `add`, adds the
// decoded values to it. A dense decompress with `streaming` stores non-temporally.
template <class C, class T>
void apply_frame(const typename C::config& cfg, const frame::header& h, const std::byte* f, T* out, bool add,
                 bool streaming) {
  using Q = typename C::quantizer;
  using code_type = typename C::code_type;
  using meta_type = typename C::meta_type;
  constexpr unsigned bits = C::code_bits;
  constexpr bool dense = C::dense;
  streaming = dense && !add && streaming;
  T* const region = out + h.element_offset;
  if (!dense && !add)
    for (std::size_t j = 0; j < h.dense_count; ++j) region[j] = from_float<T>(0.0f);
  run_best([&]() GRADCOMP_LOOP_BODY {
    const auto qc = cfg.quantize;  // locals: output stores cannot alias them
    const std::size_t gs = Q::group_size(qc), block = gs ? gs : ungrouped_block;
    const std::size_t batch = block * batch_groups(gs);
    const std::byte* const values = f + h.value_offset();
    constexpr bool in_place = bits == 8 && sizeof(code_type) == 1;
    alignas(64) code_type unpacked[in_place ? 1 : max_group_size + 8];
    const code_type* codes = unpacked;
    alignas(64) T staged[dense ? max_group_size : 1];  // a streamed batch, before it goes out
    alignas(64) std::uint32_t where[dense ? 1 : max_group_size];
    auto sparse_indices = indices_of<C>(cfg, h, f);
    const auto value_of = [&](const meta_type& mt, std::size_t i) { return Q::decode(qc, mt, codes[i]); };
    for (std::size_t b0 = 0; b0 < h.kept_count; b0 += batch) {
      const std::size_t nb = std::min(batch, h.kept_count - b0);
      if constexpr (!dense) sparse_indices.next(b0, nb, where);
      for (std::size_t i0 = 0; i0 < nb; i0 += block) {
        const std::size_t i1 = std::min(nb, i0 + block);
        if constexpr (in_place) {
          codes = reinterpret_cast<const code_type*>(values) + b0;
        } else {
          unpack_codes<code_type, bits>(values, b0 + i0, i1 - i0, unpacked + i0);
        }
        const meta_type mt = gs ? C::group_meta(h, f, (b0 + i0) / gs) : meta_type{};
        if constexpr (dense) {
          T* const to = region + b0;
          if (add) {
            for (std::size_t i = i0; i < i1; ++i) to[i] = from_float<T>(canonical_nan(to_float(to[i]) + value_of(mt, i)));
          } else if (streaming) {
            for (std::size_t i = i0; i < i1; ++i) staged[i] = from_float<T>(value_of(mt, i));
          } else {
            for (std::size_t i = i0; i < i1; ++i) to[i] = from_float<T>(value_of(mt, i));
          }
        } else {
          for (std::size_t i = i0; i < i1; ++i) {
            T& to = region[where[i]];
            const float v = value_of(mt, i);
            to = from_float<T>(add ? canonical_nan(to_float(to) + v) : v);
          }
        }
      }
      if constexpr (dense)  // (a constant: sparse instantiations have no staging buffer to copy)
        if (streaming)
          detail::copy_tile(reinterpret_cast<std::byte*>(region + b0), reinterpret_cast<const std::byte*>(staged),
                            nb * sizeof(T), true);
    }
  });
  if (streaming) detail::streaming_fence();
}

}  // namespace gradcomp::cpu::detail
