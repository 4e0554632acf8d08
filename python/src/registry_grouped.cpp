// Dense codecs with other per-group codes: QSGD, TernGrad, sign, natural, piecewise.
#include "device.hpp"   // the GPU kernels of every registered compressor that has them
#include "sharded.hpp"  // codec.hpp and the sharded codec of every registered compressor

namespace gradcomp_py {

void add_grouped_codecs(std::vector<entry>& out) {
  using D = gc::sparsify::dense;
  namespace q = gc::quantize;
  auto add = [&](const char* name, const char* what, factory f) { out.push_back({name, what, std::move(f)}); };
  add("qsgd", "QSGD, 4-bit codes, one norm per group", [](const options& o) { return build_with_feedback<D, q::qsgd<4>>(o, false); });
  add("terngrad", "TernGrad, 2 bits, one scale per group", [](const options& o) { return build_with_feedback<D, q::terngrad>(o, false); });
  add("sign", "1-bit sign with one scale per group", [](const options& o) { return build_with_feedback<D, q::sign>(o, true); });
  add("natural", "natural compression (9-bit power of two)", [](const options& o) { return build_with_feedback<D, q::natural>(o, false); });
  add("piecewise4", "AccTFM piecewise quantization, 4 bits", [](const options& o) { return build_with_feedback<D, q::piecewise<4>>(o, false); });
}

}  // namespace gradcomp_py
