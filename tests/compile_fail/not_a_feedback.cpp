// An int is no feedback policy.
#include <gradcomp/gradcomp.hpp>

gradcomp::compressor<gradcomp::partition::whole, gradcomp::sparsify::dense, gradcomp::quantize::bf16, int> c;
