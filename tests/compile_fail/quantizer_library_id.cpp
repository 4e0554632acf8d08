// A quantizer defined outside gradcomp with an id in the library's range (here bf16's, 2) is
// rejected: a receiver would otherwise take bf16 frames for its own. The message names the
// range left to users.
#include <gradcomp/gradcomp.hpp>

struct my_cast : gradcomp::ungrouped_quantizer {
  using code_type = std::uint16_t;
  static constexpr unsigned bits = 16;
  static constexpr std::uint8_t id = 2;
  static constexpr bool unbiased(const config&) { return false; }
  static constexpr bool summable = true;
  static code_type encode(const config&, const meta&, float, std::uint32_t) { return 0; }
  static float decode(const config&, const meta&, code_type) { return 0.0f; }
};

gradcomp::compressor<gradcomp::partition::whole, gradcomp::sparsify::dense, my_cast, gradcomp::feedback::none> c;
