// Dense codecs: casts, fp8 and integer blocks over every element (registry_grouped.cpp: the rest).
#include "device.hpp"   // the GPU kernels of every registered compressor that has them
#include "sharded.hpp"  // codec.hpp and the sharded codec of every registered compressor

namespace gradcomp_py {

void add_dense_codecs(std::vector<entry>& out) {
  using D = gc::sparsify::dense;
  namespace q = gc::quantize;
  auto add = [&](const char* name, const char* what, factory f) { out.push_back({name, what, std::move(f)}); };
  add("fp32", "no compression (summable: all-reduce fp32)", [](const options& o) { return build_with_feedback<D, q::none>(o, false); });
  add("bf16", "bfloat16 cast (summable: all-reduce bf16)", [](const options& o) { return build_with_feedback<D, q::bf16>(o, false); });
  add("fp16", "float16 cast (summable: all-reduce fp16)", [](const options& o) { return build_with_feedback<D, q::fp16>(o, false); });
  add("fp8_e4m3", "fp8 e4m3, optionally scaled per group", [](const options& o) { return build_with_feedback<D, q::fp8<q::fp8_format::e4m3>>(o, false); });
  add("fp8_e5m2", "fp8 e5m2, optionally scaled per group", [](const options& o) { return build_with_feedback<D, q::fp8<q::fp8_format::e5m2>>(o, false); });
  add("int8", "8-bit integers, one scale per group", [](const options& o) { return build_with_feedback<D, q::int_block<8>>(o, false); });
  add("int4", "4-bit integers, one scale per group", [](const options& o) { return build_with_feedback<D, q::int_block<4>>(o, false); });
  add("int2", "2-bit integers, one scale per group", [](const options& o) { return build_with_feedback<D, q::int_block<2>>(o, true); });
}

}  // namespace gradcomp_py
