// The device codecs of registry_sparse.cpp that have GPU kernels: exact top-k with bf16, fp32
// and int8 values, with and without feedback (threshold, random-k and AccTFM's row top-k run on
// the CPU only).

#include "device_impl.cuh"

namespace gradcomp_py {

namespace q = gc::quantize;
using topk = gc::sparsify::topk;
GRADCOMP_PY_DEVICE_CODECS(topk, q::bf16)
GRADCOMP_PY_DEVICE_CODECS(topk, q::none)
GRADCOMP_PY_DEVICE_CODECS(topk, q::int_block<8>)

}  // namespace gradcomp_py
