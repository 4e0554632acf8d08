// The device codecs of registry_grouped.cpp (QSGD, TernGrad, sign, natural, piecewise), with and
// without feedback.

#include "device_impl.cuh"

namespace gradcomp_py {

namespace q = gc::quantize;
using dense = gc::sparsify::dense;
GRADCOMP_PY_DEVICE_CODECS(dense, q::qsgd<4>)
GRADCOMP_PY_DEVICE_CODECS(dense, q::terngrad)
GRADCOMP_PY_DEVICE_CODECS(dense, q::sign)
GRADCOMP_PY_DEVICE_CODECS(dense, q::natural)
GRADCOMP_PY_DEVICE_CODECS(dense, q::piecewise<4>)

}  // namespace gradcomp_py
