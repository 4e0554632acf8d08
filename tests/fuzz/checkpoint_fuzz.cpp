// libFuzzer target: restoring a checkpoint from untrusted bytes never crashes and, on
// error, leaves the state exactly as it was.

#include <gradcomp/gradcomp.hpp>

#include <array>
#include <cstdint>
#include <cstdlib>

using namespace gradcomp;

namespace {

using C = compressor<partition::whole, sparsify::topk, quantize::bf16, feedback::residual>;
constexpr std::size_t sizes = 64;  // states of 0 .. 63 elements

// A state of each size, residual 0, 1, 2, ... and step 7.
std::array<state, sizes> make_fresh(const C& comp) {
  std::array<state, sizes> fresh;
  for (std::size_t n = 0; n < sizes; ++n) {
    fresh[n] = comp.make_state(n);
    for (std::size_t i = 0; i < n; ++i) fresh[n].residual[i] = static_cast<float>(i);
    fresh[n].step = 7;
  }
  return fresh;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const C comp;
  static const std::array<state, sizes> fresh = make_fresh(comp);
  // The state restored into: as many elements (mod 64) as an image of `size` bytes holds
  // (checkpoint_bytes: an empty state's image and 4 bytes per element), so good images load.
  static const std::size_t empty = checkpoint_bytes(fresh[0]);
  const std::size_t n = (size >= empty ? (size - empty) / 4 : size) % sizes;
  // Reset by copy assignment, which reuses the buffers: a fresh state per execution would
  // allocate (and fault in) the selector's workspace every time.
  static state st;
  const state& before = fresh[n];
  st = before;
  const auto s = load_checkpoint(std::span(reinterpret_cast<const std::byte*>(data), size), comp.codec_id(), st);
  if (!s.ok() && (st.step != before.step || st.residual != before.residual)) std::abort();
  return 0;
}
