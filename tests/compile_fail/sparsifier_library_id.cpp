// A sparsifier defined outside gradcomp with an id in the library's range (here 6, the next
// free one, which a later library sparsifier may take) is rejected.
#include <gradcomp/gradcomp.hpp>

struct every_other {
  using policy_kind = gradcomp::sparsifier_tag;
  struct config {};
  static constexpr std::uint8_t id = 6;
  static constexpr bool is_dense = false;
  static constexpr gradcomp::selection kind = gradcomp::selection::exact_topk;
  static constexpr gradcomp::status validate(const config&) { return {}; }
  static std::size_t kept(const config&, std::size_t n) { return n / 2; }
};

gradcomp::compressor<gradcomp::partition::whole, every_other, gradcomp::quantize::bf16, gradcomp::feedback::none> c;
