// The codec table's sparse slice (codecs.hpp). Sparse codecs: a selection of the elements, their values cast or quantized.
#include "codecs.hpp"
#include "device.hpp"   // the GPU kernels of every registered compressor that has them
#include "localsteps.hpp"  // local steps over every registered compressor
#include "sharded.hpp"     // the sharded codec of every registered compressor

namespace gradcomp_py {

template void add_codecs<codec_slice::sparse>(std::vector<entry>& out);

}  // namespace gradcomp_py
