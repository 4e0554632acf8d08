// The GPU kernels of the codec table's sparse slice: exact top-k with bf16, fp32 and int8
// values, with and without feedback (threshold, random-k and AccTFM's row top-k run on the CPU
// only).

#include "device_impl.cuh"

namespace gradcomp_py {

GRADCOMP_PY_DEVICE_CODECS(sparse)

}  // namespace gradcomp_py
