// The codec table's dense slice (codecs.hpp). Dense codecs: casts, fp8 and integer blocks over every element.
#include "codecs.hpp"
#include "device.hpp"   // the GPU kernels of every registered compressor that has them
#include "localsteps.hpp"  // local steps over every registered compressor
#include "sharded.hpp"     // the sharded codec of every registered compressor

namespace gradcomp_py {

template void add_codecs<codec_slice::dense>(std::vector<entry>& out);

}  // namespace gradcomp_py
