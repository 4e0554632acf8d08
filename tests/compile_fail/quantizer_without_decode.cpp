// A tagged quantizer missing decode() is rejected with a message naming decode.
#include <gradcomp/gradcomp.hpp>

struct half_done {
  using policy_kind = gradcomp::quantizer_tag;
  struct config {};
  using code_type = std::uint8_t;
  static constexpr unsigned bits = 8;
  static constexpr std::uint8_t id = 99;
  static constexpr bool unbiased = false;
  static constexpr bool summable = false;
  static constexpr gradcomp::status validate(const config&) { return {}; }
  static constexpr std::uint16_t format_param(const config&) { return 0; }
  static code_type encode(const config&, float) { return 0; }
};

gradcomp::compressor<gradcomp::partition::whole, gradcomp::sparsify::dense, half_done, gradcomp::feedback::none> c;
