#pragma once
// AccTFM's hybrid compression for tensor (intra-layer) parallelism: the activations and
// activation gradients a tensor-parallel layer all-reduces, [tokens x hidden], go as
// token-level top-k (each token row keeps its k largest |x|) with the kept values in
// piecewise quantization (a dense centre and sparse tails per group, each with its own scale).
// No error feedback: activations change every step, so a residual would add stale values.
//
// The flow is the gather path: each rank compresses its partial result, the transport
// all-gathers the payloads, and every rank accumulates all of them, its own included (so
// every rank holds the same sum, bit for bit, as tensor parallelism requires):
//
//   using H = model::acctfm<4>;
//   H h(model::acctfm_config<4>(hidden, 1.0 / 8));
//   auto st = h.make_state(tokens * hidden);
//   auto sent = h.compress<float>(partial, st, payload);        // this rank's share
//   ... all-gather (back to back, or fixed slots of max_payload_bytes) ...
//   std::fill(sum.begin(), sum.end(), 0.0f);
//   model::accumulate_gathered<H, float>(h, gathered, slot_bytes, sum);

#include <cstddef>
#include <span>

#include "../compressor.hpp"
#include "../core/frame.hpp"
#include "../feedback/none.hpp"
#include "../partition/chunks.hpp"
#include "../quantize/piecewise.hpp"
#include "../sparsify/row_topk.hpp"
#include "../engine/frame_checks.hpp"

namespace gradcomp::model {

template <unsigned Bits = 4>
using acctfm = compressor<partition::chunks, sparsify::row_topk, quantize::piecewise<Bits>, feedback::none>;

// hidden: row length; density: fraction of each row kept (or k_per_row when non-zero);
// rows_per_chunk: token rows per frame (fp32 rows; bf16 buffers get twice as many, whole rows
// either way). group: values per piecewise (M, p), a power of two.
template <unsigned Bits = 4>
typename acctfm<Bits>::config acctfm_config(std::size_t hidden, double density, std::size_t rows_per_chunk = 256,
                                            std::size_t k_per_row = 0, std::size_t group = 128) {
  typename acctfm<Bits>::config c;
  c.partition.chunk_bytes = rows_per_chunk * hidden * sizeof(float);
  c.sparsify.cols = hidden;
  c.sparsify.density = density;
  c.sparsify.k_per_row = k_per_row;
  c.quantize.group = group;
  return c;
}

// out += the sum of every rank's payload in `gathered`. slot_bytes == 0: the payloads lie
// back to back (an all-gather with per-rank sizes); else each rank's payload starts a slot of
// slot_bytes (a fixed-size all-gather of max_payload_bytes), the rest of the slot unused.
// Every frame is checked before anything is added; on error `out` is untouched.
template <class C, gradient_element T>
status accumulate_gathered(const C& comp, std::span<const std::byte> gathered, std::size_t slot_bytes,
                           std::span<T> out) {
  if (slot_bytes == 0) return comp.template accumulate<T>(gathered, out);
  if (gathered.empty() || gathered.size() % slot_bytes != 0)
    return {errc::size_mismatch, "gathered bytes are not a whole number of slots"};
  const std::size_t frames = comp.template chunk_count<T>(out.size());
  for (int pass = 0; pass < 2; ++pass) {  // check every rank's frames, then add each rank's
    for (std::size_t r0 = 0; r0 < gathered.size(); r0 += slot_bytes) {
      const std::span<const std::byte> slot = gathered.subspan(r0, slot_bytes);
      std::size_t used = 0;
      for (std::size_t i = 0; i < frames; ++i) {
        const auto h = pass == 0 ? engine::detail::check_frame(comp, slot.subspan(used), out.size())
                                 : frame::parse_header(slot.data() + used, slot.size() - used);
        if (!h) return h.error();
        used += h->frame_bytes();
      }
      if (pass == 1)
        if (auto s = comp.template accumulate<T>(slot.first(used), out); !s) return s;
    }
  }
  return {};
}

}  // namespace gradcomp::model
