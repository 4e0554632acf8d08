// The codec table's grouped slice (codecs.hpp). Dense codecs with other per-group codes: QSGD, TernGrad, sign, natural, piecewise.
#include "codecs.hpp"
#include "device.hpp"   // the GPU kernels of every registered compressor that has them
#include "localsteps.hpp"  // local steps over every registered compressor
#include "sharded.hpp"     // the sharded codec of every registered compressor

namespace gradcomp_py {

template void add_codecs<codec_slice::grouped>(std::vector<entry>& out);

}  // namespace gradcomp_py
