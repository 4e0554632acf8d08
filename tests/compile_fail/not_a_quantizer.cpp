// A type without the quantizer tag is rejected, and the message says what is missing.
#include <gradcomp/gradcomp.hpp>

struct my_quantizer {  // forgot `using policy_kind = gradcomp::quantizer_tag;`
  struct config {};
};

gradcomp::compressor<gradcomp::partition::whole, gradcomp::sparsify::dense, my_quantizer, gradcomp::feedback::none> c;
