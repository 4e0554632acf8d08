// libFuzzer target: restoring a checkpoint from untrusted bytes never crashes and, on
// error, leaves the state exactly as it was.

#include <gradcomp/gradcomp.hpp>

#include <cstdint>
#include <cstdlib>

using namespace gradcomp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using C = compressor<partition::whole, sparsify::topk, quantize::bf16, feedback::residual>;
  const C comp;
  state st = comp.make_state(size % 64);
  for (std::size_t i = 0; i < st.residual.size(); ++i) st.residual[i] = static_cast<float>(i);
  st.step = 7;
  const state before = st;
  const auto s = load_checkpoint(std::span(reinterpret_cast<const std::byte*>(data), size), comp.codec_id(), st);
  if (!s.ok() && (st.step != before.step || st.residual != before.residual)) std::abort();
  return 0;
}
