// Sparse codecs: a selection of the elements, their values cast or quantized.
#include "sharded.hpp"  // codec.hpp and the sharded codec of every registered compressor

namespace gradcomp_py {

void add_sparse_codecs(std::vector<entry>& out) {
  namespace q = gc::quantize;
  namespace s = gc::sparsify;
  auto add = [&](const char* name, const char* what, factory f) { out.push_back({name, what, std::move(f)}); };
  add("topk", "exact top-k (density), bf16 values", [](const options& o) { return build_with_feedback<s::topk, q::bf16>(o, true); });
  add("topk_fp32", "exact top-k (density), fp32 values", [](const options& o) { return build_with_feedback<s::topk, q::none>(o, true); });
  add("topk_int8", "exact top-k (density), int8 values", [](const options& o) { return build_with_feedback<s::topk, q::int_block<8>>(o, true); });
  add("threshold", "sampled threshold (DGC or TAGC rule), bf16 values", [](const options& o) { return build_with_feedback<s::threshold, q::bf16>(o, true); });
  add("randomk", "random-k with a shared seed, bf16 values", [](const options& o) { return build_with_feedback<s::randomk, q::bf16>(o, true); });
}

}  // namespace gradcomp_py
