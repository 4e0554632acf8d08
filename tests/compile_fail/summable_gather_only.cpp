// Summing the payloads of a gather-only codec (top-k frames: per-rank indices) is refused at
// compile time with a sentence that says what to do instead.
#include <gradcomp/gradcomp.hpp>

#include <cstddef>
#include <span>
#include <vector>

using frames = gradcomp::compressor<gradcomp::partition::whole, gradcomp::sparsify::topk, gradcomp::quantize::bf16,
                                    gradcomp::feedback::residual>;

int main() {
  const frames c;
  gradcomp::state st = c.make_state(8);
  std::vector<float> g(8), out(8);
  std::vector<std::byte> send(64), recv(64);
  const auto loopback = [](const gradcomp::summable::phase&, std::span<const std::byte> s, std::span<std::byte>) {
    return gradcomp::result<std::size_t>(s.size());
  };
  return gradcomp::summable::run_step(c, st, g, loopback, send, recv, out).ok() ? 0 : 1;
}
