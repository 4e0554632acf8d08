// A tagged quantizer missing decode() is rejected with a message naming decode.
#include <gradcomp/gradcomp.hpp>

struct half_done : gradcomp::ungrouped_quantizer {
  using code_type = std::uint8_t;
  static constexpr unsigned bits = 8;
  static constexpr std::uint8_t id = 199;
  static constexpr bool unbiased(const config&) { return false; }
  static constexpr bool summable = false;
  static code_type encode(const config&, const meta&, float, std::uint32_t) { return 0; }
};

gradcomp::compressor<gradcomp::partition::whole, gradcomp::sparsify::dense, half_done, gradcomp::feedback::none> c;
