#pragma once
// TAGC's routing: the big matrices (MLP, embeddings, LM head; attention when asked) to the
// sketch, the other tensors as bf16, tensors under a size as fp32.
//
// - Summable path (what TAGC does): model::split (split.hpp) cuts the buffer into these
//   three parts by tagc_routing(); tagc::codec runs over part 0, summable::cast<bf16> and
//   <none> over parts 1 and 2, each with the transport's sum (docs/model.md).
// - Gather path: tagc_router, a router whose first slot takes a gather-path compressor for
//   the same tensors. A count sketch is summed, not gathered, so that slot defaults to top-k
//   with bf16 values and residual feedback (any compressor with a codec id of its own fits).

#include <cstddef>

#include "../compressor.hpp"
#include "layout.hpp"
#include "../feedback/none.hpp"
#include "../feedback/residual.hpp"
#include "../partition/chunks.hpp"
#include "../quantize/bf16.hpp"
#include "../quantize/none.hpp"
#include "../sparsify/dense.hpp"
#include "../sparsify/topk.hpp"
#include "router.hpp"

namespace gradcomp::model {

using sketch_stand_in = compressor<partition::chunks, sparsify::topk, quantize::bf16, feedback::residual>;
using bf16_cast = compressor<partition::chunks, sparsify::dense, quantize::bf16, feedback::none>;
using fp32_plain = compressor<partition::chunks, sparsify::dense, quantize::none, feedback::none>;
template <class Sketch = sketch_stand_in>
using tagc_router = router<Sketch, bf16_cast, fp32_plain>;

inline constexpr std::size_t tagc_sketch_slot = 0, tagc_bf16_slot = 1, tagc_plain_slot = 2;

// MLP, embeddings and the LM head to the sketch slot, attention too when asked, the rest
// as bf16; tensors under small_elements uncompressed (fp32).
inline routing tagc_routing(bool compress_attention = false, std::size_t small_elements = std::size_t{1} << 16) {
  routing r;
  r.slot_of_role.fill(tagc_bf16_slot);
  for (role x : {role::mlp_in, role::mlp_out, role::embedding, role::lm_head})
    r.slot_of_role[static_cast<std::size_t>(x)] = tagc_sketch_slot;
  if (compress_attention)
    for (role x : {role::attention_qkv, role::attention_out}) r.slot_of_role[static_cast<std::size_t>(x)] = tagc_sketch_slot;
  r.small_elements = small_elements;
  r.small_slot = tagc_plain_slot;
  return r;
}

}  // namespace gradcomp::model
