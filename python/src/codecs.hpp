#pragma once
// The codec table: every codec of the bindings, by name, as one row. The CPU registry
// (registry_*.cpp: add_codecs) and the GPU kernels (device*.cu: GRADCOMP_PY_DEVICE_CODECS) are
// both made from it, one slice of rows per translation unit to spread the compile time.
//
// A row: the slice (which registry_<slice>.cpp and device<_slice>.cu compile it), the sparsifier,
// the quantizer, the feedback rule, the transform (the identity unless named), the name and the
// description. A codec's options are the
// options() of its policies' configs (core/options.hpp) and the composition's own (codec.hpp).
// It has GPU kernels when its compositions are device_capable (device.hpp): nothing to declare.

#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

#include "codec.hpp"

namespace gradcomp_py {

// Error feedback: the `error_feedback` option chooses residual feedback or none, with this
// default; `acctfm`: none only, `cols` required, frames of whole rows (acctfm_options).
enum class feedback_rule { off, on, acctfm };

template <class...>
struct type_list {};

template <class S, class Q, feedback_rule R, class X>
struct codec_row {
  const char* name;
  const char* description;

  template <class F>
  using composition = gc::compressor<gc::partition::chunks, S, Q, F, X>;
  // What make() builds: without feedback and, unless acctfm, with residual feedback.
  using compositions = std::conditional_t<R == feedback_rule::acctfm, type_list<composition<gc::feedback::none>>,
                                          type_list<composition<gc::feedback::none>, composition<gc::feedback::residual>>>;

  static std::unique_ptr<codec> make(const options& o) {
    if constexpr (R == feedback_rule::acctfm) return build<S, Q, gc::feedback::none, X>(acctfm_options(o));
    else return build_with_feedback<S, Q, X>(o, R == feedback_rule::on);
  }
};

// One row in slice Here's table, none in another's.
template <codec_slice Here, codec_slice Slice, class S, class Q, feedback_rule R, class X = gc::transform::identity>
constexpr auto row(const char* name, const char* description) {
  if constexpr (Here == Slice) return std::tuple{codec_row<S, Q, R, X>{name, description}};
  else return std::tuple<>{};
}

// The rows of slice Here, in the registry's order (the slices: dense, grouped, sparse).
template <codec_slice Here>
constexpr auto codec_table() {
  namespace q = gc::quantize;
  namespace s = gc::sparsify;
  constexpr auto dense = codec_slice::dense, grouped = codec_slice::grouped, sparse = codec_slice::sparse;
  constexpr auto off = feedback_rule::off, on = feedback_rule::on, acctfm = feedback_rule::acctfm;
  using D = s::dense;
  using rotation = gc::transform::hadamard;
  using cosine = gc::transform::dct;
  return std::tuple_cat(
      row<Here, dense, D, q::none, off>("fp32", "no compression (summable: all-reduce fp32)"),
      row<Here, dense, D, q::bf16, off>("bf16", "bfloat16 cast (summable: all-reduce bf16)"),
      row<Here, dense, D, q::fp16, off>("fp16", "float16 cast (summable: all-reduce fp16)"),
      row<Here, dense, D, q::fp8<q::fp8_format::e4m3>, off>("fp8_e4m3", "fp8 e4m3, optionally scaled per group"),
      row<Here, dense, D, q::fp8<q::fp8_format::e5m2>, off>("fp8_e5m2", "fp8 e5m2, optionally scaled per group"),
      row<Here, dense, D, q::int_block<8>, off>("int8", "8-bit integers, one scale per group"),
      row<Here, dense, D, q::int_block<4>, off>("int4", "4-bit integers, one scale per group"),
      row<Here, dense, D, q::int_block<2>, on>("int2", "2-bit integers, one scale per group"),
      row<Here, dense, D, q::int_block<4>, off, rotation>("int4_rotated",
                                                        "4-bit integers after a seeded randomized Hadamard rotation"),
      row<Here, dense, D, q::int_block<2>, on, rotation>("int2_rotated",
                                                       "2-bit integers after a seeded randomized Hadamard rotation"),
      row<Here, grouped, D, q::qsgd<4>, off>("qsgd", "QSGD, 4-bit codes, one norm per group"),
      row<Here, grouped, D, q::terngrad, off>("terngrad", "TernGrad, 2 bits, one scale per group"),
      row<Here, grouped, D, q::sign, on>("sign", "1-bit sign with one scale per group"),
      row<Here, grouped, D, q::natural, off>("natural", "natural compression (9-bit power of two)"),
      row<Here, grouped, D, q::piecewise<4>, off>("piecewise4", "AccTFM piecewise quantization, 4 bits"),
      row<Here, sparse, s::topk, q::bf16, on>("topk", "exact top-k (density), bf16 values"),
      row<Here, sparse, s::topk, q::none, on>("topk_fp32", "exact top-k (density), fp32 values"),
      row<Here, sparse, s::topk, q::int_block<8>, on>("topk_int8", "exact top-k (density), int8 values"),
      row<Here, sparse, s::threshold, q::bf16, on>("threshold", "sampled threshold (DGC or TAGC rule), bf16 values"),
      // AccTFM's hybrid (gc::model::acctfm<4>): rows of `cols` values, whole rows per frame
      // (256 float32 rows unless chunk_bytes says otherwise), no error feedback.
      row<Here, sparse, s::row_topk, q::piecewise<4>, acctfm>(
          "acctfm", "AccTFM hybrid: token-level top-k (cols, density or k_per_row), piecewise 4-bit values"),
      row<Here, sparse, s::randomk, q::bf16, on>("randomk", "random-k with a shared seed, bf16 values"),
      // DeMo's exchange: the DCT of blocks of dct_block values, the k_per_row (or density)
      // largest coefficients of each row of `cols` values, bf16 values.
      row<Here, sparse, s::row_topk, q::bf16, off, cosine>(
          "dct_topk", "chunked DCT-II, then top-k per row of cols coefficients (cols, k_per_row or density), bf16 values"));
}

template <codec_slice Here>
void add_codecs(std::vector<entry>& out) {
  std::apply([&](const auto&... r) { (out.push_back({r.name, r.description, &std::remove_cvref_t<decltype(r)>::make}), ...); },
             codec_table<Here>());
}

}  // namespace gradcomp_py
