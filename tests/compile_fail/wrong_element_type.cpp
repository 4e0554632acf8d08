// Gradients must be float or bf16_t: a double buffer is rejected by the gradient_element concept.
#include <gradcomp/gradcomp.hpp>

#include <vector>

int main() {
  gradcomp::compressor<gradcomp::partition::whole, gradcomp::sparsify::dense, gradcomp::quantize::bf16,
                       gradcomp::feedback::none>
      c;
  std::vector<double> g(4);
  auto st = c.make_state(4);
  std::vector<std::byte> out(1024);
  (void)c.compress<double>(g, st, out);
}
