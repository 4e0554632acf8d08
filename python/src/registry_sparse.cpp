// Sparse codecs: a selection of the elements, their values cast or quantized.
#include "device.hpp"   // the GPU kernels of every registered compressor that has them
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
  // AccTFM's hybrid (gc::transformer::acctfm<4>): rows of `cols` values, whole rows per frame
  // (256 float32 rows unless chunk_bytes says otherwise), no error feedback.
  add("acctfm", "AccTFM hybrid: token-level top-k (cols, density or k_per_row), piecewise 4-bit values", [](const options& o) {
    if (const auto it = o.find("error_feedback"); it != o.end() && as_bool("error_feedback", it->second))
      bad_option("error_feedback", "is not available: activations are not re-sent");
    const auto cols = o.find("cols");
    if (cols == o.end()) bad_option("cols", "is required (the row length: hidden size)");
    options with = o;
    if (!with.contains("chunk_bytes")) with["chunk_bytes"] = 256 * as_int("cols", cols->second) * 4;
    return build<s::row_topk, q::piecewise<4>, gc::feedback::none>(with);
  });
  add("randomk", "random-k with a shared seed, bf16 values", [](const options& o) { return build_with_feedback<s::randomk, q::bf16>(o, true); });
}

}  // namespace gradcomp_py
