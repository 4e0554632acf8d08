// A tagged quantizer without the group members (meta, fit, ...) is rejected with a message
// naming them.
#include <gradcomp/gradcomp.hpp>

struct no_groups {
  using policy_kind = gradcomp::quantizer_tag;
  struct config {};
  using code_type = std::uint8_t;
  static constexpr unsigned bits = 8;
  static constexpr gradcomp::status validate(const config&) { return {}; }
};

gradcomp::compressor<gradcomp::partition::whole, gradcomp::sparsify::dense, no_groups, gradcomp::feedback::none> c;
