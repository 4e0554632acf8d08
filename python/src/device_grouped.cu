// The GPU kernels of the codec table's grouped slice: QSGD, TernGrad, sign, natural, piecewise, with and without feedback.

#include "device_impl.cuh"

namespace gradcomp_py {

GRADCOMP_PY_DEVICE_CODECS(grouped)

}  // namespace gradcomp_py
