#pragma once
// CPU skeleton: encode the values a frame sends, for any quantizer. A batch of whole groups
// (or ungrouped_block values) at a time: every group of the batch is fitted, random numbers
// drawn when the rounding is stochastic, every value encoded, and (with feedback) decoded
// again for the residual; the codes are packed into the value section, checksummed as they
// are written. The loops are plain per-value calls of the quantizer's own fit, encode and
// decode, compiled once per instruction set (run_best): the compilers vectorise them.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../core/concepts.hpp"
#include "../core/philox.hpp"
#include "dispatch.hpp"
#include "stream.hpp"

namespace gradcomp::cpu::detail {

// Values per block of encode_values() when the quantizer has no groups.
inline constexpr std::size_t ungrouped_block = 1024;

// Groups per batch: a batch's groups are all fitted before any is encoded, so the scalar
// tail of each fit (reductions, divisions) overlaps its neighbours' work.
constexpr std::size_t batch_groups(std::size_t gs) {
  return gs == 0 ? 1 : std::clamp<std::size_t>(ungrouped_block / gs, 1, 16);
}

// Where and how a frame's values are encoded.
template <class Quantizer>
struct value_section {
  typename Quantizer::config qc;
  std::byte* meta;    // the frame's meta section (group metadata, in group order)
  std::byte* values;  // the frame's value section
  std::size_t kept;   // values to encode
  bool streaming;     // non-temporal stores
  // counter-based randomness of stochastic rounding (core/philox.hpp)
  std::uint32_t seed;
  std::uint64_t step;
  std::uint32_t chunk;
};

// Encodes x_m, m < s.kept: load(m0, n, xs) returns x_m0 .. x_m0+n-1, put in xs (room for
// max_group_size floats) or where they already are; with FeedsBack, keep(m0, n, x, decoded)
// gets them back with their decoded values. Writes each group's meta and the packed codes;
// returns the CRC32C of the value bytes written.
template <class Quantizer, bool FeedsBack, class Load, class Keep>
std::uint32_t encode_values(const value_section<Quantizer>& s, Load&& load, Keep&& keep) {
  using code_type = typename Quantizer::code_type;
  using meta_type = typename Quantizer::meta;
  std::uint32_t crc = 0;
  run_best([&]() GRADCOMP_LOOP_BODY {
    // Locals: byte-sized code stores cannot alias them (a copy of the config included), so
    // the loops over a group vectorise.
    const auto qc = s.qc;
    const std::size_t gs = Quantizer::group_size(qc), block = gs ? gs : ungrouped_block;
    const std::size_t batch = block * batch_groups(gs);  // <= max_group_size
    const bool stochastic = Quantizer::stochastic(qc);
    alignas(64) float xs[max_group_size];
    alignas(64) float decoded[FeedsBack ? max_group_size : 1];
    alignas(64) std::uint32_t random[max_group_size + 64];
    meta_type metas[batch_groups(1)];
    packed_stream<code_type, Quantizer::bits> writer(s.values, s.streaming);
    static_assert(decltype(writer)::max_put >= max_group_size, "a batch must fit the writer's room");
    for (std::size_t m0 = 0; m0 < s.kept; m0 += batch) {
      const std::size_t n = std::min(batch, s.kept - m0);
      const std::size_t groups = (n + block - 1) / block;
      code_type* const out = writer.room();
      const float* const x = load(m0, n, xs);
      if (gs) {
        const std::size_t first = gs ? m0 / gs : 0;  // (the ?: keeps nvcc from flagging / 0 for casts)
        for (std::size_t q = 0; q < groups; ++q) metas[q] = Quantizer::fit(qc, x + q * gs, std::min(gs, n - q * gs));
        for (std::size_t q = 0; q < groups; ++q) Quantizer::store_meta(metas[q], s.meta + (first + q) * Quantizer::meta_bytes);
      }
      if (stochastic) {  // random[i] = random16_at(..., m0 + i): the batch form starts at a multiple of 8
        const std::size_t skip = m0 % 8;
        random16_fill(random, m0 - skip, n + skip, s.seed, s.step, s.chunk, random_stream::quantizer);
        if (skip)
          for (std::size_t i = 0; i < n; ++i) random[i] = random[i + skip];
      }
      for (std::size_t q = 0; q < groups; ++q) {
        const meta_type mt = gs ? metas[q] : meta_type{};
        const std::size_t i0 = q * block, i1 = std::min(n, i0 + block);
        if (stochastic) {
          for (std::size_t i = i0; i < i1; ++i) out[i] = Quantizer::encode(qc, mt, x[i], random[i]);
        } else {
          for (std::size_t i = i0; i < i1; ++i) out[i] = Quantizer::encode(qc, mt, x[i], 0);
        }
        if constexpr (FeedsBack)
          for (std::size_t i = i0; i < i1; ++i) decoded[i] = Quantizer::decode(qc, mt, out[i]);
      }
      if constexpr (FeedsBack) keep(m0, n, x, static_cast<const float*>(decoded));
      writer.commit(n);
    }
    crc = writer.finish();
  });
  return crc;
}

}  // namespace gradcomp::cpu::detail
